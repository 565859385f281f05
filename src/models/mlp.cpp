// The MLP classifier.
#include "ember/models.h"
#include "ember/ops.h"

namespace ember::models {

MLP::MLP(const MLPConfig& c) : Module("MLP"), config(c) {
  EMBER_CHECK(c.in_features > 0 && c.num_classes > 0, "MLP: sizes must be positive");
  auto list = register_module("layers", std::make_shared<nn::ModuleList>());
  int64_t in = c.in_features;
  for (int64_t width : c.hidden) {
    layers.push_back(list->add(std::to_string(layers.size()), std::make_shared<nn::Linear>(in, width)));
    in = width;
  }
  layers.push_back(
      list->add(std::to_string(layers.size()), std::make_shared<nn::Linear>(in, c.num_classes)));
  drop = register_module("drop", std::make_shared<nn::Dropout>(c.dropout));
}

Tensor MLP::forward(const Tensor& x) const {
  Tensor h = x;
  for (size_t i = 0; i + 1 < layers.size(); ++i) h = drop->forward(layers[i]->forward(h).relu());
  return layers.back()->forward(h);
}

Tensor MLP::loss(const Tensor& x, const Tensor& labels) const {
  return cross_entropy(forward(x), labels);
}

}  // namespace ember::models
