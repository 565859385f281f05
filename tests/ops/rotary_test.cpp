// rotary_embedding, rotary_cos_sin and swiglu: errors that name the op and what to do, the table
// values, and the properties rotary embeddings are chosen for (position 0 unrotated, pair
// lengths kept, scores that depend on the distance only).
#include <gtest/gtest.h>

#include <cmath>

#include "ember/ember.h"
#include "support/expect_error.h"

namespace ember::test {
namespace {

TEST(Rotary, BadInputSaysWhatIsWrong) {
  const Tensor q = ones({1, 2, 5, 8});
  expect_error([&] { rotary_embedding(ones({1, 5, 3}), ones({5, 1}), ones({5, 1})); },
               {"rotary_embedding", "even D"});
  expect_error([&] { rotary_embedding(q, ones({5, 3}), ones({5, 3})); },
               {"rotary_embedding", "D/2 = 4", "D = 8"});
  expect_error([&] { rotary_embedding(q, ones({6, 4}), ones({6, 4})); },
               {"rotary_embedding", "do not broadcast", "[6, 4]"});
  expect_error([&] { rotary_embedding(q, ones({5, 4}), ones({5, 8})); },
               {"rotary_embedding", "same shape"});
  expect_error([&] { rotary_cos_sin(4, 7); }, {"rotary_cos_sin", "head_dim (7)", "even"});
}

TEST(Rotary, RotatesPairsByPosition) {
  const int64_t T = 6, D = 8;
  auto [cos, sin] = rotary_cos_sin(T, D, 10000);
  ASSERT_EQ(cos.sizes(), (Shape{T, D / 2}));
  // Pair i of position t turns by t * base^(-2i / D).
  EXPECT_NEAR(cos.to_vector<float>()[3 * 4 + 1], std::cos(3 * std::pow(10000.0, -2.0 / 8)), 1e-6);
  EXPECT_NEAR(sin.to_vector<float>()[5 * 4 + 3], std::sin(5 * std::pow(10000.0, -6.0 / 8)), 1e-6);
  const Tensor q = randn({2, 3, T, D});
  const Tensor r = rotary_embedding(q, cos, sin);
  // Position 0 is not rotated; each pair (i, i + D/2) keeps its length.
  EXPECT_LT((r.select(2, 0) - q.select(2, 0)).abs().amax().item(), 1e-6);
  auto pair_norms = [&](const Tensor& t) {
    const Tensor a = t.slice(-1, 0, D / 2), b = t.slice(-1, D / 2, D);
    return a * a + b * b;
  };
  EXPECT_LT((pair_norms(r) - pair_norms(q)).abs().amax().item(), 1e-5);
  // transformers' tables hold each angle twice; both forms agree.
  const Tensor full = rotary_embedding(q, cat({cos, cos}, -1), cat({sin, sin}, -1));
  EXPECT_LT((full - r).abs().amax().item(), 1e-6);
  // The score of a rotated query and key depends on their distance only.
  const Tensor rq = rotary_embedding(randn({D}).expand({T, D}), cos, sin);
  const Tensor rk = rotary_embedding(randn({D}).expand({T, D}), cos, sin);
  auto score = [&](int64_t m, int64_t n) {
    return (rq.select(0, m) * rk.select(0, n)).sum().item();
  };
  EXPECT_NEAR(score(3, 1), score(5, 3), 1e-4);
  EXPECT_NEAR(score(1, 4), score(2, 5), 1e-4);
}

TEST(Rotary, SwigluIsSiluOfTheGateTimesTheValue) {
  EXPECT_FLOAT_EQ(swiglu(tensor({1}), tensor({3})).item<float>(),
                  float(3 / (1 + std::exp(-1.0))));
  expect_error([&] { swiglu(ones({2, 3}), ones({4})); }, {"mul"});
}

}  // namespace
}  // namespace ember::test
