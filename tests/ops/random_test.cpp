// Random numbers: the Philox core against published answers, the generator state,
// reproducibility, distributions over a million draws, and argument errors.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <thread>

#include "core/generator.h"
#include "core/philox.h"
#include "ember/ember.h"
#include "support/expect_error.h"

namespace ember {
namespace {

using test::expect_error;

// ---- Philox4x32-10 ----

// Known-answer vectors published with the Random123 library (Salmon et al. 2011).
TEST(Philox, MatchesPublishedKnownAnswers) {
  struct Kat {
    philox::Block ctr;
    uint32_t k0, k1;
    philox::Block want;
  };
  const Kat kats[] = {
      {{{0, 0, 0, 0}}, 0, 0, {{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}}},
      {{{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}},
       0xffffffff,
       0xffffffff,
       {{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}}},
      {{{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}},
       0xa4093822,
       0x299f31d0,
       {{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}}},
  };
  for (const Kat& k : kats) {
    philox::Block got = philox::philox4x32_10(k.ctr, k.k0, k.k1);
    for (int i = 0; i < 4; ++i) EXPECT_EQ(got.v[i], k.want.v[i]) << "word " << i;
  }
}

TEST(Philox, UsableAtCompileTime) {
  constexpr philox::Block b = philox::philox4x32_10(philox::Block{{0, 0, 0, 0}}, 0, 0);
  static_assert(b.v[0] == 0x6627e8d5u && b.v[3] == 0x9b00dbd8u);
  static_assert(philox::draw(0, 3) == 0x9b00dbd8u);
  // Block b of the stream is the counter {lo(b), hi(b), 0, 0} under the key {lo, hi}(seed).
  constexpr uint64_t seed = 0x299f31d0a4093822ull;
  constexpr philox::Block direct =
      philox::philox4x32_10(philox::Block{{5, 1, 0, 0}}, 0xa4093822u, 0x299f31d0u);
  static_assert(philox::block(seed, (uint64_t(1) << 32) + 5).v[2] == direct.v[2]);
}

TEST(Philox, UniformMappingsStayInsideTheirIntervals) {
  for (uint32_t w : {0u, 1u, 0x7fffffffu, 0xffffff00u, 0xffffffffu}) {
    for (int bits : {8, 11, 24}) {
      float u = philox::uniform_float(w, bits);
      EXPECT_GE(u, 0.0f);
      EXPECT_LT(u, 1.0f);
    }
    EXPECT_GT(philox::uniform_float_open0(w), 0.0f);
    EXPECT_LE(philox::uniform_float_open0(w), 1.0f);
    EXPECT_LT(philox::uniform_double(w, w), 1.0);
    EXPECT_GT(philox::uniform_double_open0(w, w), 0.0);
  }
  EXPECT_EQ(philox::uniform_double(0xffffffffu, 0xffffffffu), 1.0 - std::ldexp(1.0, -53));
  EXPECT_EQ(philox::uniform_below(0xffffffffu, 0xffffffffu, 0), UINT64_MAX);
  EXPECT_TRUE(philox::bernoulli(0xffffffffu, philox::bernoulli_threshold(1.0)));
  EXPECT_FALSE(philox::bernoulli(0u, philox::bernoulli_threshold(0.0)));
}

// ---- generator state ----

TEST(Generator, ManualSeedGivesTheSameValues) {
  for (DType t : {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16}) {
    manual_seed(42);
    auto a = rand({100}, t).to_vector<double>();
    auto b = randn({101}, t).to_vector<double>();
    manual_seed(42);
    EXPECT_EQ(rand({100}, t).to_vector<double>(), a) << dtype_name(t);
    EXPECT_EQ(randn({101}, t).to_vector<double>(), b) << dtype_name(t);
  }
  manual_seed(3);
  auto i = randint(-9, 9, {50}).to_vector<int64_t>();
  auto m = multinomial(tensor({1, 2, 3, 4}), 3).to_vector<int64_t>();
  manual_seed(3);
  EXPECT_EQ(randint(-9, 9, {50}).to_vector<int64_t>(), i);
  EXPECT_EQ(multinomial(tensor({1, 2, 3, 4}), 3).to_vector<int64_t>(), m);
  EXPECT_EQ(initial_seed(), 3u);
}

TEST(Generator, DifferentSeedsAndSuccessiveCallsDiffer) {
  manual_seed(1);
  auto a = rand({64}).to_vector<float>();
  auto b = rand({64}).to_vector<float>();
  manual_seed(2);
  auto c = rand({64}).to_vector<float>();
  EXPECT_NE(a, b);
  EXPECT_NE(a, c);
  // Seeds differing only in the high 32 bits are different keys too.
  manual_seed(1 + (uint64_t(1) << 32));
  EXPECT_NE(rand({64}).to_vector<float>(), a);
}

TEST(Generator, StateRoundTripContinuesTheSameStream) {
  manual_seed(77);
  rand({10});
  RngState s = get_rng_state();
  EXPECT_EQ(s.seed, 77u);
  EXPECT_EQ(s.offset, 12u);  // 10 draws, rounded up to whole blocks of 4
  auto a = randn({33}).to_vector<float>();
  auto b = randint(0, 1000, {5}).to_vector<int64_t>();
  auto c = rand({7}, DType::Float64).to_vector<double>();
  RngState after = get_rng_state();
  manual_seed(5);  // somewhere else entirely
  rand({3});
  set_rng_state(s);
  EXPECT_EQ(randn({33}).to_vector<float>(), a);
  EXPECT_EQ(randint(0, 1000, {5}).to_vector<int64_t>(), b);
  EXPECT_EQ(rand({7}, DType::Float64).to_vector<double>(), c);
  EXPECT_EQ(get_rng_state().offset, after.offset);
  EXPECT_EQ(get_rng_state().seed, after.seed);
}

TEST(Generator, OffsetAdvancesByTheDrawsEachOpUses) {
  auto used = [](auto&& op) {
    uint64_t before = get_rng_state().offset;
    op();
    return get_rng_state().offset - before;
  };
  manual_seed(0);
  EXPECT_EQ(used([] { rand({5}); }), 8u);
  EXPECT_EQ(used([] { rand({5}, DType::Float64); }), 12u);
  EXPECT_EQ(used([] { randn({3}); }), 4u);  // two Box-Muller pairs
  EXPECT_EQ(used([] { randn({3}, DType::Float64); }), 8u);
  EXPECT_EQ(used([] { randint(0, 5, {3}); }), 8u);  // 64 bits per value
  EXPECT_EQ(used([] { bernoulli({4}, 0.5); }), 4u);
  EXPECT_EQ(used([] { multinomial(tensor({1, 1, 1}), 2, true); }), 4u);
  EXPECT_EQ(used([] { multinomial(tensor({1, 1, 1, 1, 2, 3}).view({2, 3}), 2); }), 16u);
  EXPECT_EQ(used([] { multinomial(tensor({1, 1, 1, 1, 2, 3}).view({2, 3}), 1); }), 8u);
  EXPECT_EQ(used([] { rand({0, 4}); }), 0u);
  EXPECT_EQ(used([] { dropout(ones({6}), 0.0); }), 0u);
  EXPECT_EQ(used([] { dropout(ones({6}), 0.5, false); }), 0u);
}

TEST(Generator, ConcurrentCallsGetDisjointRanges) {
  manual_seed(21);
  constexpr int kThreads = 4, kCalls = 2000;
  std::vector<std::vector<uint64_t>> offsets(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&offsets, t] {
      for (int i = 0; i < kCalls; ++i) offsets[t].push_back(reserve_random(6, "test").offset);
    });
  for (std::thread& th : threads) th.join();
  std::set<uint64_t> all;
  for (const auto& v : offsets)
    for (uint64_t o : v) {
      EXPECT_EQ(o % 8, 0u);  // 6 draws take two blocks
      all.insert(o);
    }
  EXPECT_EQ(all.size(), size_t(kThreads * kCalls));
  EXPECT_EQ(*all.rbegin(), uint64_t(kThreads * kCalls - 1) * 8);
  EXPECT_EQ(get_rng_state().offset, uint64_t(kThreads * kCalls) * 8);
}

TEST(Generator, Errors) {
  EXPECT_THROW(set_rng_state(RngState{1, 6}), Error);
  try {
    set_rng_state(RngState{1, 6});
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("multiple of 4"), std::string::npos) << e.what();
  }
  set_rng_state(RngState{1, UINT64_MAX - 3});
  EXPECT_THROW(rand({8}), Error);
  manual_seed(0);
}

