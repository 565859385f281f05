// Element types, their sizes and names, and PyTorch's type promotion rules.
#pragma once
#include <cstdint>
#include <cstring>
#include <string_view>
#if defined(__F16C__)
#include <immintrin.h>
#endif

namespace ember {

// IEEE half precision, stored as bits; arithmetic happens in float.
struct Half {
  uint16_t bits = 0;
  Half() = default;
  // Rounds f to nearest even; converts back exactly.
  Half(float f) : bits(from_float(f)) {}
  operator float() const { return to_float(bits); }

  // IEEE half bits of f (round to nearest even), and the float those bits stand for.
  static uint16_t from_float(float f) {
#if defined(__F16C__)
    return uint16_t(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT));  // hardware, same rounding
#else
    uint32_t x;
    std::memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000u;
    uint32_t ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u) return uint16_t(sign | (ax > 0x7f800000u ? 0x7e00u : 0x7c00u));
    if (ax >= 0x477ff000u) return uint16_t(sign | 0x7c00u);  // overflow to inf
    if (ax < 0x38800000u) {                                   // subnormal or zero
      float af;
      std::memcpy(&af, &ax, 4);
      // Adding 0.5 shifts the mantissa so that rounding to nearest even happens in hardware.
      af += 0.5f;
      uint32_t r;
      std::memcpy(&r, &af, 4);
      return uint16_t(sign | (r - 0x3f000000u));
    }
    uint32_t mant_odd = (ax >> 13) & 1u;
    ax += 0xc8000fffu + mant_odd;  // rebias exponent and round to nearest even
    return uint16_t(sign | (ax >> 13));
#endif
  }
  // The float the bits stand for (exact).
  static float to_float(uint16_t h) {
#if defined(__F16C__)
    return _cvtsh_ss(h);
#else
    uint32_t sign = uint32_t(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
    uint32_t out;
    if (exp == 0x1f) {
      out = sign | 0x7f800000u | (mant << 13);
    } else if (exp == 0) {
      if (mant == 0) {
        out = sign;
      } else {  // subnormal: value = mant * 2^-24
        float f = float(mant) * 5.9604644775390625e-8f;
        std::memcpy(&out, &f, 4);
        out |= sign;
      }
    } else {
      out = sign | ((exp + 112u) << 23) | (mant << 13);
    }
    float f;
    std::memcpy(&f, &out, 4);
    return f;
#endif
  }
};

// bfloat16: the upper half of a float32, rounded to nearest even.
struct BFloat16 {
  uint16_t bits = 0;
  BFloat16() = default;
  // Rounds f to nearest even; converts back exactly.
  BFloat16(float f) : bits(from_float(f)) {}
  operator float() const { return to_float(bits); }

  // bfloat16 bits of f (round to nearest even, NaN kept), and the float those bits stand for.
  static uint16_t from_float(float f) {
    uint32_t x;
    std::memcpy(&x, &f, 4);
    if ((x & 0x7fffffffu) > 0x7f800000u) return uint16_t((x >> 16) | 0x40u);  // quiet NaN
    x += 0x7fffu + ((x >> 16) & 1u);
    return uint16_t(x >> 16);
  }
  // The float the bits stand for (exact).
  static float to_float(uint16_t b) {
    uint32_t x = uint32_t(b) << 16;
    float f;
    std::memcpy(&f, &x, 4);
    return f;
  }
};

enum class DType : uint8_t { Bool, Int32, Int64, Float16, BFloat16, Float32, Float64 };
inline constexpr int kNumDTypes = 7;

// Bytes per element of t.
constexpr size_t dtype_size(DType t) {
  switch (t) {
    case DType::Bool: return 1;
    case DType::Int32: return 4;
    case DType::Int64: return 8;
    case DType::Float16: return 2;
    case DType::BFloat16: return 2;
    case DType::Float32: return 4;
    case DType::Float64: return 8;
  }
  return 0;
}
// "float32", "int64" ...: the name printed in errors and tensors.
constexpr std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::Bool: return "bool";
    case DType::Int32: return "int32";
    case DType::Int64: return "int64";
    case DType::Float16: return "float16";
    case DType::BFloat16: return "bfloat16";
    case DType::Float32: return "float32";
    case DType::Float64: return "float64";
  }
  return "?";
}
// Float16, BFloat16, Float32, Float64.
constexpr bool is_floating(DType t) {
  return t == DType::Float16 || t == DType::BFloat16 || t == DType::Float32 ||
         t == DType::Float64;
}
// Float16 and BFloat16: stored in 16 bits, computed in float.
constexpr bool is_16bit_float(DType t) {
  return t == DType::Float16 || t == DType::BFloat16;
}
// Int32 and Int64 (and Bool when include_bool).
constexpr bool is_integral(DType t, bool include_bool = false) {
  return t == DType::Int32 || t == DType::Int64 || (include_bool && t == DType::Bool);
}

// Promotion of two tensor dtypes, as PyTorch's promote_types.
DType promote_types(DType a, DType b);
// The dtype float results take when the inputs are integral (float32 unless changed).
DType default_float_dtype();
void set_default_float_dtype(DType t);

template <class T> struct dtype_of;
template <> struct dtype_of<bool> { static constexpr DType value = DType::Bool; };
template <> struct dtype_of<int32_t> { static constexpr DType value = DType::Int32; };
template <> struct dtype_of<int64_t> { static constexpr DType value = DType::Int64; };
template <> struct dtype_of<Half> { static constexpr DType value = DType::Float16; };
template <> struct dtype_of<BFloat16> { static constexpr DType value = DType::BFloat16; };
template <> struct dtype_of<float> { static constexpr DType value = DType::Float32; };
template <> struct dtype_of<double> { static constexpr DType value = DType::Float64; };

}  // namespace ember
