// The transformer encoder pieces of ViT and BERT: self-attention with a key padding mask, and
// pre- or post-norm encoder blocks.
#include <cmath>

#include "ember/models.h"
#include "ember/ops.h"

namespace ember::models {

SelfAttention::SelfAttention(int64_t dim, int64_t heads, double dropout_)
    : Module("SelfAttention"), n_heads(heads), dropout(dropout_) {
  EMBER_CHECK(heads > 0 && dim % heads == 0, "SelfAttention: dim (", dim,
              ") must be divisible by n_heads (", heads, ")");
  query = register_module("query", std::make_shared<nn::Linear>(dim, dim));
  key = register_module("key", std::make_shared<nn::Linear>(dim, dim));
  value = register_module("value", std::make_shared<nn::Linear>(dim, dim));
  out = register_module("out", std::make_shared<nn::Linear>(dim, dim));
}

Tensor SelfAttention::forward(const Tensor& x, const Tensor& key_padding_mask) const {
  const int64_t B = x.size(0), T = x.size(1), C = x.size(2), hs = C / n_heads;
  auto heads = [&](const Tensor& t) { return t.view({B, T, n_heads, hs}).transpose(1, 2); };
  Tensor q = heads(query->forward(x)), k = heads(key->forward(x)), v = heads(value->forward(x));
  const double p = is_training() ? dropout : 0.0;
  Tensor y;
  if (!key_padding_mask.defined()) {
    y = scaled_dot_product_attention(q, k, v, /*is_causal=*/false, p);
  } else {
    EMBER_CHECK(key_padding_mask.dim() == 2 && key_padding_mask.size(0) == B &&
                    key_padding_mask.size(1) == T,
                "SelfAttention: key_padding_mask must be [B, T] = [", B, ", ", T, "], got ",
                key_padding_mask.shape_str());
    // sdpa takes no mask: the math path, with padded keys at -inf before the softmax.
    Tensor scores = q.matmul(k.transpose(-2, -1)) * (1.0 / std::sqrt(double(hs)));
    scores = scores.masked_fill(key_padding_mask.view({B, 1, 1, T}), -INFINITY);
    Tensor att = scores.softmax(-1);
    if (p > 0) att = ember::dropout(att, p, true);
    y = att.matmul(v);
  }
  return out->forward(y.transpose(1, 2).contiguous().view({B, T, C}));
}

EncoderBlock::EncoderBlock(int64_t dim, int64_t heads, int64_t mlp_dim, bool pre, double eps,
                           double dropout)
    : Module("EncoderBlock"), pre_norm(pre) {
  norm1 = register_module("norm1", std::make_shared<nn::LayerNorm>(dim, true, eps));
  attn = register_module("attn", std::make_shared<SelfAttention>(dim, heads, dropout));
  norm2 = register_module("norm2", std::make_shared<nn::LayerNorm>(dim, true, eps));
  fc1 = register_module("fc1", std::make_shared<nn::Linear>(dim, mlp_dim));
  fc2 = register_module("fc2", std::make_shared<nn::Linear>(mlp_dim, dim));
  drop = register_module("drop", std::make_shared<nn::Dropout>(dropout));
}

Tensor EncoderBlock::forward(const Tensor& x, const Tensor& key_padding_mask) const {
  auto mlp = [&](const Tensor& h) { return drop->forward(fc2->forward(fc1->forward(h).gelu())); };
  if (pre_norm) {
    Tensor h = x + drop->forward(attn->forward(norm1->forward(x), key_padding_mask));
    return h + mlp(norm2->forward(h));
  }
  Tensor h = norm1->forward(x + drop->forward(attn->forward(x, key_padding_mask)));
  return norm2->forward(h + mlp(h));
}

}  // namespace ember::models
