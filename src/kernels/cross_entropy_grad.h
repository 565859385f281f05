// cross_entropy's grad over 16-bit logits in one pass, for compiled graphs on a GPU: what the
// autograd formula's fused kernel computes (grad_cross_entropy in ops/loss_ops.cpp), with the
// exponential of x - lse taken by the softmax family's exp for arguments <= 0 (ExpFtz: lse is
// at least the row's max, so x - lse is never positive), a row's scalars read once a row and
// no index math an element. src/kernels/cuda/cross_entropy.cu implements it; in a build without
// CUDA it takes nothing.
#pragma once
#include "ember/tensor.h"

namespace ember::cross_entropy_grad {

// out[r, c] = ((exp(float(logits[r, c]) - lse[r]) - (c == targets[r])) * scale[r]) rounded to
// out's dtype: logits and out [N, C] bfloat16 or float16, contiguous and 16-byte aligned, C a
// multiple of 8; lse and scale float32, targets int64, each [N] or [N, 1] in any layout. False,
// with nothing written, where it does not take these: the caller runs the ops instead.
bool run(const Tensor& logits, const Tensor& lse, const Tensor& targets, const Tensor& scale,
         const Tensor& out);

}  // namespace ember::cross_entropy_grad