// ---- the stream is a function of (seed, offset + i) ----

TEST(RandomStream, ValuesDependOnlyOnTheirIndex) {
  manual_seed(11);
  auto whole = rand({2000}).to_vector<float>();
  manual_seed(11);
  auto first = rand({10, 100}).to_vector<float>();  // shape does not matter
  auto second = rand({1000}).to_vector<float>();    // continues where the first stopped
  for (size_t i = 0; i < 1000; ++i) {
    ASSERT_EQ(first[i], whole[i]) << i;
    ASSERT_EQ(second[i], whole[1000 + i]) << i;
  }
  // A tensor that is a prefix of a longer one holds the same values, odd sizes included.
  manual_seed(11);
  auto normals = randn({1001}).to_vector<float>();
  manual_seed(11);
  auto fewer = randn({999}).to_vector<float>();
  for (size_t i = 0; i < fewer.size(); ++i) ASSERT_EQ(fewer[i], normals[i]) << i;
}

TEST(RandomStream, ThreadCountDoesNotChangeValues) {
  const int threads = omp_get_max_threads();
  auto draw_all = [] {
    manual_seed(123);
    std::vector<double> v = rand({300001}).to_vector<double>();
    for (double x : randn({200001}, DType::Float64).to_vector<double>()) v.push_back(x);
    for (double x : randint(-50, 50, {100001}).to_vector<double>()) v.push_back(x);
    for (double x : bernoulli({100001}, 0.3).to_vector<double>()) v.push_back(x);
    Tensor w = rand({300, 400}) + 0.1;
    for (double x : multinomial(w, 50, true).to_vector<double>()) v.push_back(x);
    for (double x : multinomial(w, 50, false).to_vector<double>()) v.push_back(x);
    return v;
  };
  omp_set_num_threads(1);
  auto serial = draw_all();
  omp_set_num_threads(4);
  auto parallel = draw_all();
  omp_set_num_threads(threads);
  EXPECT_EQ(serial, parallel);
}

