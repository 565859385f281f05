// AdamW::set_compiled: the compiled step over all parameters against the eager step.
#include <gtest/gtest.h>

#include <cmath>

#include "ember/autograd.h"
#include "ember/ember.h"
#include "ember/optim.h"

namespace ember {
namespace {

// The fused update may contract a multiply-add into one FMA: agreement to float32 rounding.
::testing::AssertionResult close(const Tensor& a, const Tensor& b) {
  std::vector<double> x = a.to_vector<double>(), y = b.to_vector<double>();
  for (size_t i = 0; i < x.size(); ++i)
    if (!(std::abs(x[i] - y[i]) <= 1e-6 + 1e-5 * std::abs(y[i])))
      return ::testing::AssertionFailure() << "element " << i << ": " << x[i] << " vs " << y[i];
  return ::testing::AssertionSuccess();
}

struct Params {
  std::vector<Tensor> params;
  std::vector<optim::ParamGroup> groups;
};

// Two groups (with and without weight decay), matrices and vectors, like decay_groups makes.
Params make_params(uint64_t seed) {
  manual_seed(seed);
  Params s;
  for (const Shape& shape : std::vector<Shape>{{16, 8}, {8}, {4, 4, 2}, {3}}) {
    Tensor p = randn(shape);
    p.requires_grad_(true);
    s.params.push_back(p);
  }
  s.groups = {{{s.params[0], s.params[2]}, 0.1}, {{s.params[1], s.params[3]}, 0.0}};
  return s;
}

TEST(AdamWCompiled, FollowsTheEagerStepAsTheLearningRateChanges) {
  Params e = make_params(5), c = make_params(5);
  optim::AdamW eager(e.groups, 1e-2, 0.9, 0.99), compiled(c.groups, 1e-2, 0.9, 0.99);
  compiled.set_compiled(true);
  for (int step = 0; step < 5; ++step) {
    for (size_t i = 0; i < e.params.size(); ++i) {
      Tensor g = randn(e.params[i].sizes());
      e.params[i].set_grad(g);
      c.params[i].set_grad(g.clone());
    }
    // A schedule: the compiled step must read the new rate, not the traced one.
    eager.set_lr(1e-2 / (step + 1));
    compiled.set_lr(1e-2 / (step + 1));
    eager.step();
    compiled.step();
    for (size_t i = 0; i < e.params.size(); ++i)
      EXPECT_TRUE(close(c.params[i], e.params[i])) << "param " << i << " step " << step;
  }
  // The moments are the optimizer state: compare through state_dict.
  nn::StateDict se = eager.state_dict(), sc = compiled.state_dict();
  ASSERT_EQ(se.size(), sc.size());
  for (size_t k = 0; k < se.size(); ++k) {
    EXPECT_EQ(se[k].first, sc[k].first);
    EXPECT_TRUE(close(sc[k].second, se[k].second)) << se[k].first;
  }
}

TEST(AdamWCompiled, ParametersWithoutGradsAreSkipped) {
  Params e = make_params(6), c = make_params(6);
  optim::AdamW eager(e.groups, 1e-2), compiled(c.groups, 1e-2);
  compiled.set_compiled(true);
  for (int step = 0; step < 2; ++step) {
    for (size_t i = 0; i < e.params.size(); ++i) {
      if (i == 1 && step == 1) continue;  // no grad this time: left alone
      Tensor g = randn(e.params[i].sizes());
      e.params[i].set_grad(g);
      c.params[i].set_grad(g.clone());
    }
    if (step == 1) {
      e.params[1].set_grad(Tensor());
      c.params[1].set_grad(Tensor());
    }
    eager.step();
    compiled.step();
    for (size_t i = 0; i < e.params.size(); ++i)
      EXPECT_TRUE(close(c.params[i], e.params[i])) << "param " << i << " step " << step;
  }
}

}  // namespace
}  // namespace ember
