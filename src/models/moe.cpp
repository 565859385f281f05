// The mixture-of-experts layer (top-k routing, dense-masked) and a GPT-shaped LM built on it.
#include <cmath>

#include "ember/autograd.h"
#include "ember/models.h"
#include "ember/ops.h"

namespace ember::models {

MoELayer::MoELayer(const MoEConfig& c) : Module("MoELayer"), top_k(c.top_k) {
  EMBER_CHECK(c.n_experts > 0 && c.top_k >= 1 && c.top_k <= c.n_experts, "MoELayer: top_k (",
              c.top_k, ") must be in 1..n_experts (", c.n_experts, ")");
  gate = register_module("gate", std::make_shared<nn::Linear>(c.dim, c.n_experts, false));
  auto list = register_module("experts", std::make_shared<nn::ModuleList>());
  for (int64_t e = 0; e < c.n_experts; ++e) {
    Expert ex;
    ex.m = list->add(std::to_string(e), std::make_shared<nn::ModuleList>());
    ex.w1 = ex.m->add("w1", std::make_shared<nn::Linear>(c.dim, c.expert_hidden, false));
    ex.w2 = ex.m->add("w2", std::make_shared<nn::Linear>(c.expert_hidden, c.dim, false));
    ex.w3 = ex.m->add("w3", std::make_shared<nn::Linear>(c.dim, c.expert_hidden, false));
    experts.push_back(ex);
  }
}

Tensor MoELayer::routing_weights(const Tensor& x) const {
  Tensor logits = gate->forward(x);  // [..., E]
  // The k-th largest score of each token, without history (the selection is not
  // differentiated); ties with it are kept too, a measure-zero event for float scores.
  Tensor kth;
  {
    NoGradGuard no_grad;
    kth = logits.detach().topk(top_k, -1).first.narrow(-1, top_k - 1, 1);
  }
  // Softmax over the selected scores alone (the others at -inf get weight 0).
  return logits.masked_fill(logits.lt(kth), -INFINITY).softmax(-1);
}

Tensor MoELayer::forward(const Tensor& x) const {
  const Tensor w = routing_weights(x);  // [..., E]
  std::vector<Tensor> outs;
  for (const Expert& e : experts)
    outs.push_back(e.w2->forward(swiglu(e.w1->forward(x), e.w3->forward(x))));
  const int64_t d = x.dim();
  return (stack(outs, d - 1) * w.unsqueeze(-1)).sum({d - 1});  // [..., E, C] -> [..., C]
}

namespace {
nn::GPTConfig attention_config(const MoEConfig& c) {
  nn::GPTConfig g;
  g.block_size = c.block_size;
  g.vocab_size = c.vocab_size;
  g.n_layer = c.n_layers;
  g.n_head = c.n_heads;
  g.n_embd = c.dim;
  return g;
}
}  // namespace

MoEBlock::MoEBlock(const MoEConfig& c) : Module("MoEBlock") {
  ln_1 = register_module("ln_1", std::make_shared<nn::LayerNorm>(c.dim));
  attn = register_module("attn", std::make_shared<nn::CausalSelfAttention>(attention_config(c)));
  ln_2 = register_module("ln_2", std::make_shared<nn::LayerNorm>(c.dim));
  moe = register_module("moe", std::make_shared<MoELayer>(c));
}

Tensor MoEBlock::forward(const Tensor& x) const {
  Tensor h = x + attn->forward(ln_1->forward(x));
  return h + moe->forward(ln_2->forward(h));
}

MoETransformer::MoETransformer(const MoEConfig& c) : Module("MoETransformer"), config(c) {
  EMBER_CHECK(c.vocab_size > 0 && c.block_size > 0 && c.dim > 0 && c.n_layers > 0,
              "MoETransformer: sizes must be positive");
  wte = register_module("wte", std::make_shared<nn::Embedding>(c.vocab_size, c.dim));
  wpe = register_module("wpe", std::make_shared<nn::Embedding>(c.block_size, c.dim));
  auto list = register_module("blocks", std::make_shared<nn::ModuleList>());
  for (int64_t i = 0; i < c.n_layers; ++i)
    blocks.push_back(list->add(std::to_string(i), std::make_shared<MoEBlock>(c)));
  ln_f = register_module("ln_f", std::make_shared<nn::LayerNorm>(c.dim));
  lm_head = register_module("lm_head", std::make_shared<nn::Linear>(c.dim, c.vocab_size, false));
}

Tensor MoETransformer::forward(const Tensor& idx) const {
  EMBER_CHECK(idx.dim() == 2, "MoETransformer: idx must be [batch, time], got ", idx.shape_str());
  const int64_t T = idx.size(1);
  EMBER_CHECK(T <= config.block_size, "MoETransformer: a sequence of length ", T,
              " is longer than block_size ", config.block_size);
  TensorOptions pos_opts(DType::Int64);
  pos_opts.device = idx.device();
  Tensor h = wte->forward(idx) + wpe->forward(arange(T, pos_opts));
  for (const auto& b : blocks) h = b->forward(h);
  return lm_head->forward(ln_f->forward(h));
}

Tensor MoETransformer::loss(const Tensor& idx, const Tensor& targets) const {
  Tensor logits = forward(idx);
  return cross_entropy(logits.view({-1, logits.size(-1)}), targets.reshape({-1}));
}

}  // namespace ember::models