TEST(RandomStream, DtypesAgreeUpToTheirPrecision) {
  // Uniforms keep the top bits of the same draw: float16 and bfloat16 are float32 values
  // truncated to 11 and 8 bits.
  manual_seed(9);
  auto f = rand({5000}).to_vector<double>();
  manual_seed(9);
  auto h = rand({5000}, DType::Float16).to_vector<double>();
  manual_seed(9);
  auto b = rand({5000}, DType::BFloat16).to_vector<double>();
  for (size_t i = 0; i < f.size(); ++i) {
    ASSERT_EQ(h[i], std::floor(f[i] * 2048) / 2048) << i;
    ASSERT_EQ(b[i], std::floor(f[i] * 256) / 256) << i;
  }
  // Normals of the 16-bit types are the float32 normals rounded.
  manual_seed(9);
  Tensor nf = randn({5000});
  manual_seed(9);
  Tensor nh = randn({5000}, DType::Float16);
  EXPECT_EQ(nh.to_vector<double>(), nf.to(DType::Float16).to_vector<double>());
  // Integer values do not depend on the dtype that holds them.
  manual_seed(9);
  auto i64 = randint(-100, 100, {999}).to_vector<double>();
  manual_seed(9);
  EXPECT_EQ(randint(-100, 100, {999}, DType::Int32).to_vector<double>(), i64);
  manual_seed(9);
  EXPECT_EQ(randint(-100, 100, {999}, DType::Float32).to_vector<double>(), i64);
}

// ---- distributions over a million draws ----
// Bounds are six standard errors wide: a correct generator fails them with probability
// about 1e-9, while a wrong distribution (scale, shift, bias) falls far outside.

