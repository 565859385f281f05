// scaled_dot_product_attention, math path: a composite of table ops (matmul, softmax, an
// additive causal mask, dropout), so autograd and capture handle it with no special case.
#include <cmath>

#include "ops/frontend.h"

namespace ember {

Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                    bool is_causal, double dropout_p, std::optional<double> scale) {
  EMBER_CHECK(q.defined() && k.defined() && v.defined(),
              "scaled_dot_product_attention: undefined input");
  EMBER_CHECK(q.dim() >= 2 && k.dim() >= 2 && v.dim() >= 2,
              "scaled_dot_product_attention: q, k, v need at least 2 dims [..., L, E], got ",
              q.shape_str(), ", ", k.shape_str(), ", ", v.shape_str());
  EMBER_CHECK(q.size(-1) == k.size(-1), "scaled_dot_product_attention: q ", q.shape_str(),
              " and k ", k.shape_str(), " must have the same last dim (embedding)");
  EMBER_CHECK(k.size(-2) == v.size(-2), "scaled_dot_product_attention: k ", k.shape_str(),
              " and v ", v.shape_str(), " must have the same sequence length (dim -2)");
  EMBER_CHECK(dropout_p >= 0 && dropout_p < 1,
              "scaled_dot_product_attention: dropout_p must be in [0, 1), got ", dropout_p);
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
