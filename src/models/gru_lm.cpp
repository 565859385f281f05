// The GRU language model: a C++ loop over the time steps.
#include "ember/models.h"
#include "ember/ops.h"

namespace ember::models {

GRULM::GRULM(const GRULMConfig& c) : Module("GRULM"), config(c) {
  EMBER_CHECK(c.vocab_size > 0 && c.embed_dim > 0 && c.hidden_size > 0 && c.n_layers > 0,
              "GRULM: sizes must be positive");
  embedding = register_module("embedding", std::make_shared<nn::Embedding>(c.vocab_size, c.embed_dim));
  auto list = register_module("cells", std::make_shared<nn::ModuleList>());
  for (int64_t l = 0; l < c.n_layers; ++l)
    cells.push_back(list->add(std::to_string(l), std::make_shared<nn::GRUCell>(
                                                     l == 0 ? c.embed_dim : c.hidden_size,
                                                     c.hidden_size)));
  head = register_module("head", std::make_shared<nn::Linear>(c.hidden_size, c.vocab_size));
}

Tensor GRULM::forward(const Tensor& idx) const {
  EMBER_CHECK(idx.dim() == 2, "GRULM: idx must be [batch, time], got ", idx.shape_str());
  const int64_t B = idx.size(0), T = idx.size(1);
  const Tensor x = embedding->forward(idx);  // [B, T, E]
  TensorOptions o(x.dtype());
  o.device = x.device();
  std::vector<Tensor> h(cells.size(), zeros({B, config.hidden_size}, o));
  std::vector<Tensor> outs;
  for (int64_t t = 0; t < T; ++t) {
    Tensor in = x.select(1, t);
    for (size_t l = 0; l < cells.size(); ++l) in = h[l] = cells[l]->forward(in, h[l]);
    outs.push_back(in);
  }
  return head->forward(stack(outs, 1));  // [B, T, H] -> [B, T, vocab]
}

Tensor GRULM::loss(const Tensor& idx, const Tensor& targets) const {
  Tensor logits = forward(idx);
  return cross_entropy(logits.view({-1, logits.size(-1)}), targets.reshape({-1}));
}

}  // namespace ember::models
