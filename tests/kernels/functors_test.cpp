// Accuracy of the float32 transcendentals of kernels/functors.h against double-precision libm:
// every 64th float32 bit pattern (67 million inputs spanning the whole range, with infinities
// and NaNs; every 256th for the gelu variants), each through the op's CPU kernel (vectorized,
// built with the library's flags) and through the functor in a plain loop here (built with this
// file's flags: no FMA, no AVX), plus special values one by one.
#include "kernels/functors.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <iostream>
#include <limits>
#include <random>
#include <sstream>
#include <vector>

#include "dispatch/dispatcher.h"
#include "ember/ember.h"

namespace ember {
namespace {

// Every 64th bit pattern for the functions themselves; every 256th for the gelu variants that
// are tested against looser, condition-aware bounds.
constexpr uint32_t kStride = 64, kCoarseStride = 256;
constexpr int64_t kChunk = int64_t(1) << 22;
const float kInfF = std::numeric_limits<float>::infinity();
const float kNaNF = std::numeric_limits<float>::quiet_NaN();
const double kInf = std::numeric_limits<double>::infinity();

float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// The float32 spacing at |v| (the subnormal spacing below FLT_MIN), for |v| < 2^128: 2^(e-23)
// for |v| in [2^e, 2^(e+1)), built from v's exponent bits (frexp would dominate the sweeps).
double ulp_at(double v) {
  if (std::fabs(v) < 0x1p-126) return 0x1p-149;
  uint64_t b;
  std::memcpy(&b, &v, sizeof b);
  b = (b & 0x7ff0000000000000u) - (uint64_t(23) << 52);
  double u;
  std::memcpy(&u, &b, sizeof u);
  return u;
}

// |got - ref| in float32 ulps at ref. Overflow to inf counts as 2^128; where ref is at least
// 2^128, only inf of its sign is right. A NaN where ref has none, or none where it has one, is
// an infinite error.
double ulp_error(float, float got, double ref) {
  if (std::isnan(ref) || std::isnan(got)) return std::isnan(ref) && std::isnan(got) ? 0 : kInf;
  if (std::fabs(ref) >= 0x1p128) return std::isinf(got) && (got > 0) == (ref > 0) ? 0 : kInf;
  const double g = std::isinf(got) ? std::copysign(0x1p128, double(got)) : double(got);
  return std::fabs(g - ref) / ulp_at(ref);
}

using ErrorFn = double (*)(float x, float got, double ref);

struct Worst {
  double err = 0;
  float x = 0, got = 0;
  double ref = 0;
};
void keep_worse(Worst& w, const Worst& c) {
  if (!(c.err <= w.err)) w = c;  // a NaN error counts as worse
}
struct SweepResult {
  Worst kernel, functor;
};

// Every stride-th float32 bit pattern through ref (double), fn (the functor, in a plain loop
// here) and, if given, op (the op's kernel over a tensor of the inputs).
template <class F>
SweepResult sweep(const std::function<Tensor(const Tensor&)>& op, F fn, double (*ref)(double),
                  ErrorFn err = ulp_error, uint32_t stride = kStride) {
  SweepResult res;
  const int64_t total = (int64_t(1) << 32) / stride;
  std::vector<float> in;
  for (int64_t c0 = 0; c0 < total; c0 += kChunk) {
    const int64_t n = std::min(kChunk, total - c0);
    in.resize(size_t(n));
    for (int64_t i = 0; i < n; ++i) in[size_t(i)] = from_bits(uint32_t((c0 + i) * stride));
    std::vector<float> out, out_fn(static_cast<size_t>(n));
    if (op) out = op(from_vector(in, {n})).to_vector<float>();
    for (int64_t i = 0; i < n; ++i) out_fn[size_t(i)] = fn(in[size_t(i)]);
    std::vector<SweepResult> local(static_cast<size_t>(omp_get_max_threads()));
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) {
      SweepResult& l = local[size_t(omp_get_thread_num())];
      const float x = in[size_t(i)];
      const double r = ref(double(x));
      const float g = out_fn[size_t(i)];
      keep_worse(l.functor, {err(x, g, r), x, g, r});
      if (op) keep_worse(l.kernel, {err(x, out[size_t(i)], r), x, out[size_t(i)], r});
    }
    for (const SweepResult& l : local) {
      keep_worse(res.functor, l.functor);
      keep_worse(res.kernel, l.kernel);
    }
  }
  return res;
}

std::string describe(const Worst& w) {
  std::ostringstream s;
  s.precision(9);
  s << w.err << " at x = " << w.x << " (got " << w.got << ", want " << w.ref << ")";
  return s.str();
}

void expect_within(const char* name, const SweepResult& r, double bound, bool has_op = true) {
  std::cout << "  " << name << ": functor " << describe(r.functor);
  if (has_op) std::cout << "; kernel " << describe(r.kernel);
  std::cout << "\n";
  EXPECT_LE(r.functor.err, bound) << name << " (functor): " << describe(r.functor);
  if (has_op) {
    EXPECT_LE(r.kernel.err, bound) << name << " (kernel): " << describe(r.kernel);
  }
}

// ---- double-precision references (the limits at -inf where the float forms return them) ----
double ref_sigmoid(double x) {
  const double e = std::exp(-std::fabs(x));
  return x >= 0 ? 1 / (1 + e) : e / (1 + e);
}
double ref_silu(double x) {
  return x == -kInf ? -0.0 : x * ref_sigmoid(x);
}
double ref_gelu(double x) {
  return x == -kInf ? -0.0 : 0.5 * x * std::erfc(-x * M_SQRT1_2);
}
double tanh_form_arg(double x) {
  return 2 * std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x);
}
// x sigmoid(2u) = 0.5 x (1 + tanh(u)), in the form that does not cancel.
double ref_gelu_tanh(double x) {
  return x == -kInf ? -0.0 : x * ref_sigmoid(tanh_form_arg(x));
}
double ref_gelu_grad(double x) {
  if (std::isinf(x)) return x > 0 ? 1 : 0;
  return 0.5 * std::erfc(-x * M_SQRT1_2) + x * std::exp(-0.5 * x * x) / std::sqrt(2 * M_PI);
}

