// The fused attention op's front end (ops/attention_ops.cpp), for scaled_dot_product_attention
// on CUDA and for tests that call the op directly on any device. Internal: not in include/ember.
#pragma once
#include <optional>

#include "ember/tensor.h"

namespace ember {

// Largest head size (E of q and k, F of v) the CUDA kernels take; scaled_dot_product_attention
// uses its math path beyond it.
inline constexpr int64_t kCudaAttentionMaxHead = 128;

struct AttentionResult {
  Tensor out;  // [..., L, F]
  Tensor lse;  // [..., L]: row logsumexp of the scaled, masked scores (no grad)
};

// The `attention` op on q [..., L, E], k [..., S, E], v [..., S, F] (batch dims broadcast,
// dtypes promoted, float32 lowered under autocast as matmul does). With dropout_p > 0 it
// reserves the draws dropout of the [..., L, S] probabilities would, so it keeps the same
// elements as the composite from the same generator state. Errors name `op`.
AttentionResult fused_attention(const Tensor& q, const Tensor& k, const Tensor& v, bool is_causal,
                                double dropout_p, std::optional<double> scale,
                                const char* op = "scaled_dot_product_attention");

// The argument checks shared by scaled_dot_product_attention's two paths.
void check_attention_args(const Tensor& q, const Tensor& k, const Tensor& v, double dropout_p,
                          const char* op);

}  // namespace ember
