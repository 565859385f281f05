// Basic layers: Linear, Embedding, LayerNorm, Dropout, GELU.
#include "ember/autograd.h"
#include "ember/nn.h"
#include "ember/ops.h"

namespace ember::nn {

Linear::Linear(int64_t in_features, int64_t out_features, bool with_bias) : Module("Linear") {
  EMBER_CHECK(in_features > 0 && out_features > 0, "Linear: features must be positive, got ",
              in_features, " -> ", out_features);
  register_parameter("weight", weight, empty({out_features, in_features}));
  init_normal_(weight, 0.02);
  if (with_bias) {
    register_parameter("bias", bias, zeros({out_features}));
  }
}

Tensor Linear::forward(const Tensor& x) const { return linear(x, weight, bias); }

Embedding::Embedding(int64_t num, int64_t dim) : Module("Embedding") {
  EMBER_CHECK(num > 0 && dim > 0, "Embedding: sizes must be positive, got ", num, " x ", dim);
  register_parameter("weight", weight, empty({num, dim}));
  init_normal_(weight, 0.02);
}

Tensor Embedding::forward(const Tensor& indices) const { return embedding(weight, indices); }

LayerNorm::LayerNorm(int64_t dim, bool with_bias, double eps_) : Module("LayerNorm"), eps(eps_) {
  register_parameter("weight", weight, ones({dim}));
  if (with_bias) register_parameter("bias", bias, zeros({dim}));
}

Tensor LayerNorm::forward(const Tensor& x) const {
  return layer_norm(x, {weight.size(0)}, weight, bias, eps);
}

Dropout::Dropout(double p_) : Module("Dropout"), p(p_) {
  EMBER_CHECK(p >= 0 && p <= 1, "Dropout: p must be in [0, 1], got ", p);
}

Tensor Dropout::forward(const Tensor& x) const {
  return is_training() && p > 0 ? dropout(x, p, true) : x;
}

GELU::GELU(bool tanh) : Module("GELU"), tanh_approx(tanh) {}

Tensor GELU::forward(const Tensor& x) const { return x.gelu(tanh_approx); }

}  // namespace ember::nn