constexpr int64_t kN = 1000000;

struct Moments {
  double mean = 0, var = 0;
};
Moments moments(const std::vector<double>& v) {
  Moments m;
  for (double x : v) m.mean += x;
  m.mean /= double(v.size());
  for (double x : v) m.var += (x - m.mean) * (x - m.mean);
  m.var /= double(v.size() - 1);
  return m;
}

// Pearson's statistic of observed counts against expected probabilities.
double chi_square(const std::vector<double>& counts, const std::vector<double>& probs) {
  double total = 0, chi2 = 0;
  for (double c : counts) total += c;
  for (size_t i = 0; i < counts.size(); ++i) {
    if (probs[i] == 0) continue;
    double e = total * probs[i];
    chi2 += (counts[i] - e) * (counts[i] - e) / e;
  }
  return chi2;
}

TEST(RandomStats, UniformMeanVarianceAndHistogram) {
  manual_seed(2024);
  for (DType t : {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16}) {
    std::vector<double> v = rand({kN}, t).to_vector<double>();
    double lo = *std::min_element(v.begin(), v.end()), hi = *std::max_element(v.begin(), v.end());
    EXPECT_GE(lo, 0.0) << dtype_name(t);
    EXPECT_LT(hi, 1.0) << dtype_name(t);
    // A uniform on the grid k / 2^bits: mean (1 - 2^-bits)/2, variance (1 - 4^-bits)/12.
    int bits = t == DType::Float16 ? 11 : t == DType::BFloat16 ? 8 : 24;
    double mean = (1 - std::ldexp(1.0, -bits)) / 2, var = (1 - std::ldexp(1.0, -2 * bits)) / 12;
    Moments m = moments(v);
    EXPECT_NEAR(m.mean, mean, 6 * std::sqrt(var / kN)) << dtype_name(t);
    EXPECT_NEAR(m.var, var, 6 * std::sqrt((1.0 / 80 - 1.0 / 144) / kN)) << dtype_name(t);
    // Ten bins: chi-square with 9 degrees of freedom (mean 9, sd 4.2). A bin's probability
    // is the share of the 2^bits grid points falling in it.
    std::vector<double> count(10, 0), probs(10);
    for (double x : v) count[size_t(x * 10)]++;
    const double grid = std::ldexp(1.0, bits);
    for (int b = 0; b < 10; ++b)
      probs[size_t(b)] = (std::ceil((b + 1) * grid / 10) - std::ceil(b * grid / 10)) / grid;
    EXPECT_LT(chi_square(count, probs), 45.0) << dtype_name(t);
  }
}

TEST(RandomStats, NormalMoments) {
  manual_seed(7);
  for (DType t : {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16}) {
    std::vector<double> v = randn({kN}, t).to_vector<double>();
    Moments m = moments(v);
    EXPECT_NEAR(m.mean, 0.0, 6 / std::sqrt(double(kN))) << dtype_name(t);
    EXPECT_NEAR(m.var, 1.0, 6 * std::sqrt(2.0 / kN)) << dtype_name(t);
    double within1 = 0, fourth = 0, pair_product = 0;
    for (size_t i = 0; i < v.size(); ++i) {
      within1 += std::abs(v[i]) < 1;
      fourth += std::pow(v[i], 4);
      if (i % 2 == 1) pair_product += v[i - 1] * v[i];
    }
    const double p1 = 0.6826894921370859;  // P(|z| < 1)
    EXPECT_NEAR(within1 / kN, p1, 6 * std::sqrt(p1 * (1 - p1) / kN)) << dtype_name(t);
    EXPECT_NEAR(fourth / kN, 3.0, 6 * std::sqrt(96.0 / kN)) << dtype_name(t);  // E z^4 = 3
    // The two branches of one Box-Muller pair are uncorrelated.
    EXPECT_NEAR(pair_product / (kN / 2), 0.0, 6 / std::sqrt(kN / 2.0)) << dtype_name(t);
  }
}

