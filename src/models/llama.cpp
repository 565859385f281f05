// The LLaMA-style decoder: RMSNorm, rotary embeddings, SwiGLU, grouped-query attention.
#include "ember/models.h"
#include "ember/ops.h"

namespace ember::models {

LlamaAttention::LlamaAttention(const LlamaConfig& c)
    : Module("LlamaAttention"),
      n_heads(c.n_heads),
      n_kv_heads(c.n_kv_heads),
      head_dim(c.dim / c.n_heads) {
  q_proj = register_module("q_proj", std::make_shared<nn::Linear>(c.dim, n_heads * head_dim, false));
  k_proj = register_module("k_proj", std::make_shared<nn::Linear>(c.dim, n_kv_heads * head_dim, false));
  v_proj = register_module("v_proj", std::make_shared<nn::Linear>(c.dim, n_kv_heads * head_dim, false));
  o_proj = register_module("o_proj", std::make_shared<nn::Linear>(n_heads * head_dim, c.dim, false));
}

Tensor LlamaAttention::forward(const Tensor& x, const Tensor& cos, const Tensor& sin) const {
  const int64_t B = x.size(0), T = x.size(1), rep = n_heads / n_kv_heads;
  auto heads = [&](const Tensor& t, int64_t n) {
    return t.view({B, T, n, head_dim}).transpose(1, 2);  // [B, n, T, hd]
  };
  Tensor q = rotary_embedding(heads(q_proj->forward(x), n_heads), cos, sin);
  Tensor k = rotary_embedding(heads(k_proj->forward(x), n_kv_heads), cos, sin);
  Tensor v = heads(v_proj->forward(x), n_kv_heads);
  // Each key/value head serves rep query heads: [B, kv, T, hd] -> [B, kv * rep, T, hd].
  auto repeat_kv = [&](const Tensor& t) {
    if (rep == 1) return t;
    return t.unsqueeze(2).expand({B, n_kv_heads, rep, T, head_dim}).reshape({B, n_heads, T, head_dim});
  };
  Tensor y = scaled_dot_product_attention(q, repeat_kv(k), repeat_kv(v), /*is_causal=*/true);
  return o_proj->forward(y.transpose(1, 2).contiguous().view({B, T, n_heads * head_dim}));
}

LlamaMLP::LlamaMLP(const LlamaConfig& c) : Module("LlamaMLP") {
  gate_proj = register_module("gate_proj", std::make_shared<nn::Linear>(c.dim, c.hidden_dim, false));
  up_proj = register_module("up_proj", std::make_shared<nn::Linear>(c.dim, c.hidden_dim, false));
  down_proj = register_module("down_proj", std::make_shared<nn::Linear>(c.hidden_dim, c.dim, false));
}

Tensor LlamaMLP::forward(const Tensor& x) const {
  return down_proj->forward(swiglu(gate_proj->forward(x), up_proj->forward(x)));
}

LlamaDecoderLayer::LlamaDecoderLayer(const LlamaConfig& c) : Module("LlamaDecoderLayer") {
  self_attn = register_module("self_attn", std::make_shared<LlamaAttention>(c));
  mlp = register_module("mlp", std::make_shared<LlamaMLP>(c));
  input_layernorm = register_module("input_layernorm", std::make_shared<nn::RMSNorm>(c.dim, c.norm_eps));
  post_attention_layernorm =
      register_module("post_attention_layernorm", std::make_shared<nn::RMSNorm>(c.dim, c.norm_eps));
}

Tensor LlamaDecoderLayer::forward(const Tensor& x, const Tensor& cos, const Tensor& sin) const {
  Tensor h = x + self_attn->forward(input_layernorm->forward(x), cos, sin);
  return h + mlp->forward(post_attention_layernorm->forward(h));
}

Llama::Llama(const LlamaConfig& c) : Module("Llama"), config(c) {
  EMBER_CHECK(c.vocab_size > 0 && c.dim > 0 && c.n_layers > 0 && c.max_seq_len > 0 &&
                  c.hidden_dim > 0,
              "Llama: sizes must be positive");
  EMBER_CHECK(c.n_heads > 0 && c.n_kv_heads > 0 && c.n_heads % c.n_kv_heads == 0,
              "Llama: n_heads (", c.n_heads, ") must be a multiple of n_kv_heads (", c.n_kv_heads,
              ")");
  EMBER_CHECK(c.dim % c.n_heads == 0 && (c.dim / c.n_heads) % 2 == 0, "Llama: dim (", c.dim,
              ") must split into n_heads (", c.n_heads, ") heads of an even size");
  model = register_module("model", std::make_shared<nn::ModuleList>());
  embed_tokens = model->add("embed_tokens", std::make_shared<nn::Embedding>(c.vocab_size, c.dim));
  auto list = model->add("layers", std::make_shared<nn::ModuleList>());
  for (int64_t i = 0; i < c.n_layers; ++i)
    layers.push_back(list->add(std::to_string(i), std::make_shared<LlamaDecoderLayer>(c)));
  norm = model->add("norm", std::make_shared<nn::RMSNorm>(c.dim, c.norm_eps));
  lm_head = register_module("lm_head", std::make_shared<nn::Linear>(c.dim, c.vocab_size, false));
  auto [cos, sin] = rotary_cos_sin(c.max_seq_len, c.dim / c.n_heads, c.rope_theta);
  register_buffer("rope_cos", rope_cos, cos, /*persistent=*/false);
  register_buffer("rope_sin", rope_sin, sin, /*persistent=*/false);
}

Tensor Llama::forward(const Tensor& idx) const {
  EMBER_CHECK(idx.dim() == 2, "Llama: idx must be [batch, time], got ", idx.shape_str());
  const int64_t T = idx.size(1);
  EMBER_CHECK(T <= config.max_seq_len, "Llama: a sequence of length ", T,
              " is longer than max_seq_len ", config.max_seq_len);
  const Tensor cos = rope_cos.slice(0, 0, T), sin = rope_sin.slice(0, 0, T);
  Tensor h = embed_tokens->forward(idx);
  for (const auto& l : layers) h = l->forward(h, cos, sin);
  return lm_head->forward(norm->forward(h));
}

Tensor Llama::loss(const Tensor& idx, const Tensor& targets) const {
  Tensor logits = forward(idx);
  return cross_entropy(logits.view({-1, logits.size(-1)}), targets.reshape({-1}));
}

}  // namespace ember::models
