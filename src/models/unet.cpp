// The U-Net: max-pool encoder, interpolate-upsampling decoder with skip concatenation.
#include "ember/models.h"
#include "ember/ops.h"

namespace ember::models {

namespace {
std::shared_ptr<nn::Conv2d> conv3x3(int64_t in, int64_t out) {
  return std::make_shared<nn::Conv2d>(in, out, std::vector<int64_t>{3}, std::vector<int64_t>{1},
                                      std::vector<int64_t>{1});
}
}  // namespace

DoubleConv::DoubleConv(int64_t in, int64_t out, int64_t groups) : Module("DoubleConv") {
  conv1 = register_module("conv1", conv3x3(in, out));
  norm1 = register_module("norm1", std::make_shared<nn::GroupNorm>(groups, out));
  conv2 = register_module("conv2", conv3x3(out, out));
  norm2 = register_module("norm2", std::make_shared<nn::GroupNorm>(groups, out));
}

Tensor DoubleConv::forward(const Tensor& x) const {
  Tensor h = norm1->forward(conv1->forward(x)).relu();
  return norm2->forward(conv2->forward(h)).relu();
}

UNet::UNet(const UNetConfig& c) : Module("UNet"), config(c) {
  EMBER_CHECK(c.in_channels > 0 && c.out_channels > 0 && c.base_channels > 0 && c.depth >= 0,
              "UNet: sizes must be positive");
  EMBER_CHECK(c.groups > 0 && c.base_channels % c.groups == 0, "UNet: groups (", c.groups,
              ") must divide base_channels (", c.base_channels, ")");
  auto downs = register_module("down", std::make_shared<nn::ModuleList>());
  auto ups = register_module("up", std::make_shared<nn::ModuleList>());
  int64_t ch = c.base_channels;
  down.push_back(downs->add("0", std::make_shared<DoubleConv>(c.in_channels, ch, c.groups)));
  for (int64_t l = 1; l <= c.depth; ++l) {
    down.push_back(downs->add(std::to_string(l), std::make_shared<DoubleConv>(ch, 2 * ch, c.groups)));
    ch *= 2;
  }
  for (int64_t l = 0; l < c.depth; ++l) {
    // The upsampled features (ch) and the skip (ch / 2), concatenated, down to ch / 2.
    up.push_back(ups->add(std::to_string(l),
                          std::make_shared<DoubleConv>(ch + ch / 2, ch / 2, c.groups)));
    ch /= 2;
  }
  out = register_module("out", std::make_shared<nn::Conv2d>(ch, c.out_channels,
                                                            std::vector<int64_t>{1}));
}

Tensor UNet::forward(const Tensor& x) const {
  const int64_t f = int64_t(1) << config.depth;
  EMBER_CHECK(x.dim() == 4 && x.size(2) % f == 0 && x.size(3) % f == 0,
              "UNet: expected images [N, C, H, W] with H and W multiples of ", f, ", got ",
              x.shape_str());
  std::vector<Tensor> skips;
  Tensor h = down[0]->forward(x);
  for (size_t l = 1; l < down.size(); ++l) {
    skips.push_back(h);
    h = down[l]->forward(max_pool2d(h, {2}));
  }
  for (const auto& u : up) {
    const Tensor& skip = skips.back();
    h = interpolate(h, {skip.size(2), skip.size(3)}, "nearest");
    h = u->forward(cat({h, skip}, 1));
    skips.pop_back();
  }
  return out->forward(h);
}

Tensor UNet::loss(const Tensor& x, const Tensor& target) const {
  return (forward(x) - target).pow(2.0).mean();
}

}  // namespace ember::models
