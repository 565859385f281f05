// fn::first_extreme (the CUDA argmax's two passes over a thread's values) against a fold of
// (value, position) pairs: random values with ties, NaNs, signed zeros, infinities and
// positions left out, for argmax and argmin.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "kernels/first_extreme.h"

namespace ember::test {
namespace {

// The first position of the extreme by folding pairs one by one: NaN the extreme, ties to the
// first position. -1 where none is valid.
template <bool Max>
int folded(const std::vector<float>& v, const std::vector<bool>& ok, float* best) {
  int at = -1;
  for (int k = 0; k < int(v.size()); ++k) {
    if (!ok[size_t(k)]) continue;
    const float x = v[size_t(k)];
    if (at < 0) {
      at = k;
      *best = x;
      continue;
    }
    const bool xn = std::isnan(x), bn = std::isnan(*best);
    const bool better = (xn || bn) ? (xn && !bn) : (Max ? x > *best : x < *best);
    if (better) {
      at = k;
      *best = x;
    }
  }
  return at;
}

template <bool Max>
void check(const std::vector<float>& v, const std::vector<bool>& ok, const std::string& what) {
  constexpr int N = 64;
  ASSERT_EQ(v.size(), size_t(N));
  float want_v = 0, got_v = 0;
  int got = -2;
  const int want = folded<Max>(v, ok, &want_v);
  fn::first_extreme<float, Max, N>([&](int k) { return bool(ok[size_t(k)]); },
                                   [&](int k) { return v[size_t(k)]; }, &got_v, &got);
  EXPECT_EQ(got, want) << what << (Max ? " argmax" : " argmin");
  if (want >= 0) {
    if (std::isnan(want_v))
      EXPECT_TRUE(std::isnan(got_v)) << what;
    else
      EXPECT_EQ(got_v, want_v) << what;
  }
}

TEST(FirstExtreme, GivesTheFoldsFirstPositionOfTheExtreme) {
  std::mt19937 gen(11);
  std::uniform_real_distribution<float> u(-4.0f, 4.0f);
  std::uniform_int_distribution<int> pick(0, 63), small(-2, 2);
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (int round = 0; round < 400; ++round) {
    std::vector<float> v(64);
    std::vector<bool> ok(64, true);
    const int kind = round % 8;
    for (float& x : v) x = kind == 1 ? float(small(gen)) : u(gen);  // kind 1: many ties
    if (kind == 2) v[size_t(pick(gen))] = nan, v[size_t(pick(gen))] = nan;
    if (kind == 3) v[size_t(pick(gen))] = inf, v[size_t(pick(gen))] = -inf;
    if (kind == 4)
      for (float& x : v) x = pick(gen) % 2 ? 0.0f : -0.0f;  // signed zeros, all equal
    if (kind == 5)
      for (int k = 0; k < 64; ++k) ok[size_t(k)] = pick(gen) % 3 != 0;  // positions left out
    if (kind == 6) {
      for (int k = 0; k < 64; ++k) ok[size_t(k)] = k < 5;  // a row's tail
      v[size_t(3)] = nan;
      v[size_t(40)] = nan;  // left out: not the result
    }
    if (kind == 7)
      for (float& x : v) x = -inf;  // all at the bottom
    const std::string what = "round " + std::to_string(round) + " kind " + std::to_string(kind);
    check<true>(v, ok, what);
    check<false>(v, ok, what);
  }
  // No valid position: -1.
  std::vector<float> v(64, 1.0f);
  std::vector<bool> none(64, false);
  check<true>(v, none, "no position");
}

}  // namespace
}  // namespace ember::test