// ---- the sweeps ----

TEST(FunctorAccuracy, Exp) {
  auto r = sweep([](const Tensor& t) { return t.exp(); }, [](float x) { return fn::Exp{}(x); },
                 [](double x) { return std::exp(x); });
  expect_within("exp", r, 1.0);
}

// exp_ftz: ulps for results from FLT_MIN up; below, the error as a fraction of FLT_MIN (a
// subnormal or 0 is allowed there). No claim past x = 88.3 (its callers pass x <= 0).
double ftz_error(float x, float got, double ref) {
  if (x > 88.3f) return 0;
  if (!std::isnan(ref) && ref < 0x1p-126) return std::fabs(double(got) - ref) / 0x1p-126;
  return ulp_error(x, got, ref);
}

TEST(FunctorAccuracy, ExpFtz) {
  auto r = sweep(nullptr, [](float x) { return fn::ExpFtz{}(x); },
                 [](double x) { return std::exp(x); }, ftz_error);
  expect_within("exp_ftz", r, 1.25, false);
}

TEST(FunctorAccuracy, Log) {
  auto r = sweep([](const Tensor& t) { return t.log(); }, [](float x) { return fn::Log{}(x); },
                 [](double x) { return std::log(x); });
  expect_within("log", r, 1.0);
}

TEST(FunctorAccuracy, Tanh) {
  auto r = sweep([](const Tensor& t) { return t.tanh(); }, [](float x) { return fn::Tanh{}(x); },
                 [](double x) { return std::tanh(x); });
  expect_within("tanh", r, 1.0);
}

TEST(FunctorAccuracy, Erf) {
  // No erf op: the functor only (gelu below runs the same code through a kernel).
  auto r = sweep(
      nullptr, [](float x) { return fn::Erf{}(x); }, [](double x) { return std::erf(x); });
  expect_within("erf", r, 1.0, false);
}

TEST(FunctorAccuracy, Sigmoid) {
  auto r = sweep([](const Tensor& t) { return t.sigmoid(); },
                 [](float x) { return fn::Sigmoid{}(x); }, ref_sigmoid);
  expect_within("sigmoid", r, 1.5);
}

TEST(FunctorAccuracy, Silu) {
  auto r = sweep([](const Tensor& t) { return t.silu(); }, [](float x) { return fn::Silu{}(x); },
                 ref_silu);
  expect_within("silu", r, 2.25);
}

// gelu is computed in float (kernels/functors.h says how): 2 ulp, not 1, over all inputs
// (1.98 at worst).
TEST(FunctorAccuracy, Gelu) {
  auto r = sweep([](const Tensor& t) { return t.gelu(); }, [](float x) { return fn::Gelu{}(x); },
                 ref_gelu);
  expect_within("gelu", r, 2.0);
}

