// GPT training through compile(backend = "compiler"): model.loss compiled into one forward and one
// backward graph run as generated code, AdamW eager. From the same weights, seed and batches,
// 20 steps follow eager training: every loss within 1e-5 relative of eager's (measured: a few
// 1e-7; the fused kernels round as eager's but reductions sum in another order, and that
// compounds through the optimizer), and the parameters after the last step within 1e-4
// (absolute, for weights of order 0.02-1). With dropout the masks are the same. And
// compile(module) trains through its forward too.
#include <cmath>

#include "autograd/node.h"
#include "capture/capture_test_util.h"
#include "compiler/compiler_test_util.h"
#include "ember/nn.h"
#include "ember/optim.h"

namespace ember::test {
namespace {

void follow_eager(const nn::GPTConfig& cfg, const CompileOptions& opts) {
  CacheDir dir(kSharedCompilerCache);
  reset_compile_caches();
  manual_seed(3);
  auto eager = std::make_shared<nn::GPT>(cfg);
  manual_seed(3);
  auto model = std::make_shared<nn::GPT>(cfg);
  auto loss_fn = compile([m = model](const Tensor& x, const Tensor& y) { return m->loss(x, y); },
                         opts);
  optim::AdamW opt_e(optim::decay_groups(*eager, 0.1), 3e-3);
  optim::AdamW opt_c(optim::decay_groups(*model, 0.1), 3e-3);
  constexpr int kSteps = 20;
  manual_seed(5);
  std::vector<std::pair<Tensor, Tensor>> batches;
  for (int s = 0; s < kSteps; ++s)
    batches.push_back({randint(0, cfg.vocab_size, {4, cfg.block_size}),
                       randint(0, cfg.vocab_size, {4, cfg.block_size})});
  auto train = [&](auto&& loss_of, optim::AdamW& opt) {
    std::vector<double> losses;
    manual_seed(9);
    for (auto& [x, y] : batches) {
      opt.zero_grad();
      Tensor l = loss_of(x, y);
      l.backward();
      opt.step();
      losses.push_back(l.item<double>());
    }
    return losses;
  };
  std::vector<double> le = train([&](auto& x, auto& y) { return eager->loss(x, y); }, opt_e);
  std::vector<double> lc = train(
      [&](auto& x, auto& y) {
        Tensor l = loss_fn(x, y);
        EXPECT_EQ(l.grad_fn()->name(), "CompiledGraphBackward");
        return l;
      },
      opt_c);
  for (int s = 0; s < kSteps; ++s) EXPECT_NEAR(lc[s], le[s], 1e-5 * le[s]) << "step " << s;
  EXPECT_LT(le.back(), le.front());  // it trains
  auto pe = eager->named_parameters(), pc = model->named_parameters();
  ASSERT_EQ(pe.size(), pc.size());
  for (size_t i = 0; i < pe.size(); ++i) {
    std::vector<double> a = pe[i].second.to_vector<double>(), b = pc[i].second.to_vector<double>();
    double worst = 0;
    for (size_t k = 0; k < a.size(); ++k) worst = std::max(worst, std::abs(a[k] - b[k]));
    EXPECT_LT(worst, 1e-4) << pe[i].first;
  }
  CompileStats st = loss_fn.stats();
  EXPECT_EQ(st.traces, 1);
  EXPECT_EQ(st.breaks, 0);
}

// compile(module): the wrapper's forward trains too (parameters are graph inputs that require
// grad); with backend eager the grads equal eager's bit for bit.
TEST(GPTTrainingCompile, ModuleWrapperForwardTrains) {
  reset_compile_caches();
  manual_seed(3);
  auto eager = std::make_shared<nn::GPT>(tiny_gpt(0.0));
  manual_seed(3);
  auto model = std::make_shared<nn::GPT>(tiny_gpt(0.0));
  auto cm = compile(model, eager_backend());  // bit for bit: the interpreted graphs
  Tensor idx = randint(0, 11, {2, 8});
  for (int call = 0; call < 2; ++call) {
    eager->zero_grad();
    model->zero_grad();
    (eager->forward(idx) * 0.5).tanh().sum().backward();
    Tensor logits = cm(idx);
    EXPECT_EQ(logits.grad_fn()->name(), "CompiledGraphBackward");
    (logits * 0.5).tanh().sum().backward();
    auto pe = eager->named_parameters(), pc = model->named_parameters();
    for (size_t i = 0; i < pe.size(); ++i)
      EXPECT_TRUE(bits_equal(pc[i].second.grad(), pe[i].second.grad())) << pe[i].first;
  }
  EXPECT_EQ(cm.stats().traces, 1);
}

TEST(GPTTrainingCompile, CompilerFollowsEager) {
  follow_eager(tiny_gpt(0.0), compiler_opts());
}

TEST(GPTTrainingCompile, CompilerWithDropoutFollowsEager) {
  follow_eager(tiny_gpt(0.1), compiler_opts());
}

// Heads of 16 over 16 positions: the backward runs the attention and layer_norm backward
// kernels, and still follows eager.
TEST(GPTTrainingCompile, CompilerFollowsEagerThroughTheBackwardKernels) {
  nn::GPTConfig cfg = tiny_gpt(0.0);
  cfg.block_size = 16;
  cfg.n_embd = 32;
  follow_eager(cfg, spy_opts());
  EXPECT_TRUE(has(all_sources(), "attention backward over 8 matrices of 16 x 16"));
  EXPECT_TRUE(has(all_sources(), "layer_norm backward over 64 rows of 32"));
}

}  // namespace
}  // namespace ember::test
