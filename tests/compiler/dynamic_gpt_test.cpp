// The GPT compiled and called at sizes that vary as they do in use: the forward at every
// sequence length from 1 to 256 (sampling with a growing context) and training whose last batch is smaller.
// Graphs of one form share kernels over the varying sizes (families.h), the attention, layer
// norm backward and column-sum pattern kernels included, so the C++ compiler runs a fixed
// number of times however many sizes come, and every result matches eager.
#include <gtest/gtest.h>

#include "compiler/compiler_test_util.h"
#include "ember/compile.h"
#include "ember/ember.h"
#include "ember/nn.h"
#include "ember/optim.h"

namespace ember::test {
namespace {

nn::GPTConfig small_gpt() {
  nn::GPTConfig c;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 32;
  c.block_size = 256;
  c.vocab_size = 65;
  c.dropout = 0;
  return c;
}

// The forward of a fresh small GPT compiled (eval, no grad) and called at every length from 1
// to `last`, each against eager; with `mark`, the first input's length is marked dynamic.
// Returns the libraries the calls needed and the callable's stats.
std::pair<int64_t, CompileStats> forward_at_every_length(int64_t last, bool mark) {
  CacheDir cache(kSharedCompilerCache);
  forget_shared_code();
  manual_seed(1);
  auto m = std::make_shared<nn::GPT>(small_gpt());
  m->eval();
  NoGradGuard no_grad;
  auto f = compile(m, compiler_opts());
  const compiler::ToolchainStats before = compiler::toolchain_stats();
  for (int64_t t = 1; t <= last; ++t) {
    manual_seed(uint64_t(t));
    const Tensor idx = randint(0, 65, {2, t});
    if (mark && t == 1) mark_dynamic(idx, 1);
    EXPECT_TRUE(close(f(idx), m->forward(idx), 1e-4, 1e-5)) << "length " << t;
  }
  return {new_libraries(before), f.stats()};
}

TEST(DynamicGpt, ForwardAtEveryLengthTo256BuildsTwoLibraries) {
  const auto [libraries, st] = forward_at_every_length(256, /*mark=*/false);
  // T = 1 specialized (size 1 is); T = 2 misses its size guard and runs interpreted, the
  // first of its form; T = 3 fits the kernels over T, attention included: one library for
  // every later length.
  EXPECT_EQ(libraries, 2);
  EXPECT_EQ(st.eager_fallbacks, 0);
  EXPECT_EQ(st.traces, 256);
  EXPECT_EQ(st.shared_compiles, 254);
}

TEST(DynamicGpt, MarkDynamicBuildsOneLibrary) {
  const auto [libraries, st] = forward_at_every_length(64, /*mark=*/true);
  // Dynamic from the first call: T = 1 and T = 2 run interpreted (each the first of its
  // form), T = 3 builds the kernels every later length shares.
  EXPECT_EQ(libraries, 1);
  EXPECT_EQ(st.deferred_compiles, 2);
}

TEST(DynamicGpt, PartialLastBatchRecompilesOnceThenShares) {
  CacheDir cache(kSharedCompilerCache);
  forget_shared_code();
  manual_seed(2);
  auto eager = std::make_shared<nn::GPT>(small_gpt());
  manual_seed(2);
  auto model = std::make_shared<nn::GPT>(small_gpt());
  auto loss_fn = compile([m = model](const Tensor& x, const Tensor& y) { return m->loss(x, y); },
                         compiler_opts());
  optim::AdamW opt_e({{eager->parameters()}}, 1e-3);
  optim::AdamW opt_c({{model->parameters()}}, 1e-3);
  const compiler::ToolchainStats before = compiler::toolchain_stats();
  int64_t after_first_epoch = 0;
  // Two epochs of batches 6, 6, 6 and a partial 4, then a partial 3 (another dataset size).
  const std::vector<int64_t> batches = {6, 6, 6, 4, 6, 6, 6, 4, 3};
  for (size_t s = 0; s < batches.size(); ++s) {
    manual_seed(100 + s);
    const Tensor x = randint(0, 65, {batches[s], 16}), y = randint(0, 65, {batches[s], 16});
    opt_e.zero_grad();
    opt_c.zero_grad();
    Tensor le = eager->loss(x, y), lc = loss_fn(x, y);
    le.backward();
    lc.backward();
    EXPECT_NEAR(lc.item(), le.item(), 1e-4 * std::abs(le.item())) << "step " << s;
    opt_e.step();
    opt_c.step();
    if (s == 3) after_first_epoch = new_libraries(before);
  }
  auto pe = eager->named_parameters(), pc = model->named_parameters();
  for (size_t i = 0; i < pe.size(); ++i)
    EXPECT_TRUE(close(pc[i].second, pe[i].second, 1e-3, 1e-4)) << pe[i].first;
  // Batch 6 built the forward and backward; batch 4 missed the batch guard and fitted both
  // over the batch size with batch 6's: two more, and none after, for any batch size.
  EXPECT_LE(after_first_epoch, 4);
  EXPECT_EQ(new_libraries(before), after_first_epoch);
  EXPECT_EQ(loss_fn.stats().recompiles, 2);  // batch 4, then batch 3
  EXPECT_EQ(loss_fn.stats().shared_compiles, 2);
  // The recompile names the batch dim.
  const ExplainReport r = loss_fn.explain();
  ASSERT_FALSE(r.recompile_reasons.empty());
  EXPECT_NE(r.recompile_reasons[0].find("input 0 size[0]: expected 6, got 4"), std::string::npos)
      << r.recompile_reasons[0];
}

}  // namespace
}  // namespace ember::test
