// CPU reduction kernels.
#include "kernels/cpu/reduce.h"

#include "kernels/cpu/reduce_loops.h"

namespace ember::cpu {

ReducePlan make_reduce_plan(const Tensor& in, const Shape& dims) {
  ReducePlan p;
  size_t j = 0;
  for (int64_t d = 0; d < in.dim(); ++d) {
    bool reduced = j < dims.size() && dims[j] == d;
    if (reduced) ++j;
    (reduced ? p.inner_sizes : p.outer_sizes).push_back(in.sizes()[d]);
    (reduced ? p.inner_strides : p.outer_strides).push_back(in.strides()[d]);
  }
  p.outer_numel = shape_numel(p.outer_sizes);
  p.inner_numel = shape_numel(p.inner_sizes);
  return p;
}

void sum(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  visit_numeric(in[0].dtype(), "sum", [&]<class T>() {
    using Acc = acc_t<T>;
    reduce_rows<T, T>(
        in[0], out[0], a.dims, Acc(0), [](Acc& acc, auto v, int64_t) { acc += Acc(v); },
        [](Acc acc, int64_t) { return T(compute_t<T>(acc)); });
  });
}

}  // namespace ember::cpu
