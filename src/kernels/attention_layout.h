// The heads-inner layout of the attention ops (attrs.dim == 1, set by fused_attention for 4-dim
// q on a GPU): attention's output, and attention_backward's o, dout and grads of q, k and v,
// hold [B, L, H, F] contiguously, and the op's users take their [B, H, L, F] views (the front
// end for the output, the grad formula for the grads), so the usual
// `y.transpose(1, 2).contiguous().view(B, L, H * F)` copies nothing, nor does the backward of
// it, nor that of q, k and v taken as heads of one [B, L, 3 H F] product. The kernels take the [B, H, L, F] views of those tensors: these wrappers
// make them, for kernels that write (or read) that shape with any strides (`run_strided`, which
// may decline) and for those that write it densely (`run_contiguous`: the CPU's).
#pragma once
#include <span>
#include <vector>

#include "ember/autograd.h"
#include "ember/tensor.h"
#include "ops/attrs.h"

namespace ember::attention_layout {

inline bool heads_inner(const Attrs& a) { return a.dim == 1; }

// The attention op with out[0] of the heads-inner layout.
template <class Strided, class Contiguous>
void forward(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a,
             Strided run_strided, Contiguous run_contiguous) {
  NoGradGuard no_grad;
  Attrs b = a;
  b.dim = 0;
  Tensor o[2] = {out[0].transpose(1, 2), out[1]};
  if (run_strided(in, std::span<Tensor>(o, 2), b)) return;
  Tensor dense[2] = {o[0].contiguous(), out[1]};  // the kernel's [B, H, L, F], then laid out
  run_contiguous(in, std::span<Tensor>(dense, 2), b);
  o[0].copy_(dense[0]);
}

// The attention_backward op with o (in[3]), dout (in[5]) and its three grads of the
// heads-inner layout.
template <class Strided, class Contiguous>
void backward(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a,
              Strided run_strided, Contiguous run_contiguous) {
  NoGradGuard no_grad;
  Attrs b = a;
  b.dim = 0;
  std::vector<Tensor> ins(in.begin(), in.end());
  ins[3] = ins[3].transpose(1, 2);
  ins[5] = ins[5].transpose(1, 2);
  Tensor grads[3] = {out[0].transpose(1, 2), out[1].transpose(1, 2), out[2].transpose(1, 2)};
  if (run_strided(std::span<const Tensor>(ins), std::span<Tensor>(grads, 3), b)) return;
  Tensor dense[3] = {grads[0].contiguous(), grads[1].contiguous(), grads[2].contiguous()};
  run_contiguous(std::span<const Tensor>(ins), std::span<Tensor>(dense, 3), b);
  for (int i = 0; i < 3; ++i) grads[i].copy_(dense[i]);
}

}  // namespace ember::attention_layout
