// MobileNetV2: inverted residuals with depthwise convolutions.
#include "ember/models.h"
#include "ember/ops.h"

namespace ember::models {

namespace {
std::shared_ptr<nn::Conv2d> conv_no_bias(int64_t in, int64_t out, int64_t k, int64_t stride,
                                         int64_t groups) {
  return std::make_shared<nn::Conv2d>(in, out, std::vector<int64_t>{k},
                                      std::vector<int64_t>{stride},
                                      std::vector<int64_t>{(k - 1) / 2}, std::vector<int64_t>{1},
                                      groups, false);
}
}  // namespace

ConvBNAct::ConvBNAct(int64_t in, int64_t out, int64_t kernel, int64_t stride, int64_t groups,
                     bool act_)
    : Module("ConvBNAct"), act(act_) {
  conv = register_module("0", conv_no_bias(in, out, kernel, stride, groups));
  bn = register_module("1", std::make_shared<nn::BatchNorm2d>(out));
}

Tensor ConvBNAct::forward(const Tensor& x) const {
  Tensor h = bn->forward(conv->forward(x));
  return act ? h.clamp(0.0, 6.0) : h;
}

InvertedResidual::InvertedResidual(int64_t in, int64_t out, int64_t stride, int64_t t)
    : Module("InvertedResidual"), use_residual(stride == 1 && in == out) {
  EMBER_CHECK(stride == 1 || stride == 2, "InvertedResidual: stride must be 1 or 2, got ", stride);
  EMBER_CHECK(t >= 1, "InvertedResidual: the expansion ratio must be at least 1, got ", t);
  const int64_t hidden = in * t;
  auto seq = register_module("conv", std::make_shared<nn::ModuleList>());
  int64_t i = 0;
  if (t != 1) expand = seq->add(std::to_string(i++), std::make_shared<ConvBNAct>(in, hidden, 1, 1, 1, true));
  depthwise = seq->add(std::to_string(i++),
                       std::make_shared<ConvBNAct>(hidden, hidden, 3, stride, hidden, true));
  project = seq->add(std::to_string(i++), conv_no_bias(hidden, out, 1, 1, 1));
  project_bn = seq->add(std::to_string(i++), std::make_shared<nn::BatchNorm2d>(out));
}

Tensor InvertedResidual::forward(const Tensor& x) const {
  Tensor h = expand ? expand->forward(x) : x;
  h = project_bn->forward(project->forward(depthwise->forward(h)));
  return use_residual ? x + h : h;
}

MobileNetV2::MobileNetV2(const MobileNetV2Config& c) : Module("MobileNetV2"), config(c) {
  EMBER_CHECK(c.in_channels > 0 && c.num_classes > 0 && c.stem_channels > 0 &&
                  c.last_channels > 0,
              "MobileNetV2: sizes must be positive");
  auto features = register_module("features", std::make_shared<nn::ModuleList>());
  int64_t i = 0;
  stem = features->add(std::to_string(i++), std::make_shared<ConvBNAct>(
                                                c.in_channels, c.stem_channels, 3, c.stem_stride,
                                                1, true));
  int64_t in = c.stem_channels;
  for (const auto& s : c.stages) {
    EMBER_CHECK(s.size() == 4, "MobileNetV2: a stage is {t, c, n, s}, got ", s.size(), " values");
    for (int64_t r = 0; r < s[2]; ++r) {
      blocks.push_back(features->add(
          std::to_string(i++),
          std::make_shared<InvertedResidual>(in, s[1], r == 0 ? s[3] : 1, s[0])));
      in = s[1];
    }
  }
  head = features->add(std::to_string(i++),
                       std::make_shared<ConvBNAct>(in, c.last_channels, 1, 1, 1, true));
  auto cls = register_module("classifier", std::make_shared<nn::ModuleList>());
  drop = cls->add("0", std::make_shared<nn::Dropout>(c.dropout));
  classifier = cls->add("1", std::make_shared<nn::Linear>(c.last_channels, c.num_classes));
}

Tensor MobileNetV2::forward(const Tensor& x) const {
  EMBER_CHECK(x.dim() == 4, "MobileNetV2: expected images [N, C, H, W], got ", x.shape_str());
  Tensor h = stem->forward(x);
  for (const auto& b : blocks) h = b->forward(h);
  h = adaptive_avg_pool2d(head->forward(h), {1}).flatten(1);
  return classifier->forward(drop->forward(h));
}

Tensor MobileNetV2::loss(const Tensor& x, const Tensor& labels) const {
  return cross_entropy(forward(x), labels);
}

}  // namespace ember::models
