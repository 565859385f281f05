// CPU kernels of tril and triu: keep the elements on one side of a diagonal of the last two
// dims, zero the rest. Zero is all-zero bits in every dtype, so the kernel only moves bits.
#include <algorithm>

#include "kernels/cpu/index.h"
#include "kernels/cpu/index_util.h"

namespace ember::cpu {

namespace {
// Row i of a matrix keeps columns [keep_begin, keep_end): tril keeps j <= i + k, triu j >= i + k.
template <bool kLower>
void tri(const Tensor& x, const Tensor& o, int64_t k) {
  const int64_t nd = x.dim(), rows = x.sizes()[nd - 2], cols = x.sizes()[nd - 1];
  const int64_t rs = x.strides()[nd - 2], cs = x.strides()[nd - 1];
  const std::vector<int64_t> bt = offset_table(x.sizes(), x.strides(), 0, nd - 2);
  const int64_t total_rows = int64_t(bt.size()) * rows;
  visit_bits(x.dtype(), [&]<class U>() {
    const U* xp = static_cast<const U*>(x.impl()->data());
    U* op = static_cast<U*>(o.impl()->data());
#pragma omp parallel for if (total_rows * cols >= kParallelGrain && total_rows > 1)
    for (int64_t r = 0; r < total_rows; ++r) {
      const int64_t i = r % rows;
      const U* src = xp + bt[r / rows] + i * rs;
      U* dst = op + r * cols;
      const int64_t edge = std::clamp<int64_t>(kLower ? i + k + 1 : i + k, 0, cols);
      const int64_t keep_begin = kLower ? 0 : edge, keep_end = kLower ? edge : cols;
      for (int64_t j = 0; j < keep_begin; ++j) dst[j] = U(0);
      if (cs == 1) {
        for (int64_t j = keep_begin; j < keep_end; ++j) dst[j] = src[j];
      } else {
        for (int64_t j = keep_begin; j < keep_end; ++j) dst[j] = src[j * cs];
      }
      for (int64_t j = keep_end; j < cols; ++j) dst[j] = U(0);
    }
  });
}
}  // namespace

void tril(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  tri<true>(in[0], out[0], a.start);
}
void triu(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  tri<false>(in[0], out[0], a.start);
}

}  // namespace ember::cpu
