// The zoo against PyTorch's reference implementations: weights exported from torchvision's
// ResNet and transformers' LlamaForCausalLM, under their parameter names, load strictly into
// ember's models, which then reproduce the reference outputs. The fixtures in
// tests/fixtures/zoo/ are written by make_fixtures.py there (not run here).
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "ember/ember.h"
#include "ember/io.h"
#include "ember/models.h"

namespace ember::test {
namespace {

using namespace ember::models;

std::string fixture(const std::string& file) {
  return std::string(EMBER_SOURCE_DIR).append("/tests/fixtures/zoo/").append(file);
}

// Loads <name>.weights.safetensors into m with strict=true: every name, shape and dtype of m's
// state dict must be in the file and nothing else. Then checks that the values arrived.
void load_reference(nn::Module& m, const std::string& name) {
  const io::TensorFile f = io::load_safetensors(fixture(name + ".weights.safetensors"));
  nn::LoadReport report;
  try {
    report = m.load_state_dict(f.tensors, /*strict=*/true);
  } catch (const Error& e) {
    FAIL() << e.what();
  }
  EXPECT_TRUE(report.ok()) << report.str();
  const auto own = m.state_dict();
  ASSERT_EQ(own.size(), f.tensors.size());
  for (const auto& [n, t] : own) {
    const Tensor& want = f.at(n);
    EXPECT_EQ(t.dtype(), want.dtype()) << n;
    EXPECT_EQ((t.to(DType::Float64) - want.to(DType::Float64)).abs().amax().item(), 0.0) << n;
  }
}

// The largest |got - want| over the largest |want|. The references ran in float32, as ember
// does; 1e-4 of the output's scale leaves room for a different order of the sums (and for
// rotary tables that ember computes in float64) while a wrong layout or formula is off by
// orders of magnitude more.
constexpr double kTolerance = 1e-4;

double relative_error(const Tensor& got, const Tensor& want) {
  EXPECT_EQ(got.sizes(), want.sizes());
  const Tensor g = got.to(DType::Float64), w = want.to(DType::Float64);
  return (g - w).abs().amax().item() / w.abs().amax().item();
}

// Runs the reference's input through m in eval mode and compares with the reference's output.
template <class M>
void expect_reproduces(M& m, const std::string& name) {
  const io::TensorFile io = io::load_safetensors(fixture(name + ".io.safetensors"));
  m.eval();
  NoGradGuard no_grad;
  const Tensor out = m.forward(io.at("input"));
  const double err = relative_error(out, io.at("output"));
  EXPECT_LT(err, kTolerance) << name;
  char text[32];
  std::snprintf(text, sizeof text, "%.3g", err);
  ::testing::Test::RecordProperty("relative_error", text);  // in --gtest_output=xml
}

TEST(ReferenceWeights, ResNetTinyFromTorchvision) {
  ResNet m(ResNetConfig::tiny());
  load_reference(m, "resnet_tiny");
  expect_reproduces(m, "resnet_tiny");
}

TEST(ReferenceWeights, ResNetImageNetStemFromTorchvision) {
  ResNetConfig c = ResNetConfig::tiny();
  c.width = 4;
  c.imagenet_stem = true;
  ResNet m(c);
  load_reference(m, "resnet_tiny_imagenet_stem");
  expect_reproduces(m, "resnet_tiny_imagenet_stem");
}

TEST(ReferenceWeights, LlamaFromTransformers) {
  Llama m(LlamaConfig::tiny());
  load_reference(m, "llama_tiny");
  expect_reproduces(m, "llama_tiny");
}

// name -> "[shape] dtype" of a state dict.
using Layout = std::map<std::string, std::string>;

std::string describe(const Shape& shape, std::string_view dtype) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i)
    s.append(i ? ", " : "").append(std::to_string(shape[i]));
  return s.append("] ").append(dtype);
}

Layout layout_of(const nn::Module& m) {
  Layout l;
  for (const auto& [n, t] : m.state_dict()) l[n] = describe(t.sizes(), dtype_name(t.dtype()));
  return l;
}

// torchvision's resnet18() state dict, as make_fixtures.py listed it.
Layout torchvision_resnet18() {
  std::ifstream in(fixture("resnet18_state.json"));
  EXPECT_TRUE(in) << "missing resnet18_state.json";
  const auto doc = nlohmann::json::parse(in);
  Layout l;
  for (const auto& row : doc.at("state_dict"))
    l[row.at("name").get<std::string>()] =
        describe(row.at("shape").get<Shape>(), row.at("dtype").get<std::string>());
  return l;
}

TEST(ReferenceWeights, ResNet18ImageNetHasTorchvisionsStateDict) {
  const Layout want = torchvision_resnet18();
  EXPECT_EQ(want.size(), 122u);  // 62 parameters, 60 BatchNorm buffers
  const Layout got = layout_of(ResNet(ResNetConfig::resnet18_imagenet()));
  for (const auto& [n, d] : want) {
    auto it = got.find(n);
    if (it == got.end())
      ADD_FAILURE() << "ember lacks " << n;
    else
      EXPECT_EQ(it->second, d) << n;
  }
  for (const auto& [n, d] : got) EXPECT_TRUE(want.count(n)) << "torchvision lacks " << n;
}

TEST(ReferenceWeights, ResNet18CifarDiffersOnlyInStemAndHead) {
  Layout want = torchvision_resnet18();
  want["conv1.weight"] = describe({64, 3, 3, 3}, "float32");
  want["fc.weight"] = describe({10, 512}, "float32");
  want["fc.bias"] = describe({10}, "float32");
  EXPECT_EQ(layout_of(ResNet(ResNetConfig::resnet18())), want);
}

}  // namespace
}  // namespace ember::test
