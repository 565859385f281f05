// Kernels over lists of tensors, one launch for many: what an optimizer step and gradient
// clipping need on a GPU, where a launch per parameter and per elementary op costs more than
// the arithmetic (an eager AdamW step over a GPT's 76 parameters is otherwise about a thousand
// kernels). src/kernels/cuda/multi_tensor.cu implements them; in a build without CUDA no
// tensor can be on a GPU, so `takes` is false and the others raise an error.
#pragma once
#include <span>

#include "ember/tensor.h"

namespace ember::multi_tensor {

// Whether the kernels below take these tensors: at least one, every one defined, contiguous,
// float32 and on the same CUDA device.
bool takes(std::span<const Tensor> ts);

// The sum over every tensor of sum(t^2), accumulated in float64 on the tensors' device: a
// 0-dim float64 tensor there.
Tensor sum_of_squares(std::span<const Tensor> ts);

// Gradient clipping without a host read: with norm = sqrt(*sum_sq) (a 0-dim float64 tensor
// on the tensors' device, as sum_of_squares gives), when norm is finite and above max_norm > 0
// every tensor is multiplied by float(max_norm / (norm + 1e-6)), rounded as t.mul_(coef)
// rounds it; otherwise they are left as they are.
void clip_(std::span<const Tensor> ts, const Tensor& sum_sq, double max_norm);

// The step-dependent scalars of one AdamW update, in float32 (what the eager update's 0-dim
// float32 tensors hold).
struct AdamWScalars {
  float beta1, one_minus_beta1, beta2, one_minus_beta2, bias_correction2, eps, step_size;
};

// One AdamW update of every parameter p[i] (grad g[i], moments m[i], v[i]; decay[i] =
// 1 - lr * weight_decay of its group), in place, with the float32 operations of the eager
// update in optim/adamw_step.cpp, in the same order and with the same rounding:
//   p *= decay; m = m * b1 + g * (1 - b1); v = v * b2 + g * g * (1 - b2);
//   p -= m / (sqrt(v / bc2) + eps) * step_size
void adamw_step(std::span<const Tensor> p, std::span<const Tensor> g, std::span<const Tensor> m,
                std::span<const Tensor> v, std::span<const float> decay, const AdamWScalars& s);

// dst[i] = src[i] converted to dst's dtype as the eager cast converts it (rounded to nearest
// even): float32 to bfloat16 or float16, or back, one dtype for all sources and one for all
// destinations, every tensor contiguous, dst[i] of src[i]'s sizes, all on one CUDA device. A
// compiled graph casts its float32 parameters to the autocast dtype this way, and its 16-bit
// grads of them back, in one launch instead of one a parameter.
void cast_(std::span<const Tensor> src, std::span<const Tensor> dst);

}  // namespace ember::multi_tensor
