// The zoo's layers (include/ember/layers.h): shapes and init bounds, batch norm's training and
// eval modes, the other norms, activations and pools, and the GRU cell's equations.
#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "compiler/compiler_test_util.h"
#include "ember/ember.h"
#include "ember/layers.h"

namespace ember::test {
namespace {

TEST(ZooLayers, Conv2dShapesGroupsAndInit) {
  manual_seed(0);
  nn::Conv2d c(4, 8, {3}, {2}, {1}, {1}, 2);
  EXPECT_EQ(c.weight.sizes(), (Shape{8, 2, 3, 3}));
  EXPECT_LE(c.weight.abs().amax().item(), 1.0 / std::sqrt(18.0));
  EXPECT_EQ(c.forward(randn({2, 4, 9, 9})).sizes(), (Shape{2, 8, 5, 5}));
  nn::Conv2d depthwise(6, 6, {3, 3}, {1}, {1}, {1}, 6, false);
  EXPECT_FALSE(depthwise.bias.defined());
  EXPECT_EQ(depthwise.forward(randn({1, 6, 4, 4})).sizes(), (Shape{1, 6, 4, 4}));
  EXPECT_THROW(nn::Conv2d(4, 6, {3}, {1}, {0}, {1}, 4), Error);
}

TEST(ZooLayers, BatchNorm2dTrainingUpdatesAndEvalUsesRunningStats) {
  manual_seed(0);
  nn::BatchNorm2d bn(3, 1e-5, 0.5);
  Tensor x = randn({4, 3, 2, 2}) * 3.0 + 1.0;
  Tensor y = bn.forward(x);
  // Training: each channel normalized by its batch statistics.
  EXPECT_LT(y.mean({0, 2, 3}).abs().amax().item(), 1e-5);
  EXPECT_EQ(bn.num_batches_tracked.item(), 1.0);
  Tensor mean = x.mean({0, 2, 3}), var = x.var({0, 2, 3});
  EXPECT_TRUE(close(bn.running_mean, mean * 0.5, 1e-5, 1e-6));
  EXPECT_TRUE(close(bn.running_var, var * 0.5 + 0.5, 1e-5, 1e-6));
  bn.eval();
  Tensor e = bn.forward(x);
  Tensor want = (x - bn.running_mean.view({1, 3, 1, 1})) /
                (bn.running_var.view({1, 3, 1, 1}) + 1e-5).sqrt();
  EXPECT_TRUE(close(e, want, 1e-5, 1e-5));
  EXPECT_EQ(bn.num_batches_tracked.item(), 1.0);
  std::set<std::string> names;
  for (auto& [n, t] : bn.state_dict()) names.insert(n);
  EXPECT_EQ(names, (std::set<std::string>{"weight", "bias", "running_mean", "running_var",
                                          "num_batches_tracked"}));
}

TEST(ZooLayers, NormsActivationsAndPools) {
  manual_seed(0);
  Tensor x = randn({2, 4, 6, 6});
  nn::GroupNorm gn(2, 4);
  EXPECT_TRUE(close(gn.forward(x), group_norm(x, 2), 0, 1e-6));
  nn::RMSNorm rms(6, 1e-6);
  Tensor r = rms.forward(x);
  EXPECT_TRUE(close(r.pow(2.0).mean({-1}), ones({2, 4, 6}), 1e-4, 1e-4));
  EXPECT_EQ(nn::ReLU().forward(x).amin().item(), 0.0);
  EXPECT_TRUE(close(nn::SiLU().forward(x), x * x.sigmoid(), 1e-6, 1e-7));
  EXPECT_LE(nn::ReLU6().forward(x * 10.0).amax().item(), 6.0);
  EXPECT_EQ(nn::MaxPool2d({2}).forward(x).sizes(), (Shape{2, 4, 3, 3}));
  EXPECT_EQ(nn::AvgPool2d({3}, {1}, {1}).forward(x).sizes(), (Shape{2, 4, 6, 6}));
  EXPECT_EQ(nn::AdaptiveAvgPool2d({1}).forward(x).sizes(), (Shape{2, 4, 1, 1}));
}

TEST(ZooLayers, GRUCellFollowsPyTorchsEquations) {
  manual_seed(0);
  nn::GRUCell cell(3, 5);
  EXPECT_EQ(cell.weight_ih.sizes(), (Shape{15, 3}));
  EXPECT_EQ(cell.weight_hh.sizes(), (Shape{15, 5}));
  Tensor x = randn({2, 3}), h = randn({2, 5});
  auto part = [](const Tensor& t, int i) { return t.narrow(0, 5 * i, 5); };
  auto lin = [&](const Tensor& in, const Tensor& w, const Tensor& b, int i) {
    return in.matmul(part(w, i).t()) + part(b, i);
  };
  Tensor r = (lin(x, cell.weight_ih, cell.bias_ih, 0) + lin(h, cell.weight_hh, cell.bias_hh, 0)).sigmoid();
  Tensor z = (lin(x, cell.weight_ih, cell.bias_ih, 1) + lin(h, cell.weight_hh, cell.bias_hh, 1)).sigmoid();
  Tensor n = (lin(x, cell.weight_ih, cell.bias_ih, 2) + r * lin(h, cell.weight_hh, cell.bias_hh, 2)).tanh();
  EXPECT_TRUE(close(cell.forward(x, h), (1.0 - z) * n + z * h, 1e-5, 1e-6));
}

}  // namespace
}  // namespace ember::test
