// GPT training steps through compile(backend = "compiler"): the joint forward/backward graphs run
// as generated code and follow eager training within a stated tolerance.
#include "capture/capture_test_util.h"
#include "compiler/compiler_test_util.h"
#include "ember/nn.h"
#include "ember/optim.h"

namespace ember::test {
namespace {

TEST(GPTTrainingCompile, CompilerFollowsEager) {
  CacheDir dir(kSharedCompilerCache);
  reset_compile_caches();
  nn::GPTConfig c;
  c.block_size = 8;
  c.vocab_size = 11;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 16;
  c.dropout = 0.1;
  manual_seed(3);
  auto eager = std::make_shared<nn::GPT>(c);
  manual_seed(3);
  auto model = std::make_shared<nn::GPT>(c);
  auto loss_fn = compile([m = model](const Tensor& x, const Tensor& y) { return m->loss(x, y); },
                         compiler_opts());
  optim::AdamW opt_e(optim::decay_groups(*eager, 0.1), 1e-2);
  optim::AdamW opt_c(optim::decay_groups(*model, 0.1), 1e-2);
  manual_seed(5);
  std::vector<std::pair<Tensor, Tensor>> batches;
  for (int s = 0; s < 3; ++s) batches.push_back({randint(0, 11, {2, 8}), randint(0, 11, {2, 8})});
  std::vector<double> le, lc;
  manual_seed(9);
  for (auto& [x, y] : batches) {
    opt_e.zero_grad();
    Tensor l = eager->loss(x, y);
    l.backward();
    opt_e.step();
    le.push_back(l.item<double>());
  }
  manual_seed(9);
  for (auto& [x, y] : batches) {
    opt_c.zero_grad();
    Tensor l = loss_fn(x, y);
    l.backward();
    opt_c.step();
    lc.push_back(l.item<double>());
  }
  for (size_t i = 0; i < le.size(); ++i) EXPECT_NEAR(le[i], lc[i], 1e-5) << i;
}

}  // namespace
}  // namespace ember::test
