// batch_norm and group_norm: errors that name the op and what to do, the running-stat update of
// batch_norm in training (eager, and written back by compile), and group_norm with one group.
#include <gtest/gtest.h>

#include <cmath>

#include "ember/compile.h"
#include "ember/ember.h"
#include "support/expect_error.h"

namespace ember::test {
namespace {

std::vector<float> values(const Tensor& t) { return t.to_vector<float>(); }

TEST(ChannelNorms, BadInputSaysWhatIsWrong) {
  const Tensor x = ones({4, 3, 5});
  expect_error([&] { batch_norm(x, Tensor(), Tensor()); },
               {"batch_norm", "running_mean", "training = true"});
  expect_error([&] { batch_norm(x, zeros({3}), Tensor(), {}, {}, true); }, {"batch_norm", "both"});
  expect_error([&] { batch_norm(ones({1, 3}), Tensor(), Tensor(), {}, {}, true); },
               {"batch_norm", "more than one value per channel", "[1, 3]"});
  expect_error([&] { batch_norm(x, zeros({3}), ones({3}), ones({4})); },
               {"batch_norm", "weight", "[3]", "[4]"});
  expect_error([&] { batch_norm(ones({3}), zeros({3}), ones({3})); },
               {"batch_norm", "[N, C, ...]"});
  expect_error([&] { group_norm(ones({2, 6, 4}), 4); },
               {"group_norm", "num_groups = 4", "6 channels"});
  expect_error([&] { group_norm(ones({2, 6, 4}), 3, ones({3})); }, {"group_norm", "weight", "[6]"});
}

TEST(ChannelNorms, BatchNormUpdatesRunningStatsInPlace) {
  // Channel 0 holds 1, 2, 3, 4 and channel 1 holds 10, 20, 30, 40.
  const Tensor x = from_vector<float>({1, 2, 10, 20, 3, 4, 30, 40}, {2, 2, 2});
  Tensor rm = zeros({2}), rv = ones({2});
  Tensor w = ones({2}).requires_grad_(true);
  const Tensor y = batch_norm(x, rm, rv, w, Tensor(), true, 0.1);
  // Batch means 2.5 and 25; unbiased variances 5/3 and 500/3.
  const std::vector<float> rm_v = values(rm), rv_v = values(rv);
  EXPECT_FLOAT_EQ(rm_v[0], 0.25f);
  EXPECT_FLOAT_EQ(rm_v[1], 2.5f);
  EXPECT_FLOAT_EQ(rv_v[0], 0.9f + 0.1f * 5.0f / 3.0f);
  EXPECT_FLOAT_EQ(rv_v[1], 0.9f + 0.1f * 500.0f / 3.0f);
  EXPECT_FALSE(rm.requires_grad());
  EXPECT_TRUE(y.requires_grad());
  // Normalized with the biased variance 1.25: (1 - 2.5) / sqrt(1.25 + 1e-5).
  EXPECT_NEAR(y.to_vector<float>()[0], -1.5 / std::sqrt(1.25 + 1e-5), 1e-6);
  // Out of training the running stats normalize and nothing is updated.
  const Tensor e = batch_norm(x, rm, rv);
  EXPECT_NEAR(e.to_vector<float>()[0], (1 - 0.25) / std::sqrt(rv_v[0] + 1e-5), 1e-6);
  EXPECT_EQ(values(rm), rm_v);
  // Compiled, the update is written back to the running stats on every call, replays included.
  CompileOptions opts;
  opts.backend = "eager";
  auto step = compile([](const Tensor& in, Tensor m, Tensor v) {
    return batch_norm(in, m, v, Tensor(), Tensor(), true);
  }, opts);
  Tensor cm = zeros({2}), cv = ones({2}), em = zeros({2}), ev = ones({2});
  for (int i = 0; i < 3; ++i) {
    const Tensor got = step(x, cm, cv);
    const Tensor want = batch_norm(x, em, ev, Tensor(), Tensor(), true);
    EXPECT_EQ(values(got), values(want));
  }
  EXPECT_EQ(values(cm), values(em));
  EXPECT_EQ(values(cv), values(ev));
  EXPECT_GT(values(cm)[1], 6.0f);  // 25 (1 - 0.9^3)
}

TEST(ChannelNorms, GroupNormWithOneGroupIsLayerNormOverEachSample) {
  const Tensor x = randn({3, 4, 5});
  EXPECT_LT((group_norm(x, 1) - layer_norm(x, {4, 5})).abs().amax().item(), 1e-5);
}

}  // namespace
}  // namespace ember::test
