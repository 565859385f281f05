// Optimizers against hand-computed updates; clipping; the LR schedule.
#include <gtest/gtest.h>

#include <cmath>

#include "ember/ember.h"
#include "ember/optim.h"

namespace ember::optim {
namespace {

TEST(AdamW, MatchesTheUpdateRuleOverSeveralSteps) {
  Tensor p = tensor({1.0, -2.0}, DType::Float64).requires_grad_();
  AdamW opt({{{p}, 0.1}}, 0.01, 0.9, 0.99, 1e-8);
  double ref[2] = {1.0, -2.0}, m[2] = {0, 0}, v[2] = {0, 0};
  for (int step = 1; step <= 5; ++step) {
    opt.zero_grad();
    Tensor loss = (p * p * p).sum();  // grad = 3 p^2
    loss.backward();
    opt.step();
    for (int i = 0; i < 2; ++i) {
      double g = 3 * ref[i] * ref[i];
      ref[i] *= 1 - 0.01 * 0.1;
      m[i] = 0.9 * m[i] + 0.1 * g;
      v[i] = 0.99 * v[i] + 0.01 * g * g;
      double mh = m[i] / (1 - std::pow(0.9, step)), vh = v[i] / (1 - std::pow(0.99, step));
      ref[i] -= 0.01 * mh / (std::sqrt(vh) + 1e-8);
    }
    auto got = p.to_vector<double>();
    EXPECT_NEAR(got[0], ref[0], 1e-12);
    EXPECT_NEAR(got[1], ref[1], 1e-12);
  }
  EXPECT_EQ(opt.steps(), 5);
}

TEST(AdamW, StateDictRoundTripContinuesIdentically) {
  auto run = [](AdamW& opt, Tensor& p, int steps) {
    for (int i = 0; i < steps; ++i) {
      opt.zero_grad();
      (p * p).sum().backward();
      opt.step();
    }
  };
  Tensor a = tensor({0.5, 1.5}, DType::Float64).requires_grad_();
  AdamW oa({{{a}, 0.0}}, 0.1);
  run(oa, a, 3);
  Tensor b = a.detach().clone().requires_grad_();
  AdamW ob({{{b}, 0.0}}, 0.1);
  ob.load_state_dict(oa.state_dict());
  run(oa, a, 2);
  run(ob, b, 2);
  EXPECT_EQ(a.to_vector<double>(), b.to_vector<double>());
  nn::StateDict bad = oa.state_dict();
  bad[1].second = zeros({3}, DType::Float64);
  EXPECT_THROW(ob.load_state_dict(bad), Error);
}

TEST(SGD, MomentumUpdate) {
  Tensor p = tensor({1.0}, DType::Float64).requires_grad_();
  SGD opt({{{p}, 0.0}}, 0.1, 0.9);
  double ref = 1.0, buf = 0;
  for (int step = 0; step < 4; ++step) {
    opt.zero_grad();
    (p * p).sum().backward();
    opt.step();
    double g = 2 * ref;
    buf = step == 0 ? g : 0.9 * buf + g;
    ref -= 0.1 * buf;
    EXPECT_NEAR(p.item(), ref, 1e-12);
  }
}

TEST(ParamGroup, OwnLearningRateStepsAsASeparateOptimizerWould) {
  // Group 1 has its own rate; group 0 follows set_lr. Each must move as a one-group optimizer
  // with that rate moves its parameter, eager or compiled.
  for (bool compiled : {false, true}) {
    Tensor a = tensor({1.0, -2.0}).requires_grad_(), b = tensor({0.5}).requires_grad_();
    Tensor ra = a.detach().clone().requires_grad_(), rb = b.detach().clone().requires_grad_();
    AdamW opt({ParamGroup({a}, 0.1), ParamGroup({b}, 0.0, 0.05)}, 0.01, 0.9, 0.99);
    opt.set_compiled(compiled);
    AdamW ref_a({{{ra}, 0.1}}, 0.01, 0.9, 0.99), ref_b({{{rb}, 0.0}}, 0.05, 0.9, 0.99);
    for (int step = 0; step < 3; ++step) {
      opt.set_lr(0.01 / (step + 1));
      ref_a.set_lr(0.01 / (step + 1));
      for (Tensor* p : {&a, &b, &ra, &rb}) {
        p->set_grad(Tensor());
        (*p * *p * *p).sum().backward();
      }
      opt.step();
      ref_a.step();
      ref_b.step();
      EXPECT_EQ(a.to_vector<float>(), ra.to_vector<float>()) << "compiled " << compiled;
      EXPECT_EQ(b.to_vector<float>(), rb.to_vector<float>()) << "compiled " << compiled;
    }
  }
  Tensor p = tensor({1.0}, DType::Float64).requires_grad_();
  SGD sgd({ParamGroup({p}, 0.0, 0.25)}, 0.1);
  (p * p).sum().backward();
  sgd.step();
  EXPECT_DOUBLE_EQ(p.item(), 1.0 - 0.25 * 2.0);
}

TEST(ClipGradNorm, ScalesToMaxNorm) {
  Tensor a = tensor({3.0, 0.0}).requires_grad_(), b = tensor({4.0}).requires_grad_();
  ((a * a).sum() * 0.5 + (b * b).sum() * 0.5).backward();  // grads 3,0 and 4: norm 5
  double norm = clip_grad_norm_({a, b}, 1.0).item();
  EXPECT_NEAR(norm, 5.0, 1e-6);
  EXPECT_NEAR(a.grad().to_vector<float>()[0], 0.6, 1e-5);
  EXPECT_NEAR(b.grad().to_vector<float>()[0], 0.8, 1e-5);
}

TEST(CosineLR, WarmupDecayFloor) {
  EXPECT_NEAR(cosine_lr(0, 1e-3, 1e-4, 100, 2000), 1e-3 / 101, 1e-12);
  EXPECT_NEAR(cosine_lr(100, 1e-3, 1e-4, 100, 2000), 1e-3, 1e-12);
  EXPECT_NEAR(cosine_lr(1050, 1e-3, 1e-4, 100, 2000), 0.55e-3, 1e-9);
  EXPECT_NEAR(cosine_lr(5000, 1e-3, 1e-4, 100, 2000), 1e-4, 1e-12);
}

TEST(DecayGroups, MatricesDecayVectorsDoNot) {
  nn::Linear l(3, 2);
  auto groups = decay_groups(l, 0.1);
  ASSERT_EQ(groups.size(), 2u);
  EXPECT_EQ(groups[0].params.size(), 1u);
  EXPECT_EQ(groups[0].params[0].dim(), 2);
  EXPECT_EQ(groups[1].params.size(), 1u);
  EXPECT_EQ(groups[1].weight_decay, 0.0);
}

}  // namespace
}  // namespace ember::optim