// The 16-bit results' gelu (GeluHalf) within 2^-16 of the value, relative, down to bfloat16's
// least subnormal (2^-133), below which that is the resolution asked for.
double half_gelu_error(float, float got, double ref) {
  if (std::isnan(ref) || std::isnan(got)) return std::isnan(ref) && std::isnan(got) ? 0 : kInf;
  if (std::isinf(ref) || std::isinf(got)) return got == ref ? 0 : kInf;
  return std::fabs(double(got) - ref) / std::max(std::fabs(ref) * 0x1p-16, 0x1p-133);
}

TEST(FunctorAccuracy, GeluHalf) {
  auto r = sweep({}, [](float x) { return fn::GeluHalf{}(x); }, ref_gelu, half_gelu_error);
  expect_within("gelu for 16-bit results (units of 2^-16 relative)", r, 1.0, false);
}

// A 16-bit gelu kernel computes GeluHalf and rounds once: bit for bit that, and the nearest
// 16-bit value to the exact gelu but for an input whose exact result lies within 2^-16 of a
// tie (never more than one unit off).
TEST(FunctorAccuracy, GeluKernelsOfSixteenBitTypesRoundGeluHalf) {
  std::vector<float> xs;
  for (int i = -30000; i <= 30000; ++i) xs.push_back(float(i) * 0.000467f);  // [-14, 14]
  for (float x : {0.f, -0.f, 1e30f, -1e30f, 14.5f, -14.5f, -13.9f}) xs.push_back(x);
  const Tensor x = from_vector(xs, {int64_t(xs.size())});
  for (DType t : {DType::BFloat16, DType::Float16}) {
    const Tensor in = x.to(t);
    const std::vector<float> got = in.gelu().to(DType::Float32).to_vector<float>();
    const std::vector<float> a = in.to(DType::Float32).to_vector<float>();
    const std::vector<float> mine =
        from_vector(a, {int64_t(a.size())}).gelu().to(DType::Float32).to_vector<float>();
    int64_t off = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      const float want = from_vector(std::vector<float>{fn::GeluHalf{}(a[i])}, {1})
                             .to(t).to(DType::Float32).item<float>();
      ASSERT_EQ(got[i], want) << dtype_name(t) << " x = " << a[i];
      const float exact = from_vector(std::vector<float>{mine[i]}, {1})
                              .to(t).to(DType::Float32).item<float>();
      if (got[i] == exact) continue;
      ++off;
      const double unit = std::max(std::fabs(double(exact)), std::fabs(double(got[i]))) *
                          (t == DType::BFloat16 ? 0x1p-7 : 0x1p-10);
      EXPECT_LE(std::fabs(double(got[i]) - double(exact)), unit + 0x1p-133)
          << dtype_name(t) << " x = " << a[i] << ": more than one unit from the float32 gelu's";
    }
    // Near-ties only: a small share of the inputs.
    std::cout << "  " << dtype_name(t) << ": " << off << " of " << a.size()
              << " results one unit from the float32 gelu's rounding\n";
    EXPECT_LE(off, int64_t(a.size()) / 50) << dtype_name(t);
  }
}

// gelu's grad for 16-bit results: within 2^-16 of the size of its two terms (Phi and |x| phi),
// down to bfloat16's least subnormal (2^-133).
TEST(FunctorAccuracy, GeluBackwardHalf) {
  ErrorFn err = [](float x, float got, double ref) {
    if (std::isnan(ref) || std::isnan(got)) return std::isnan(ref) && std::isnan(got) ? 0.0 : kInf;
    if (std::isinf(x)) return got == ref ? 0.0 : kInf;
    const double xd = x;
    const double terms = 0.5 * std::erfc(-xd * M_SQRT1_2) +
                         std::fabs(xd) * std::exp(-0.5 * xd * xd) / std::sqrt(2 * M_PI);
    return std::fabs(double(got) - ref) / std::max(terms * 0x1p-16, 0x1p-133);
  };
  auto r = sweep({}, [](float x) { return fn::GeluBackwardHalf{}(1.f, x); }, ref_gelu_grad, err);
  expect_within("gelu_backward for 16-bit results (units of 2^-16 of the terms)", r, 1.0, false);
  EXPECT_EQ(fn::GeluBackwardHalf{}(1.f, kInfF), 1.f);
  EXPECT_EQ(fn::GeluBackwardHalf{}(1.f, -kInfF), 0.f);
  EXPECT_TRUE(std::isnan(fn::GeluBackwardHalf{}(1.f, kNaNF)));
  EXPECT_TRUE(std::isnan(fn::GeluBackwardHalf{}(kNaNF, 1.f)));
  EXPECT_EQ(fn::GeluBackwardHalf{}(3.f, 1e30f), 3.f);
}