TEST(RandomStats, RandintCoversItsRangeUniformly) {
  manual_seed(31);
  for (DType t : {DType::Int64, DType::Int32, DType::Float32}) {
    std::vector<double> v = randint(-3, 4, {kN}, t).to_vector<double>();
    std::vector<double> counts(7, 0);
    for (double x : v) {
      ASSERT_TRUE(x >= -3 && x < 4 && x == std::floor(x)) << x;
      counts[size_t(x + 3)]++;
    }
    // 6 degrees of freedom: P(chi2 > 35) is about 4e-6.
    EXPECT_LT(chi_square(counts, std::vector<double>(7, 1.0 / 7)), 35.0) << dtype_name(t);
  }
  // A range wider than 2^63 and the full int64 range.
  std::vector<int64_t> wide =
      randint(-(int64_t(1) << 62), int64_t(1) << 62, {10000}).to_vector<int64_t>();
  double mean = 0;
  for (int64_t x : wide) {
    ASSERT_GE(x, -(int64_t(1) << 62));
    ASSERT_LT(x, int64_t(1) << 62);
    mean += std::ldexp(double(x), -62);
  }
  EXPECT_NEAR(mean / 10000, 0.0, 6 * std::sqrt(1.0 / 3 / 10000));
  std::vector<int64_t> full = randint(INT64_MIN, INT64_MAX, {1000}).to_vector<int64_t>();
  EXPECT_TRUE(std::any_of(full.begin(), full.end(), [](int64_t x) { return x < 0; }));
  EXPECT_TRUE(std::any_of(full.begin(), full.end(), [](int64_t x) { return x > 0; }));
  // A single-value range.
  for (int64_t x : randint(5, 6, {100}).to_vector<int64_t>()) EXPECT_EQ(x, 5);
}

TEST(RandomStats, BernoulliFrequency) {
  manual_seed(8);
  for (double p : {0.3, 0.9}) {
    std::vector<double> v = bernoulli({kN}, p).to_vector<double>();
    double ones = 0;
    for (double x : v) {
      ASSERT_TRUE(x == 0 || x == 1);
      ones += x;
    }
    EXPECT_NEAR(ones / kN, p, 6 * std::sqrt(p * (1 - p) / kN));
  }
  for (double x : bernoulli({1000}, 0.0).to_vector<double>()) EXPECT_EQ(x, 0);
  for (double x : bernoulli({1000}, 1.0).to_vector<double>()) EXPECT_EQ(x, 1);
  Tensor b = bernoulli({10}, 0.5, DType::Bool);
  EXPECT_EQ(b.dtype(), DType::Bool);
}

// ---- dropout ----

TEST(Dropout, IdentityWhenNotTrainingOrPZero) {
  Tensor x = rand({5, 6});
  EXPECT_EQ(dropout(x, 0.5, false).impl(), x.impl());
  EXPECT_EQ(dropout(x, 0.0).impl(), x.impl());
  EXPECT_EQ(dropout(x, 1.0, false).impl(), x.impl());
}

TEST(Dropout, POneGivesZerosAndAZeroGradient) {
  Tensor x = rand({4, 5}).requires_grad_();
  Tensor y = dropout(x, 1.0);
  for (double v : y.to_vector<double>()) EXPECT_EQ(v, 0.0);
  y.sum().backward();
  for (double g : x.grad().to_vector<double>()) EXPECT_EQ(g, 0.0);
}

TEST(Dropout, ScalesKeptValuesAndDropsAboutP) {
  manual_seed(19);
  const double p = 0.25;
  for (DType t : {DType::Float32, DType::Float64, DType::BFloat16}) {
    Tensor x = (rand({kN}, t) + 1.0);  // in [1, 2): never zero
    std::vector<double> xs = x.to_vector<double>(), ys = dropout(x, p).to_vector<double>();
    double kept = 0;
    for (size_t i = 0; i < xs.size(); ++i) {
      if (ys[i] == 0) continue;
      kept++;
      ASSERT_NEAR(ys[i], xs[i] / (1 - p),
                  2 * std::abs(xs[i] / (1 - p)) * (t == DType::BFloat16 ? 8e-3 : 1e-6))
          << i;
    }
    EXPECT_NEAR(kept / kN, 1 - p, 6 * std::sqrt(p * (1 - p) / kN)) << dtype_name(t);
  }
}

