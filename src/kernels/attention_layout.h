// The heads-inner layout of the attention ops (attrs.dim == 1, set by fused_attention for 4-dim
// q on a GPU): attention's output, and attention_backward's o, dout and grads of q, k and v,
// hold [B, L, H, F] contiguously, and the op's users take their [B, H, L, F] views (the front
// end for the output, the grad formula for the grads), so the usual
// `y.transpose(1, 2).contiguous().view(B, L, H * F)` copies nothing, nor does the backward of
// it, nor that of q, k and v taken as heads of one [B, L, 3 H F] product. The kernels take the
// [B, H, L, F] views of those tensors, which these wrappers make: with `writes_strided` the kernel
// writes its results through the views as they lie (cuDNN's and ember's CUDA kernels), else into
// dense [B, H, L, F] tensors that are then laid out (the CPU's). Either way it reads any strides.
#pragma once
#include <span>
#include <vector>

#include "ember/autograd.h"
#include "ember/tensor.h"
#include "ops/attrs.h"

namespace ember::attention_layout {

inline bool heads_inner(const Attrs& a) { return a.dim == 1; }

// Runs `run` on results `views` (the [B, H, L, F] views of out), with the usual layout's attrs.
template <class Run>
void run_on_views(std::span<const Tensor> in, std::span<Tensor> views, const Attrs& a, Run run,
                  bool writes_strided) {
  Attrs usual = a;
  usual.dim = 0;
  if (writes_strided) {
    run(in, views, usual);
    return;
  }
  std::vector<Tensor> dense;
  for (const Tensor& v : views) dense.push_back(v.contiguous());
  run(in, std::span<Tensor>(dense), usual);
  for (size_t i = 0; i < dense.size(); ++i) views[i].copy_(dense[i]);
}

// The attention op with out[0] of the heads-inner layout.
template <class Run>
void forward(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a, Run run,
             bool writes_strided) {
  NoGradGuard no_grad;
  Tensor o[2] = {out[0].transpose(1, 2), out[1]};
  run_on_views(in, std::span<Tensor>(o, 2), a, run, writes_strided);
}

// The attention_backward op with o (in[3]), dout (in[5]) and its three grads of the
// heads-inner layout.
template <class Run>
void backward(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a, Run run,
              bool writes_strided) {
  NoGradGuard no_grad;
  std::vector<Tensor> ins(in.begin(), in.end());
  ins[3] = ins[3].transpose(1, 2);
  ins[5] = ins[5].transpose(1, 2);
  Tensor grads[3] = {out[0].transpose(1, 2), out[1].transpose(1, 2), out[2].transpose(1, 2)};
  run_on_views(std::span<const Tensor>(ins), std::span<Tensor>(grads, 3), a, run,
               writes_strided);
}

}  // namespace ember::attention_layout