// The tanh form rounds its argument u to float, and sigmoid(2u) magnifies that error by about
// |2u| in the negative tail. The error is measured against a bound of 2 ulp plus that effect.
TEST(FunctorAccuracy, GeluTanh) {
  ErrorFn err = [](float x, float got, double ref) {
    const double e = ulp_error(x, got, ref);
    if (std::isnan(ref) || std::isinf(e) || std::isinf(x) || ref == 0) return e;
    const double arg = std::fabs(tanh_form_arg(x));
    return e / (2 + std::fabs(ref) / ulp_at(ref) * 0x1p-22 * std::min(arg, 1e30));
  };
  auto r = sweep([](const Tensor& t) { return t.gelu(true); },
                 [](float x) { return fn::GeluTanh{}(x); }, ref_gelu_tanh, err, kCoarseStride);
  expect_within("gelu_tanh (fraction of the bound)", r, 1.0);
}

// gelu'(x) = Phi(x) + x phi(x) cancels near its root (x = -0.75): the bound is 2 ulp plus
// 2^-25 of the size of the two terms (twice what a double-based form holds; the float form
// reaches 0.93 of it over all inputs).
TEST(FunctorAccuracy, GeluBackward) {
  ErrorFn err = [](float x, float got, double ref) {
    const double e = ulp_error(x, got, ref);
    if (std::isnan(ref) || std::isinf(e) || std::isinf(x)) return e;
    const double xd = x;
    const double terms =
        0.5 * std::erfc(-xd * M_SQRT1_2) + std::fabs(xd) * std::exp(-0.5 * xd * xd) * 0.4;
    return e / (2 + terms * 0x1p-25 / ulp_at(ref));
  };
  Attrs exact;
  exact.flag = false;
  auto r = sweep(
      [&](const Tensor& t) {
        return dispatch1(OpId::gelu_backward, {ones_like(t), t}, exact);
      },
      [](float x) { return fn::GeluBackward{}(1.f, x); }, ref_gelu_grad, err, kCoarseStride);
  expect_within("gelu_backward (fraction of the bound)", r, 1.0);
}

// ---- special values ----

TEST(FunctorSpecials, Exp) {
  fn::Exp f;
  EXPECT_EQ(f(0.f), 1.f);
  EXPECT_EQ(f(-0.f), 1.f);
  EXPECT_EQ(f(kInfF), kInfF);
  EXPECT_EQ(f(-kInfF), 0.f);
  EXPECT_TRUE(std::isnan(f(kNaNF)));
  // The largest float with a finite exp, and the next one up.
  EXPECT_TRUE(std::isfinite(f(from_bits(0x42b17217u))));
  EXPECT_EQ(f(from_bits(0x42b17218u)), kInfF);
  EXPECT_EQ(f(89.f), kInfF);
  EXPECT_EQ(f(1000.f), kInfF);
  // Gradual underflow: subnormal results, then 0.
  EXPECT_GT(f(-100.f), 0.f);
  EXPECT_LT(f(-100.f), FLT_MIN);
  EXPECT_EQ(f(-104.f), 0.f);
  EXPECT_EQ(f(-1000.f), 0.f);
}

TEST(FunctorSpecials, ExpFtz) {
  fn::ExpFtz f;
  EXPECT_EQ(f(0.f), 1.f);
  EXPECT_EQ(f(-0.f), 1.f);
  EXPECT_EQ(f(-kInfF), 0.f);
  EXPECT_TRUE(std::isnan(f(kNaNF)));
  // Normal results down to FLT_MIN; then a subnormal or 0, never more than FLT_MIN.
  EXPECT_GE(f(-87.3f), FLT_MIN);
  EXPECT_LT(f(-88.f), FLT_MIN);
  EXPECT_EQ(f(-100.f), 0.f);
  EXPECT_EQ(f(-1000.f), 0.f);
  EXPECT_TRUE(std::isfinite(f(88.f)));
  // float64 keeps libm.
  EXPECT_EQ(fn::ExpFtz{}(-3.5), std::exp(-3.5));
}

