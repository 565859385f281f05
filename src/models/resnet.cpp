// ResNet: a CIFAR or ImageNet stem, then BasicBlocks in four stages.
#include "ember/models.h"
#include "ember/ops.h"

namespace ember::models {

BasicBlock::BasicBlock(int64_t in, int64_t out, int64_t stride) : Module("BasicBlock") {
  conv1 = register_module("conv1", std::make_shared<nn::Conv2d>(in, out, std::vector<int64_t>{3},
                                                                std::vector<int64_t>{stride},
                                                                std::vector<int64_t>{1},
                                                                std::vector<int64_t>{1}, 1, false));
  bn1 = register_module("bn1", std::make_shared<nn::BatchNorm2d>(out));
  conv2 = register_module("conv2", std::make_shared<nn::Conv2d>(out, out, std::vector<int64_t>{3},
                                                                std::vector<int64_t>{1},
                                                                std::vector<int64_t>{1},
                                                                std::vector<int64_t>{1}, 1, false));
  bn2 = register_module("bn2", std::make_shared<nn::BatchNorm2d>(out));
  if (stride != 1 || in != out) {
    downsample = register_module("downsample", std::make_shared<nn::ModuleList>());
    down_conv = downsample->add(
        "0", std::make_shared<nn::Conv2d>(in, out, std::vector<int64_t>{1},
                                          std::vector<int64_t>{stride}, std::vector<int64_t>{0},
                                          std::vector<int64_t>{1}, 1, false));
    down_bn = downsample->add("1", std::make_shared<nn::BatchNorm2d>(out));
  }
}

Tensor BasicBlock::forward(const Tensor& x) const {
  Tensor h = bn1->forward(conv1->forward(x)).relu();
  h = bn2->forward(conv2->forward(h));
  Tensor identity = downsample ? down_bn->forward(down_conv->forward(x)) : x;
  return (h + identity).relu();
}

ResNetConfig ResNetConfig::resnet18() {
  ResNetConfig c;
  c.width = 64;
  c.blocks = {2, 2, 2, 2};
  return c;
}

ResNetConfig ResNetConfig::resnet18_imagenet() {
  ResNetConfig c = resnet18();
  c.num_classes = 1000;
  c.imagenet_stem = true;
  return c;
}

ResNet::ResNet(const ResNetConfig& c) : Module("ResNet"), config(c) {
  EMBER_CHECK(c.blocks.size() == 4, "ResNet: blocks must list 4 stages, got ", c.blocks.size());
  for (int64_t n : c.blocks) EMBER_CHECK(n > 0, "ResNet: every stage needs a block");
  EMBER_CHECK(c.width > 0 && c.in_channels > 0 && c.num_classes > 0,
              "ResNet: sizes must be positive");
  const int64_t k = c.imagenet_stem ? 7 : 3, stride = c.imagenet_stem ? 2 : 1;
  conv1 = register_module("conv1", std::make_shared<nn::Conv2d>(
                                       c.in_channels, c.width, std::vector<int64_t>{k},
                                       std::vector<int64_t>{stride}, std::vector<int64_t>{k / 2},
                                       std::vector<int64_t>{1}, 1, false));
  bn1 = register_module("bn1", std::make_shared<nn::BatchNorm2d>(c.width));
  if (c.imagenet_stem)
    maxpool = register_module("maxpool", std::make_shared<nn::MaxPool2d>(
                                             std::vector<int64_t>{3}, std::vector<int64_t>{2},
                                             std::vector<int64_t>{1}));
  int64_t in = c.width;
  for (size_t s = 0; s < 4; ++s) {
    const int64_t out = c.width << s;
    auto list = register_module("layer" + std::to_string(s + 1), std::make_shared<nn::ModuleList>());
    stages.emplace_back();
    for (int64_t b = 0; b < c.blocks[s]; ++b) {
      const int64_t stride = (s > 0 && b == 0) ? 2 : 1;
      stages.back().push_back(
          list->add(std::to_string(b), std::make_shared<BasicBlock>(in, out, stride)));
      in = out;
    }
  }
  fc = register_module("fc", std::make_shared<nn::Linear>(in, c.num_classes));
}

Tensor ResNet::forward(const Tensor& x) const {
  EMBER_CHECK(x.dim() == 4, "ResNet: expected images [N, C, H, W], got ", x.shape_str());
  Tensor h = bn1->forward(conv1->forward(x)).relu();
  if (maxpool) h = maxpool->forward(h);
  for (const auto& stage : stages)
    for (const auto& b : stage) h = b->forward(h);
  h = adaptive_avg_pool2d(h, {1}).flatten(1);
  return fc->forward(h);
}

Tensor ResNet::loss(const Tensor& x, const Tensor& labels) const {
  return cross_entropy(forward(x), labels);
}

}  // namespace ember::models
