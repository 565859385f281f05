// scaled_dot_product_attention. On the CPU, and wherever the fused op does not apply, the math
// path: a composite of table ops (matmul, softmax, an additive causal mask, dropout), so autograd
// and capture handle it with no special case (and the CPU compiler pattern-matches exactly this
// op sequence in captured graphs: keep it as it is). On CUDA, the fused attention op
// (ops/attention_ops.cpp, kernels/cuda/attention_*.cu), which never builds the [..., L, S]
// probabilities and draws the composite's dropout mask (under capture from an rng_state input,
// which a replayed graph draws afresh), except for heads larger than its kernels take.
#include "ops/attention.h"

#include <cmath>

#include "ops/frontend.h"

namespace ember {

namespace {
bool use_fused(const Tensor& q, const Tensor& k, const Tensor& v) {
  if (q.device().type != DeviceType::CUDA) return false;
  return q.size(-1) <= kCudaAttentionMaxHead && v.size(-1) <= kCudaAttentionMaxHead;
}
}  // namespace

Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                    bool is_causal, double dropout_p, std::optional<double> scale) {
  check_attention_args(q, k, v, dropout_p, "scaled_dot_product_attention");
  if (use_fused(q, k, v))
    return fused_attention(q, k, v, is_causal, dropout_p, scale).out;
  const int64_t L = q.size(-2), S = k.size(-2);
  const double s = scale ? *scale : 1.0 / std::sqrt(double(q.size(-1)));
  Tensor att = matmul(q, k.transpose(-2, -1)) * s;
  if (is_causal) {
    // Top-left aligned: query i sees keys 0..i, as PyTorch's is_causal.
    TensorOptions o(att.dtype());
    o.device = att.device();
    Tensor mask = full({L, S}, -INFINITY, o).triu(1);
    att = att + mask;
  }
  att = att.softmax(-1);
  if (dropout_p > 0) att = dropout(att, dropout_p, true);
  return matmul(att, v);
}

}  // namespace ember