TEST(FunctorSpecials, Log) {
  fn::Log f;
  EXPECT_EQ(f(1.f), 0.f);
  EXPECT_FALSE(std::signbit(f(1.f)));
  EXPECT_EQ(f(0.f), -kInfF);
  EXPECT_EQ(f(-0.f), -kInfF);
  EXPECT_EQ(f(kInfF), kInfF);
  EXPECT_TRUE(std::isnan(f(-1.f)));
  EXPECT_TRUE(std::isnan(f(-kInfF)));
  EXPECT_TRUE(std::isnan(f(-FLT_MIN)));
  EXPECT_TRUE(std::isnan(f(kNaNF)));
  EXPECT_LE(ulp_error(0, f(std::numeric_limits<float>::denorm_min()),
                      std::log(double(std::numeric_limits<float>::denorm_min()))),
            1.0);
  EXPECT_LE(ulp_error(0, f(FLT_MAX), std::log(double(FLT_MAX))), 1.0);
}

TEST(FunctorSpecials, TanhAndErf) {
  for (float s : {1.f, -1.f}) {
    EXPECT_EQ(fn::Tanh{}(s * 0.f), s * 0.f);
    EXPECT_EQ(std::signbit(fn::Tanh{}(s * 0.f)), s < 0);
    EXPECT_EQ(fn::Tanh{}(s * kInfF), s);
    EXPECT_EQ(fn::Tanh{}(s * 10.f), s);
    EXPECT_EQ(std::signbit(fn::Erf{}(s * 0.f)), s < 0);
    EXPECT_EQ(fn::Erf{}(s * kInfF), s);
    EXPECT_EQ(fn::Erf{}(s * 4.f), s);
  }
  EXPECT_TRUE(std::isnan(fn::Tanh{}(kNaNF)));
  EXPECT_TRUE(std::isnan(fn::Erf{}(kNaNF)));
}

TEST(FunctorSpecials, SigmoidAndSilu) {
  EXPECT_EQ(fn::Sigmoid{}(0.f), 0.5f);
  EXPECT_EQ(fn::Sigmoid{}(kInfF), 1.f);
  EXPECT_EQ(fn::Sigmoid{}(-kInfF), 0.f);
  EXPECT_EQ(fn::Sigmoid{}(20.f), 1.f);
  EXPECT_TRUE(std::isnan(fn::Sigmoid{}(kNaNF)));
  // exp(-100) is subnormal: sigmoid keeps it rather than flushing to 0.
  EXPECT_LE(ulp_error(0, fn::Sigmoid{}(-100.f), ref_sigmoid(-100)), 1.0);
  EXPECT_GT(fn::Sigmoid{}(-100.f), 0.f);
  EXPECT_EQ(fn::Silu{}(0.f), 0.f);
  EXPECT_EQ(fn::Silu{}(kInfF), kInfF);
  EXPECT_EQ(fn::Silu{}(-kInfF), 0.f);  // the limit; float64 gives NaN (-inf / inf)
  EXPECT_TRUE(std::signbit(fn::Silu{}(-kInfF)));
  EXPECT_TRUE(std::isnan(fn::Silu{}(kNaNF)));
  EXPECT_EQ(fn::Silu{}(-1e30f), 0.f);
  EXPECT_LT(fn::Silu{}(-100.f), 0.f);
}