TEST(Dropout, GradientIsTheSameScaledMask) {
  manual_seed(4);
  const double p = 0.6;
  Tensor x = (rand({50, 40}, DType::Float64) + 0.5).requires_grad_();
  Tensor y = dropout(x, p);
  Tensor w = randn({50, 40}, DType::Float64);
  (y * w).sum().backward();
  std::vector<double> ys = y.to_vector<double>(), g = x.grad().to_vector<double>(),
                      ws = w.to_vector<double>();
  int kept = 0;
  for (size_t i = 0; i < ys.size(); ++i) {
    double mask = ys[i] != 0 ? 1 / (1 - p) : 0;
    kept += ys[i] != 0;
    EXPECT_NEAR(g[i], ws[i] * mask, 1e-12) << i;
  }
  EXPECT_GT(kept, 0);
  EXPECT_LT(kept, 2000);
  // Same seed, same mask.
  manual_seed(4);
  Tensor x2 = rand({50, 40}, DType::Float64) + 0.5;
  EXPECT_EQ(dropout(x2, p).to_vector<double>(), ys);
}

TEST(Dropout, Errors) {
  Tensor x = rand({3});
  for (double p : {-0.1, 1.5, std::nan("")}) {
    try {
      dropout(x, p);
      ADD_FAILURE() << "dropout accepted p = " << p;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("dropout"), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(dropout(randint(0, 3, {4}), 0.5), Error);
  EXPECT_THROW(dropout(Tensor(), 0.5), Error);
}

// ---- multinomial ----

TEST(Multinomial, WithReplacementFollowsTheWeights) {
  manual_seed(55);
  // Two rows of unnormalized weights, one of them zero.
  Tensor w = tensor({1, 2, 0, 3, 4, 5, 1, 1, 1, 2}).view({2, 5});
  const int64_t n = 200000;
  Tensor s = multinomial(w, n, true);
  ASSERT_EQ(s.sizes(), (Shape{2, n}));
  std::vector<int64_t> v = s.to_vector<int64_t>();
  const std::vector<std::vector<double>> probs = {{0.1, 0.2, 0, 0.3, 0.4},
                                                  {0.5, 0.1, 0.1, 0.1, 0.2}};
  for (int r = 0; r < 2; ++r) {
    std::vector<double> counts(5, 0);
    for (int64_t j = 0; j < n; ++j) counts[size_t(v[size_t(r * n + j)])]++;
    if (r == 0) {
      EXPECT_EQ(counts[2], 0) << "a zero weight was drawn";
    }
    // Three or four degrees of freedom: P(chi2 > 30) is below 1e-5.
    EXPECT_LT(chi_square(counts, probs[r]), 30.0) << "row " << r;
  }
}

TEST(Multinomial, WithoutReplacementDrawsDistinctCategoriesInSequence) {
  manual_seed(56);
  const std::vector<double> p = {0.05, 0.1, 0.15, 0.2, 0.5};
  const int64_t rows = 40000;
  std::vector<double> flat;
  for (int64_t r = 0; r < rows; ++r)
    for (double x : p) flat.push_back(x * 3);  // unnormalized
  Tensor w = from_vector(flat, {rows, 5});
  std::vector<int64_t> v = multinomial(w, 3).to_vector<int64_t>();
  std::vector<double> first(5, 0), second(5, 0);
  for (int64_t r = 0; r < rows; ++r) {
    std::set<int64_t> seen(v.begin() + r * 3, v.begin() + r * 3 + 3);
    ASSERT_EQ(seen.size(), 3u) << "row " << r << " repeats a category";
    first[size_t(v[size_t(r * 3)])]++;
    second[size_t(v[size_t(r * 3 + 1)])]++;
  }
  // Drawing without replacement one at a time: P(first = i) = p_i, and
  // P(second = j) = sum over i != j of p_i p_j / (1 - p_i).
  std::vector<double> p2(5, 0);
  for (size_t j = 0; j < 5; ++j)
    for (size_t i = 0; i < 5; ++i)
      if (i != j) p2[j] += p[i] * p[j] / (1 - p[i]);
  EXPECT_LT(chi_square(first, p), 30.0);
  EXPECT_LT(chi_square(second, p2), 30.0);
  // All categories: a permutation; zero weights are never drawn.
  Tensor all = multinomial(tensor({3, 0, 1, 2, 0, 5}), 4);
  std::vector<int64_t> a = all.to_vector<int64_t>();
  std::sort(a.begin(), a.end());
  EXPECT_EQ(a, (std::vector<int64_t>{0, 2, 3, 5}));
  EXPECT_EQ(all.sizes(), Shape{4});
}

TEST(Multinomial, StridedAndHalfWeights) {
  manual_seed(57);
  Tensor w = (rand({6, 3}) + 0.1).t();  // [3, 6], non-contiguous
  manual_seed(1);
  auto a = multinomial(w, 4).to_vector<int64_t>();
  manual_seed(1);
  auto b = multinomial(w.contiguous(), 4).to_vector<int64_t>();
  EXPECT_EQ(a, b);
  Tensor h = tensor({0, 1, 0}, DType::Float16);
  for (int64_t x : multinomial(h, 10, true).to_vector<int64_t>()) EXPECT_EQ(x, 1);
}

TEST(Multinomial, Errors) {
  expect_error([] { multinomial(tensor({1, -1, 2}), 1); }, "non-negative");
  expect_error([] { multinomial(tensor({1, INFINITY, 2}), 1); }, "finite");
  expect_error([] { multinomial(tensor({1, NAN, 2}), 1); }, "index 1");
  expect_error([] { multinomial(tensor({1, 1, 0, 0}).view({2, 2}), 1); }, "row 1");
  expect_error([] { multinomial(tensor({0, 0}), 1, true); }, "all zero");
  expect_error([] { multinomial(tensor({1, 2}), 3); }, "without replacement");
  expect_error([] { multinomial(tensor({1, 0, 2}), 3); }, "positive weight");
  expect_error([] { multinomial(tensor({1, 2}), 0); }, "num_samples");
  expect_error([] { multinomial(zeros({2, 2, 2}), 1); }, "1 or 2 dims");
  expect_error([] { multinomial(tensor({1, 2}, DType::Int64), 1); }, "floating");
  expect_error([] { multinomial(zeros({2, 0}), 1, true); }, "no categories");
  expect_error([] { multinomial(tensor({1, 2}), INT64_MAX, true); }, "too many elements");
}

// ---- other argument errors ----

TEST(RandomErrors, NameTheOpAndTheProblem) {
  expect_error([] { rand({2}, DType::Int64); }, "rand: dtype int64");
  expect_error([] { randn({2}, DType::Bool); }, "randn");
  expect_error([] { rand({-1, 2}); }, "negative size");
  expect_error([] { randint(5, 5, {2}); }, "must be greater than low");
  expect_error([] { randint(0, int64_t(1) << 40, {2}, DType::Int32); }, "does not fit int32");
  expect_error([] { randint(0, 3000, {2}, DType::Float16); }, "float16");
  expect_error([] { randint(0, 2, {2}, DType::Bool); }, "bool");
  expect_error([] { bernoulli({2}, 1.2); }, "bernoulli: probability");
  expect_error([] { bernoulli({2}, std::nan("")); }, "bernoulli");
  // The largest exact ranges are accepted.
  EXPECT_NO_THROW(randint(-2048, 2049, {4}, DType::Float16));
  EXPECT_NO_THROW(randint(INT32_MIN, int64_t(INT32_MAX) + 1, {4}, DType::Int32));
}

TEST(RandomOps, RequiresGradOptionMakesALeaf) {
  TensorOptions o;
  o.requires_grad = true;
  Tensor x = randn({3}, o);
  EXPECT_TRUE(x.requires_grad());
  EXPECT_TRUE(x.is_leaf());
}

}  // namespace
}  // namespace ember
