// CPU kernel of cat: each input is copied into its slab of the output by the strided copy
// loop (which vectorizes contiguous rows and threads large copies).
#include "core/make_tensor.h"
#include "kernels/cpu/index.h"
#include "kernels/cpu/pointwise.h"

namespace ember::cpu {

void cat(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  const Tensor& o = out[0];
  const int64_t d = a.dim;
  int64_t start = 0;
  for (const Tensor& t : in) {
    const int64_t len = t.sizes()[d];
    if (t.numel() > 0) {
      Shape sizes = o.sizes();
      sizes[d] = len;
      Tensor dst[1] = {
          make_view(o, sizes, o.strides(), o.storage_offset() + start * o.strides()[d])};
      Tensor src[1] = {t};
      clone(src, dst, Attrs{});
    }
    start += len;
  }
}

}  // namespace ember::cpu
