// The GPT on the GPU: the same weights and batch give the CPU's loss and grads (dropout
// included: both devices draw the same Philox numbers), training steps lower the loss, and
// the model moves between devices with its tied weights still tied.
#include <gtest/gtest.h>

#include <cmath>

#include "ember/cuda.h"
#include "ember/ember.h"
#include "ember/nn.h"
#include "ember/optim.h"

namespace ember::test {
namespace {

const Device kGpu{DeviceType::CUDA, 0};

nn::GPTConfig small_config(double dropout) {
  nn::GPTConfig c;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 32;
  c.block_size = 16;
  c.vocab_size = 65;
  c.dropout = dropout;
  return c;
}

double max_abs_diff(const Tensor& a, const Tensor& b) {
  NoGradGuard no_grad;
  return (a.cpu().to(DType::Float64) - b.cpu().to(DType::Float64)).abs().amax().item();
}

TEST(CudaGpt, LossAndGradsMatchTheCpu) {
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device on this machine";
  for (double dropout : {0.0, 0.2}) {
    manual_seed(7);
    nn::GPT cpu_model(small_config(dropout));
    manual_seed(7);
    nn::GPT gpu_model(small_config(dropout));
    gpu_model.to(kGpu);
    // Tied weights stay tied after the move.
    EXPECT_EQ(gpu_model.wte->weight.impl(), gpu_model.lm_head->weight.impl());
    EXPECT_EQ(gpu_model.wte->weight.device(), kGpu);
    Tensor x = randint(0, 65, {4, 16}), y = randint(0, 65, {4, 16});
    const auto rng = get_rng_state();
    Tensor cpu_loss = cpu_model.loss(x, y);
    set_rng_state(rng);
    Tensor gpu_loss = gpu_model.loss(x.cuda(), y.cuda());
    ASSERT_EQ(gpu_loss.device(), kGpu);
    EXPECT_NEAR(gpu_loss.item(), cpu_loss.item(), 1e-4) << "dropout " << dropout;
    cpu_loss.backward();
    gpu_loss.backward();
    auto cp = cpu_model.named_parameters(), gp = gpu_model.named_parameters();
    ASSERT_EQ(cp.size(), gp.size());
    for (size_t i = 0; i < cp.size(); ++i) {
      ASSERT_TRUE(gp[i].second.grad().defined()) << gp[i].first;
      EXPECT_EQ(gp[i].second.grad().device(), kGpu) << gp[i].first;
      NoGradGuard no_grad;
      const double scale = cp[i].second.grad().abs().amax().item() + 1e-6;
      EXPECT_LT(max_abs_diff(gp[i].second.grad(), cp[i].second.grad()) / scale, 1e-3)
          << gp[i].first << " dropout " << dropout;
    }
  }
}

TEST(CudaGpt, TrainingLowersTheLossAndSamplesOnTheGpu) {
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device on this machine";
  manual_seed(3);
  nn::GPT model(small_config(0.1));
  model.to(kGpu);
  optim::AdamW opt(optim::decay_groups(model, 0.1), 3e-3, 0.9, 0.99);
  const std::vector<Tensor> params = model.parameters();
  // A fixed batch with a learnable pattern: y is x shifted by one token.
  TensorOptions ids(DType::Int64);
  ids.device = kGpu;
  Tensor seq = randint(0, 65, {8, 17}, ids);
  Tensor x = seq.slice(1, 0, 16).contiguous(), y = seq.slice(1, 1, 17).contiguous();
  double first = 0, last = 0;
  for (int step = 0; step < 60; ++step) {
    Tensor loss = model.loss(x, y);
    opt.zero_grad();
    loss.backward();
    optim::clip_grad_norm_(params, 1.0);
    opt.step();
    (step == 0 ? first : last) = loss.item();
  }
  EXPECT_LT(last, first * 0.5) << "first " << first << ", last " << last;
  for (const Tensor& p : model.parameters()) EXPECT_EQ(p.device(), kGpu);
  Tensor out = model.generate(x.slice(0, 0, 1), 20, 1.0, 10);
  EXPECT_EQ(out.device(), kGpu);
  EXPECT_EQ(out.sizes(), (Shape{1, 36}));
  EXPECT_GE(out.amin().item(), 0);
  EXPECT_LT(out.amax().item(), 65);
}

}  // namespace
}  // namespace ember::test
