// The vision transformer.
#include "ember/models.h"
#include "ember/ops.h"

namespace ember::models {

ViT::ViT(const ViTConfig& c) : Module("ViT"), config(c) {
  EMBER_CHECK(c.patch_size > 0 && c.image_size % c.patch_size == 0, "ViT: image_size (",
              c.image_size, ") must be a multiple of patch_size (", c.patch_size, ")");
  const int64_t grid = c.image_size / c.patch_size;
  patch_embed = register_module(
      "patch_embed", std::make_shared<nn::Conv2d>(c.in_channels, c.dim,
                                                  std::vector<int64_t>{c.patch_size},
                                                  std::vector<int64_t>{c.patch_size}));
  register_parameter("cls_token", cls_token, empty({1, 1, c.dim}));
  nn::init_normal_(cls_token, 0.02);
  register_parameter("pos_embed", pos_embed, empty({1, grid * grid + 1, c.dim}));
  nn::init_normal_(pos_embed, 0.02);
  auto list = register_module("blocks", std::make_shared<nn::ModuleList>());
  for (int64_t i = 0; i < c.depth; ++i)
    blocks.push_back(list->add(std::to_string(i),
                               std::make_shared<EncoderBlock>(c.dim, c.n_heads, c.mlp_dim, true,
                                                              1e-6, c.dropout)));
  norm = register_module("norm", std::make_shared<nn::LayerNorm>(c.dim, true, 1e-6));
  head = register_module("head", std::make_shared<nn::Linear>(c.dim, c.num_classes));
}

Tensor ViT::forward(const Tensor& x) const {
  EMBER_CHECK(x.dim() == 4 && x.size(2) == config.image_size && x.size(3) == config.image_size,
              "ViT: expected images [N, C, ", config.image_size, ", ", config.image_size,
              "], got ", x.shape_str());
  const int64_t N = x.size(0);
  Tensor h = patch_embed->forward(x).flatten(2).transpose(1, 2);  // [N, patches, dim]
  h = cat({cls_token.expand({N, 1, config.dim}), h}, 1) + pos_embed;
  for (const auto& b : blocks) h = b->forward(h);
  return head->forward(norm->forward(h).select(1, 0));
}

Tensor ViT::loss(const Tensor& x, const Tensor& labels) const {
  return cross_entropy(forward(x), labels);
}

}  // namespace ember::models
