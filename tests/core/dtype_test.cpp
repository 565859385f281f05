// dtypes: PyTorch's promotion table, and the float16/bfloat16 conversions checked bit for bit
// against independent references (the compiler's _Float16, and nearest-even by hand).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "ember/ember.h"

namespace ember {
namespace {

float from_bits(uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}
uint32_t bits_of(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

// ---- promotion ----

TEST(DType, PromotionMatchesPyTorch) {
  using D = DType;
  const D order[] = {D::Bool, D::Int32, D::Int64, D::Float16, D::BFloat16, D::Float32, D::Float64};
  // torch.promote_types over (bool, int32, int64, float16, bfloat16, float32, float64).
  const D want[7][7] = {
      {D::Bool, D::Int32, D::Int64, D::Float16, D::BFloat16, D::Float32, D::Float64},
      {D::Int32, D::Int32, D::Int64, D::Float16, D::BFloat16, D::Float32, D::Float64},
      {D::Int64, D::Int64, D::Int64, D::Float16, D::BFloat16, D::Float32, D::Float64},
      {D::Float16, D::Float16, D::Float16, D::Float16, D::Float32, D::Float32, D::Float64},
      {D::BFloat16, D::BFloat16, D::BFloat16, D::Float32, D::BFloat16, D::Float32, D::Float64},
      {D::Float32, D::Float32, D::Float32, D::Float32, D::Float32, D::Float32, D::Float64},
      {D::Float64, D::Float64, D::Float64, D::Float64, D::Float64, D::Float64, D::Float64},
  };
  for (int i = 0; i < 7; ++i)
    for (int j = 0; j < 7; ++j)
      EXPECT_EQ(promote_types(order[i], order[j]), want[i][j])
          << dtype_name(order[i]) << " with " << dtype_name(order[j]);
}

TEST(DType, PropertiesAndNames) {
  EXPECT_EQ(dtype_size(DType::Bool), 1u);
  EXPECT_EQ(dtype_size(DType::BFloat16), 2u);
  EXPECT_EQ(dtype_size(DType::Int64), 8u);
  EXPECT_EQ(dtype_name(DType::Float16), "float16");
  EXPECT_TRUE(is_floating(DType::BFloat16));
  EXPECT_FALSE(is_floating(DType::Int32));
  EXPECT_TRUE(is_integral(DType::Int32));
  EXPECT_FALSE(is_integral(DType::Bool));
  EXPECT_TRUE(is_integral(DType::Bool, true));
  EXPECT_FALSE(is_integral(DType::Float32, true));
  static_assert(sizeof(Half) == 2 && sizeof(BFloat16) == 2);
}

TEST(DType, DefaultFloatDtypeDecidesIntegerDivision) {
  EXPECT_EQ(default_float_dtype(), DType::Float32);
  Tensor a = tensor({1, 2}, DType::Int64);
  EXPECT_EQ((a / a).dtype(), DType::Float32);
  set_default_float_dtype(DType::Float64);
  EXPECT_EQ((a / a).dtype(), DType::Float64);
  set_default_float_dtype(DType::Float32);
}

// ---- float16 ----

#ifdef __FLT16_MAX__
uint16_t reference_half(float f) {
  _Float16 h = static_cast<_Float16>(f);
  uint16_t b;
  std::memcpy(&b, &h, 2);
  return b;
}
float reference_half_to_float(uint16_t b) {
  _Float16 h;
  std::memcpy(&h, &b, 2);
  return static_cast<float>(h);
}
#endif

bool half_is_nan(uint16_t b) {
  return (b & 0x7c00u) == 0x7c00u && (b & 0x3ffu) != 0;
}

TEST(Half, EveryBitPatternRoundTripsThroughFloat) {
  for (uint32_t b = 0; b < 65536; ++b) {
    uint16_t h = uint16_t(b);
    float f = Half::to_float(h);
    uint16_t back = Half::from_float(f);
    if (half_is_nan(h)) {
      ASSERT_TRUE(std::isnan(f)) << std::hex << b;
      ASSERT_TRUE(half_is_nan(back)) << std::hex << b;
      ASSERT_EQ(back & 0x8000u, h & 0x8000u) << "NaN sign " << std::hex << b;
      continue;
    }
    ASSERT_EQ(back, h) << std::hex << b << " -> " << f;
#ifdef __FLT16_MAX__
    ASSERT_EQ(bits_of(f), bits_of(reference_half_to_float(h))) << std::hex << b;
#endif
  }
  EXPECT_EQ(Half::to_float(0x3c00), 1.0f);
  EXPECT_EQ(Half::to_float(0x7bff), 65504.0f);
  EXPECT_EQ(Half::to_float(0x0001), std::ldexp(1.0f, -24));  // smallest subnormal
  EXPECT_EQ(Half::to_float(0x0400), std::ldexp(1.0f, -14));  // smallest normal
  EXPECT_TRUE(std::signbit(Half::to_float(0x8000)));
}

#ifdef __FLT16_MAX__
void expect_half_rounds_like_reference(float f) {
  uint16_t got = Half::from_float(f), want = reference_half(f);
  if (std::isnan(f)) {
    EXPECT_TRUE(half_is_nan(got)) << f;
    return;
  }
  ASSERT_EQ(got, want) << "float " << f << " (bits " << std::hex << bits_of(f) << ")";
}

TEST(Half, RoundingMatchesCompilerFloat16) {
  std::mt19937 gen(1234);
  // Floats of every exponent.
  for (int i = 0; i < 1000000; ++i) expect_half_rounds_like_reference(from_bits(gen()));
  // Floats in and around float16's range, subnormals included: exponents 2^-27 .. 2^17.
  std::uniform_int_distribution<int> exp(-27, 17);
  for (int i = 0; i < 1000000; ++i) {
    float m = 1.0f + float(gen() >> 9) * std::ldexp(1.0f, -23);
    float f = std::ldexp(m, exp(gen)) * ((gen() & 1) ? -1.0f : 1.0f);
    expect_half_rounds_like_reference(f);
  }
  // Exact ties between neighbouring float16 values (normal and subnormal) round to even,
  // and the values just beside each tie round to the nearer neighbour.
  for (uint32_t b = 0; b < 0x7bff; ++b) {
    float lo = Half::to_float(uint16_t(b)), hi = Half::to_float(uint16_t(b + 1));
    float mid = lo + (hi - lo) / 2;
    expect_half_rounds_like_reference(mid);
    expect_half_rounds_like_reference(-mid);
    expect_half_rounds_like_reference(std::nextafter(mid, 0.0f));
    expect_half_rounds_like_reference(std::nextafter(mid, INFINITY));
    EXPECT_EQ(Half::from_float(mid) & 1u, 0u) << "tie " << mid << " did not round to even";
  }
  // Overflow: 65520 is the tie between 65504 and 2^16, which rounds to infinity.
  for (float f : {65504.0f, 65519.99f, 65520.0f, 65536.0f, 1e10f, std::numeric_limits<float>::max(),
                  INFINITY, -65520.0f, -INFINITY, std::ldexp(1.0f, -25), std::ldexp(1.0f, -26),
                  std::ldexp(1.5f, -25), std::numeric_limits<float>::denorm_min(), 0.0f, -0.0f})
    expect_half_rounds_like_reference(f);
  EXPECT_EQ(Half::from_float(65520.0f), 0x7c00u);
  EXPECT_EQ(Half::from_float(65519.99f), 0x7bffu);
  EXPECT_EQ(Half::from_float(-1e10f), 0xfc00u);
  for (uint32_t nan : {0x7fc00000u, 0x7f800001u, 0xffc00000u, 0x7fffffffu})
    EXPECT_TRUE(half_is_nan(Half::from_float(from_bits(nan)))) << std::hex << nan;
}
#else
TEST(Half, RoundingMatchesCompilerFloat16) {
  GTEST_SKIP() << "compiler has no _Float16";
}
#endif

// ---- bfloat16 ----

bool bf16_is_nan(uint16_t b) {
  return (b & 0x7f80u) == 0x7f80u && (b & 0x7fu) != 0;
}

// Nearest bfloat16 by comparing the two candidates around f in double precision; ties go to
// the even one. Finite floats above the largest bfloat16 by half an ulp or more go to inf.
uint16_t reference_bfloat16(float f) {
  uint32_t x = bits_of(f);
  uint16_t down = uint16_t(x >> 16);  // toward zero
  if ((x & 0xffffu) == 0) return down;
  uint16_t up = uint16_t(down + 1);  // away from zero (may become inf: that is right)
  double d = std::abs(double(f));
  double dd = std::abs(double(BFloat16::to_float(down)));
  double du =
      (up & 0x7fffu) == 0x7f80u ? std::ldexp(1.0, 128) : std::abs(double(BFloat16::to_float(up)));
  if (d - dd < du - d) return down;
  if (du - d < d - dd) return up;
  return (down & 1u) ? up : down;
}

TEST(BFloat16, EveryBitPatternRoundTripsThroughFloat) {
  for (uint32_t b = 0; b < 65536; ++b) {
    uint16_t h = uint16_t(b);
    float f = BFloat16::to_float(h);
    EXPECT_EQ(bits_of(f), uint32_t(h) << 16);
    uint16_t back = BFloat16::from_float(f);
    if (bf16_is_nan(h)) {
      ASSERT_TRUE(bf16_is_nan(back)) << std::hex << b;
    } else {
      ASSERT_EQ(back, h) << std::hex << b;
    }
  }
}

TEST(BFloat16, RoundsToNearestEven) {
  std::mt19937 gen(99);
  for (int i = 0; i < 2000000; ++i) {
    float f = from_bits(gen());
    if (std::isnan(f)) {
      ASSERT_TRUE(bf16_is_nan(BFloat16::from_float(f))) << std::hex << bits_of(f);
      continue;
    }
    ASSERT_EQ(BFloat16::from_float(f), reference_bfloat16(f)) << std::hex << bits_of(f);
  }
  // Exact ties (low half 0x8000) round to the even neighbour, on both sides of every exponent.
  for (uint32_t hi = 0; hi < 0x7f80; hi += 7) {
    float tie = from_bits((hi << 16) | 0x8000u);
    uint16_t got = BFloat16::from_float(tie);
    EXPECT_EQ(got & 1u, 0u) << std::hex << hi;
    EXPECT_EQ(got, reference_bfloat16(tie)) << std::hex << hi;
    EXPECT_EQ(BFloat16::from_float(from_bits((hi << 16) | 0x8001u)), uint16_t(hi + 1));
    EXPECT_EQ(BFloat16::from_float(from_bits((hi << 16) | 0x7fffu)), uint16_t(hi));
  }
  EXPECT_EQ(BFloat16::from_float(std::numeric_limits<float>::max()), 0x7f80u);  // to inf
  EXPECT_EQ(BFloat16::from_float(-INFINITY), 0xff80u);
  // A signalling NaN whose payload sits in the dropped bits must stay NaN, not become inf.
  EXPECT_TRUE(bf16_is_nan(BFloat16::from_float(from_bits(0x7f800001u))));
  EXPECT_TRUE(bf16_is_nan(BFloat16::from_float(from_bits(0xff800001u))));
}

TEST(DType, CastsThroughTensorsUseTheseConversions) {
  // 1 + 2^-11 is the tie between 1 and the next float16 (1 + 2^-10): even wins (1).
  // 1 + 3 * 2^-11 ties between 1 + 2^-10 and 1 + 2^-9: even is 1 + 2^-9.
  std::vector<float> v = {1.0f + std::ldexp(1.0f, -11), 1.0f + 3 * std::ldexp(1.0f, -11), 70000.0f,
                          -70000.0f};
  std::vector<double> h = from_vector(v, {4}).to(DType::Float16).to_vector<double>();
  EXPECT_EQ(h[0], 1.0);
  EXPECT_EQ(h[1], 1.0 + std::ldexp(1.0, -9));
  EXPECT_TRUE(std::isinf(h[2]) && h[2] > 0);
  EXPECT_TRUE(std::isinf(h[3]) && h[3] < 0);
  std::vector<double> b = from_vector(std::vector<float>{1.0f + std::ldexp(1.0f, -8)}, {1})
                              .to(DType::BFloat16)
                              .to_vector<double>();
  EXPECT_EQ(b[0], 1.0);
}

}  // namespace
}  // namespace ember
