// The BERT-style encoder with a padding mask and a masked-LM head.
#include "ember/models.h"
#include "ember/ops.h"

namespace ember::models {

Bert::Bert(const BertConfig& c) : Module("Bert"), config(c) {
  EMBER_CHECK(c.vocab_size > 0 && c.max_position > 0 && c.dim > 0 && c.n_layers > 0,
              "Bert: sizes must be positive");
  word_embeddings = register_module("word_embeddings",
                                    std::make_shared<nn::Embedding>(c.vocab_size, c.dim));
  position_embeddings = register_module(
      "position_embeddings", std::make_shared<nn::Embedding>(c.max_position, c.dim));
  emb_norm = register_module("emb_norm", std::make_shared<nn::LayerNorm>(c.dim, true, c.eps));
  drop = register_module("drop", std::make_shared<nn::Dropout>(c.dropout));
  auto list = register_module("layers", std::make_shared<nn::ModuleList>());
  for (int64_t i = 0; i < c.n_layers; ++i)
    layers.push_back(list->add(std::to_string(i),
                               std::make_shared<EncoderBlock>(c.dim, c.n_heads, c.mlp_dim, false,
                                                              c.eps, c.dropout)));
  transform = register_module("transform", std::make_shared<nn::Linear>(c.dim, c.dim));
  head_norm = register_module("head_norm", std::make_shared<nn::LayerNorm>(c.dim, true, c.eps));
  decoder = register_module("decoder", std::make_shared<nn::Linear>(c.dim, c.vocab_size));
  // The decoder reads the word embedding matrix, as BERT's.
  decoder->tie_parameter("weight", word_embeddings->weight);
}

Tensor Bert::padding_mask(const Tensor& lengths, int64_t T) {
  EMBER_CHECK(lengths.dim() == 1, "Bert: lengths must be [B], got ", lengths.shape_str());
  TensorOptions o(lengths.dtype());
  o.device = lengths.device();
  return arange(0, double(T), 1, o).unsqueeze(0).ge(lengths.unsqueeze(1));  // [B, T]
}

Tensor Bert::encode(const Tensor& ids, const Tensor& lengths) const {
  EMBER_CHECK(ids.dim() == 2, "Bert: ids must be [batch, time], got ", ids.shape_str());
  EMBER_CHECK(lengths.dim() == 1 && lengths.size(0) == ids.size(0), "Bert: lengths must be [",
              ids.size(0), "], got ", lengths.shape_str());
  const int64_t T = ids.size(1);
  EMBER_CHECK(T <= config.max_position, "Bert: a sequence of length ", T,
              " is longer than max_position ", config.max_position);
  TensorOptions pos_opts(DType::Int64);
  pos_opts.device = ids.device();
  Tensor h = word_embeddings->forward(ids) + position_embeddings->forward(arange(T, pos_opts));
  h = drop->forward(emb_norm->forward(h));
  const Tensor mask = padding_mask(lengths, T);
  for (const auto& l : layers) h = l->forward(h, mask);
  return h;
}

Tensor Bert::forward(const Tensor& ids, const Tensor& lengths) const {
  Tensor h = head_norm->forward(transform->forward(encode(ids, lengths)).gelu());
  return decoder->forward(h);
}

Tensor Bert::loss(const Tensor& ids, const Tensor& lengths, const Tensor& targets) const {
  Tensor logits = forward(ids, lengths);
  return cross_entropy(logits.view({-1, logits.size(-1)}), targets.reshape({-1}), -100);
}

}  // namespace ember::models
