// GradScaler: scaled grads come back unscaled, a step with inf grads is skipped and backs the
// scale off, good steps grow it, disabled is a pass-through, and float16 autocast training with
// it lowers the loss.
#include <gtest/gtest.h>

#include <cmath>

#include "capture/capture_test_util.h"
#include "ember/ember.h"
#include "ember/nn.h"
#include "ember/optim.h"
#include "support/expect_error.h"

namespace ember::optim {
namespace {

using test::expect_error;

struct Problem {
  Tensor w = (randn({4, 3}) * 0.1).requires_grad_(true);
  Tensor x = randn({8, 3}), y = randn({8, 4});
  Tensor loss() const { return ((matmul(x, w.t()) - y) * (matmul(x, w.t()) - y)).mean(); }
};

TEST(GradScaler, UnscaledGradsEqualPlainOnesAndStepsTake) {
  manual_seed(1);
  Problem p;
  SGD opt({{{p.w}, 0.0}}, 0.1);
  p.loss().backward();
  const std::vector<float> plain = p.w.grad().to_vector<float>();
  opt.zero_grad();
  GradScaler scaler(1024.0, 2.0, 0.5, 3);
  scaler.scale(p.loss()).backward();
  EXPECT_NEAR(p.w.grad().to_vector<float>()[0], plain[0] * 1024, 1e-3 * std::abs(plain[0] * 1024) + 1e-6);
  scaler.unscale_(opt);
  const std::vector<float> got = p.w.grad().to_vector<float>();
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], plain[i], 1e-5 * (1 + std::abs(plain[i])));
  const std::vector<float> before = p.w.to_vector<float>();
  EXPECT_TRUE(scaler.step(opt));
  scaler.update();
  EXPECT_NE(p.w.to_vector<float>(), before);
  EXPECT_EQ(scaler.get_scale(), 1024.0);
  // Growth after growth_interval (3) good steps in a row.
  for (int k = 0; k < 2; ++k) {
    opt.zero_grad();
    scaler.scale(p.loss()).backward();
    EXPECT_TRUE(scaler.step(opt));  // unscales by itself
    scaler.update();
  }
  EXPECT_EQ(scaler.get_scale(), 2048.0);
  expect_error([&] { scaler.update(); }, "no step since the last update");
}

TEST(GradScaler, InfGradsSkipTheStepAndBackOff) {
  manual_seed(2);
  Problem p;
  SGD opt({{{p.w}, 0.0}}, 0.1);
  GradScaler scaler(1024.0, 2.0, 0.5, 100);
  scaler.scale(p.loss()).backward();
  Tensor g = p.w.grad();
  {
    NoGradGuard no_grad;
    g.mul_(INFINITY);  // an overflow in backward
  }
  const std::vector<float> before = p.w.to_vector<float>();
  EXPECT_FALSE(scaler.step(opt));
  scaler.update();
  EXPECT_EQ(p.w.to_vector<float>(), before);  // untouched
  EXPECT_EQ(scaler.get_scale(), 512.0);
  EXPECT_EQ(scaler.skipped_steps(), 1);
  expect_error([] { GradScaler(0.0); }, "init_scale");
}

TEST(GradScaler, DisabledIsAPassThrough) {
  manual_seed(3);
  Problem p;
  SGD opt({{{p.w}, 0.0}}, 0.1);
  GradScaler scaler(1024.0, 2.0, 0.5, 10, false);
  Tensor l = p.loss();
  EXPECT_EQ(scaler.scale(l).item(), l.item());
  scaler.scale(l).backward();
  scaler.unscale_(opt);
  EXPECT_TRUE(scaler.step(opt));
  scaler.update();
  EXPECT_EQ(scaler.get_scale(), 1.0);
}

TEST(GradScaler, Float16AutocastTrainingLowersTheLoss) {
  manual_seed(4);
  nn::GPTConfig c = test::tiny_gpt();
  c.n_layer = 1;
  nn::GPT model(c);
  AdamW opt(decay_groups(model, 0.1), 1e-2, 0.9, 0.99);
  GradScaler scaler;
  Tensor seq = randint(0, 11, {4, 9});
  Tensor x = seq.slice(1, 0, 8).contiguous(), y = seq.slice(1, 1, 9).contiguous();
  double first = 0, last = 0;
  for (int step = 0; step < 40; ++step) {
    Tensor loss;
    {
      autocast scope(DType::Float16);
      loss = model.loss(x, y);
    }
    opt.zero_grad();
    scaler.scale(loss).backward();
    scaler.unscale_(opt);
    clip_grad_norm_(model.parameters(), 1.0);
    scaler.step(opt);
    scaler.update();
    (step == 0 ? first : last) = loss.item();
  }
  EXPECT_LT(last, 0.6 * first) << "first " << first << ", last " << last;
  for (const Tensor& p : model.parameters()) EXPECT_EQ(p.dtype(), DType::Float32);
}

}  // namespace
}  // namespace ember::optim
