// scaled_dot_product_attention, math path: a composite of table ops (matmul, softmax, an
// additive causal mask, dropout), so autograd and capture handle it with no special case (and
// the CPU compiler pattern-matches exactly this op sequence in captured graphs). The fused
// attention op (ops/attention_ops.cpp) computes the same from the same draws.
#include <cmath>

#include "ops/attention.h"
#include "ops/frontend.h"

namespace ember {

Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                    bool is_causal, double dropout_p, std::optional<double> scale) {
  check_attention_args(q, k, v, dropout_p, "scaled_dot_product_attention");
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
