// nonzero: the indices of the non-zero elements. Its output size depends on the input's
// values, so its shape rule reads the data and capture breaks the graph here.
#include <cstring>

#include "kernels/cpu/dtype_visit.h"
#include "kernels/cpu/index_util.h"
#include "ops/frontend.h"

namespace ember {

namespace {

// Calls f(flat_position, is_nonzero) over x's elements in row-major order.
template <class F>
void each_element(const Tensor& x, F&& f) {
  const Tensor c = cpu::contiguous_copy(x);
  const int64_t n = c.numel();
  cpu::visit_all(c.dtype(), "nonzero", [&]<class T>() {
    const T* p = static_cast<const T*>(c.impl()->data());
    for (int64_t i = 0; i < n; ++i) f(i, cpu::compute_t<T>(p[i]) != cpu::compute_t<T>(0));
  });
}

int64_t count_nonzero(const Tensor& x) {
  EMBER_CHECK(!x.is_symbolic(),
              "nonzero: the output size depends on the input's values, which a symbolic "
              "tensor does not have");
  int64_t count = 0;
  // The shape rule reads values on the host (a GPU tensor's through a copy).
  each_element(x.device().type == DeviceType::CPU ? x : x.cpu(),
               [&](int64_t, bool nz) { count += nz; });
  return count;
}

MetaList infer_nonzero(std::span<const Tensor> in, const Attrs&) {
  return {TensorMeta{{count_nonzero(in[0]), in[0].dim()}, {}, 0, DType::Int64}};
}

void nonzero_cpu(std::span<const Tensor> in, std::span<Tensor> out, const Attrs&) {
  const Tensor& x = in[0];
  const int64_t nd = x.dim();
  const Shape& sizes = x.sizes();
  int64_t* o = static_cast<int64_t*>(out[0].impl()->data());
  const int64_t capacity = out[0].numel();
  int64_t written = 0;
  each_element(x, [&](int64_t flat, bool nz) {
    if (!nz) return;
    EMBER_CHECK(written + nd <= capacity,
                "nonzero: the input changed between the shape rule and the kernel");
    for (int64_t d = nd - 1; d >= 0; --d) {
      o[written + d] = flat % sizes[d];
      flat /= sizes[d];
    }
    written += nd;
  });
}

}  // namespace

const OpImpl op_impl_nonzero{infer_nonzero, nonzero_cpu, nullptr};

Tensor nonzero(const Tensor& x, ember::SourceLocation loc) {
  EMBER_CHECK(x.defined(), "nonzero: undefined tensor argument");
  CallSiteScope site(loc);
  return dispatch1(OpId::nonzero, {x});
}

}  // namespace ember
