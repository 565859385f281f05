// The attention op and its backward on cuDNN's fused attention (its frontend's SDPA graphs),
// where cuDNN takes the problem: 16-bit q, k, v and out of rank 4 ([batch, heads, L, E], every
// stride but the last a multiple of 8 elements), heads of at most 128 with E == F a multiple of
// 8, no dropout (ember's kernels draw the masks the CPU draws), a GPU of compute capability 8.0 or
// more, and libcudnn loadable (EMBER_CUDNN names it, else libcudnn.so.9). EMBER_CUDNN_ATTENTION=0
// turns it off. A graph is built once per shape, layout and attrs and kept; a problem cuDNN
// refuses is remembered and left to ember's kernels (logged once under EMBER_LOGS=compiler).
#pragma once
#include <span>

#include "ember/tensor.h"
#include "ops/attrs.h"

namespace ember::cuda {

// Runs attention (in: q, k, v[, rng]; out: out, lse) through cuDNN; false when it does not take
// the problem (the caller runs ember's kernels).
bool cudnn_attention(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a);
// Runs attention_backward (in: q, k, v, out, lse, grad_out[, rng]; out: dq, dk, dv) likewise.
bool cudnn_attention_backward(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a);

// Turns cuDNN's attention on or off from code (tests run ember's kernels on the same problems);
// it starts as EMBER_CUDNN_ATTENTION says (on unless 0).
void set_cudnn_attention(bool on);
// Whether it can run on `device`: built with the frontend, libcudnn loaded, compute capability
// 8.0 or more.
bool cudnn_attention_available(int device);
// Calls (forward and backward) that cuDNN ran so far.
int64_t cudnn_attention_runs();

}  // namespace ember::cuda