TEST(FunctorSpecials, GeluForms) {
  for (bool tanh_form : {false, true}) {
    auto f = [&](float x) { return tanh_form ? fn::GeluTanh{}(x) : fn::Gelu{}(x); };
    EXPECT_EQ(f(0.f), 0.f) << tanh_form;
    EXPECT_EQ(f(kInfF), kInfF) << tanh_form;
    EXPECT_EQ(f(-kInfF), 0.f) << tanh_form;  // the limit; float64 gives NaN (-inf * 0)
    EXPECT_TRUE(std::isnan(f(kNaNF))) << tanh_form;
    EXPECT_EQ(f(1e30f), 1e30f) << tanh_form;
    EXPECT_EQ(f(-1e30f), 0.f) << tanh_form;
    // Far in the negative tail the result is tiny but not 0 (1 + erf / 1 + tanh cancel there).
    EXPECT_LT(f(-7.f), 0.f) << tanh_form;
    EXPECT_GT(f(-7.f), -1e-9f) << tanh_form;
  }
  // The 16-bit results' form: the same limits and specials.
  const fn::GeluHalf h;
  EXPECT_EQ(h(0.f), 0.f);
  EXPECT_TRUE(std::signbit(h(-0.f)));
  EXPECT_EQ(h(kInfF), kInfF);
  EXPECT_EQ(h(-kInfF), 0.f);
  EXPECT_TRUE(std::isnan(h(kNaNF)));
  EXPECT_TRUE(std::isnan(h(-kNaNF)));
  EXPECT_EQ(h(1e30f), 1e30f);
  EXPECT_EQ(h(-1e30f), 0.f);
  EXPECT_LT(h(-7.f), 0.f);
  // The exact form keeps the sign of zero, and results down in the subnormals.
  EXPECT_TRUE(std::signbit(fn::Gelu{}(-0.f)));
  EXPECT_FALSE(std::signbit(fn::Gelu{}(0.f)));
  EXPECT_LT(fn::Gelu{}(-13.5f), 0.f);
  EXPECT_GT(fn::Gelu{}(-13.5f), -FLT_MIN);
  EXPECT_TRUE(std::isnan(fn::Gelu{}(-kNaNF)));
  EXPECT_EQ(fn::GeluBackward{}(1.f, kInfF), 1.f);
  EXPECT_EQ(fn::GeluBackward{}(1.f, -kInfF), 0.f);
  EXPECT_TRUE(std::isnan(fn::GeluBackward{}(1.f, kNaNF)));
  EXPECT_TRUE(std::isnan(fn::GeluBackward{}(1.f, -kNaNF)));
  EXPECT_TRUE(std::isnan(fn::GeluBackward{}(kNaNF, 1.f)));
  EXPECT_EQ(fn::GeluBackward{}(2.f, 0.f), 1.f);
  EXPECT_EQ(fn::GeluBackward{}(2.f, -0.f), 1.f);
  EXPECT_EQ(fn::GeluBackward{}(3.f, 1e30f), 3.f);
  EXPECT_LT(fn::GeluBackward{}(1.f, -14.f), 0.f);  // -|x| phi(x), subnormal
}

// float64 stays on libm.
TEST(FunctorSpecials, DoubleUsesLibm) {
  for (double x : {-745.0, -3.7, -0.2, 0.0, 0.3, 1.0, 2.5, 700.0}) {
    EXPECT_EQ(fn::Exp{}(x), std::exp(x));
    EXPECT_EQ(fn::Tanh{}(x), std::tanh(x));
    EXPECT_EQ(fn::Erf{}(x), std::erf(x));
    if (x > 0) {
      EXPECT_EQ(fn::Log{}(x), std::log(x));
    }
  }
}

}  // namespace
}  // namespace ember

namespace ember {
namespace {

// The 16-bit conversions generated code uses give ember::Half's and ember::BFloat16's results:
// every bit pattern to float, and floats across the whole range (every exponent, both signs,
// the rounding boundaries, infinities and NaN) back.
TEST(FunctorConversions, SixteenBitTypesAgreeWithTheEagerTypes) {
  for (uint32_t b = 0; b <= 0xffffu; ++b) {
    const float h = fn::half_to_float(uint16_t(b)), he = Half::to_float(uint16_t(b));
    const float f = fn::bf16_to_float(uint16_t(b)), fe = BFloat16::to_float(uint16_t(b));
    ASSERT_TRUE(std::memcmp(&h, &he, 4) == 0 || (std::isnan(h) && std::isnan(he))) << b;
    ASSERT_TRUE(std::memcmp(&f, &fe, 4) == 0 || (std::isnan(f) && std::isnan(fe))) << b;
  }
  std::mt19937 rng(5);
  std::vector<uint32_t> samples;
  for (uint32_t e = 0; e < 256; ++e)
    for (uint32_t m : {0u, 1u, 0x1000u, 0xfffu, 0x2000u, 0x7fffu, 0x8000u, 0x7fffffu})
      for (uint32_t s : {0u, 0x80000000u}) samples.push_back(s | (e << 23) | m);
  for (int k = 0; k < 2000000; ++k) samples.push_back(uint32_t(rng()));
  for (uint32_t x : samples) {
    float f;
    std::memcpy(&f, &x, 4);
    ASSERT_EQ(fn::float_to_half(f), Half::from_float(f)) << std::hex << x;
    ASSERT_EQ(fn::float_to_bf16(f), BFloat16::from_float(f)) << std::hex << x;
  }
}

}  // namespace
}  // namespace ember
