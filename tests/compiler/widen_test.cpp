// Graphs of bfloat16 and float16 compile whole: their matmuls and row ops are widened to
// float32 between conversions (compiler/widen.h) instead of running on the eager kernels. A
// GPT forward with 16-bit weights matches the eager forward of the same weights.
#include <gtest/gtest.h>

#include "compiler/compiled_graph.h"
#include "compiler/compiler_test_util.h"
#include "ember/compile.h"
#include "ember/ember.h"
#include "ember/nn.h"

namespace ember::test {
namespace {

double max_abs_diff(const Tensor& a, const Tensor& b) {
  return (a.to(DType::Float64) - b.to(DType::Float64)).abs().amax().item();
}

class WidenTest : public ::testing::TestWithParam<DType> {};

TEST_P(WidenTest, GptForwardCompilesWholeAndMatchesEager) {
  const DType t = GetParam();
  CacheDir cache(kSharedCompilerCache);
  nn::GPTConfig c;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 64;
  c.block_size = 32;
  c.vocab_size = 65;
  c.dropout = 0;
  manual_seed(4);
  auto m = std::make_shared<nn::GPT>(c);
  m->to(t);
  m->eval();
  for (auto& [n, p] : m->named_parameters()) ASSERT_EQ(p.dtype(), t) << n;
  NoGradGuard no_grad;
  CompileOptions o = spy_opts();
  auto f = compile(m, o);
  const Tensor idx = randint(0, 65, {2, 32});
  const Tensor got = f(idx), want = m->forward(idx);
  ASSERT_EQ(got.dtype(), t);
  // No op is left to the eager kernels for its dtype: nothing computes in 16 bits outside the
  // generated code but data movement and the embedding lookups (matmuls left as plain BLAS
  // calls do so in float32).
  ASSERT_TRUE(last_compiled());
  for (const auto& [op, dt] : last_compiled()->eager_ops()) {
    if (dt != t) continue;
    EXPECT_TRUE(op == "index_select" || op == "full" || op == "triu" || op == "contiguous" ||
                op == "clone" || op == "cat")
        << op << " runs eagerly in " << dtype_name(t);
  }
  EXPECT_GT(count(last_source(), "ember::fn::"), 10);  // the layer norms, GELUs, softmaxes ...
  // Both round each op's result to 16 bits; they differ in summation order, which can move a
  // result by a unit in the last place of its 16-bit dtype.
  const double err = max_abs_diff(got, want);
  const double scale = want.to(DType::Float64).abs().amax().item();
  RecordProperty("max_abs_error", std::to_string(err));
  RecordProperty("max_abs_logit", std::to_string(scale));
  std::printf("%s GPT forward, compiled against eager: max |error| %.3g (logits up to %.3g)\n",
              std::string(dtype_name(t)).c_str(), err, scale);
  EXPECT_LE(err, (t == DType::BFloat16 ? 0.05 : 0.01) * scale);
}

INSTANTIATE_TEST_SUITE_P(SixteenBit, WidenTest,
                         ::testing::Values(DType::BFloat16, DType::Float16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

}  // namespace
}  // namespace ember::test
