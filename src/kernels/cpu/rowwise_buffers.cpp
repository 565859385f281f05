// Buffers of the row-wise kernels: widening, packing and storing back.
#include "kernels/cpu/rowwise_buffers.h"

#include "core/make_tensor.h"
#include "kernels/cpu/pointwise.h"

namespace ember::cpu {

namespace {
void copy_into(const Tensor& src, const Tensor& dst) {
  Tensor s[1] = {src};
  Tensor d[1] = {dst};
  if (src.dtype() == dst.dtype())
    clone(s, d, Attrs{});
  else
    cast(s, d, Attrs{});
}
}  // namespace

Tensor compute_contiguous(const Tensor& t) {
  DType c = compute_dtype(t.dtype());
  if (t.dtype() == c && t.is_contiguous()) return t;
  Tensor out = make_tensor(t.sizes(), c, t.device());
  if (t.numel() > 0) copy_into(t, out);
  return out;
}

Tensor packed(const Tensor& t) {
  if (t.is_contiguous()) return t;
  Tensor out = make_tensor(t.sizes(), t.dtype(), t.device());
  if (t.numel() > 0) copy_into(t, out);
  return out;
}

Tensor compute_buffer(const Tensor& out) {
  DType c = compute_dtype(out.dtype());
  return out.dtype() == c ? out : make_tensor(out.sizes(), c, out.device());
}

void store_buffer(const Tensor& buf, const Tensor& out) {
  if (buf.impl() != out.impl() && out.numel() > 0) copy_into(buf, out);
}

}  // namespace ember::cpu
