// CPU kernels of powers, sign-like math, max/min and clamp. Float and integer dtypes; the
// front ends reject bool where it has no meaning.
#include "kernels/cpu/pointwise_math.h"

#include <limits>
#include <type_traits>

#include "kernels/cpu/loops.h"
#include "kernels/functors.h"

namespace ember::cpu {

namespace {
template <class F>
void unary_numeric(std::span<const Tensor> in, std::span<Tensor> out, const char* name) {
  visit_numeric(out[0].dtype(), name, [&]<class T>() { pointwise<T, T>(out[0], in, F{}); });
}

// A double bound as the compute type C of storage type T. For integer tensors the front end
// passes bounds the dtype holds, or +-inf for an absent bound, which saturates to the dtype's
// limits. Half types round the bound to T first, so every result is one of T's values.
template <class T, class C = compute_t<T>>
C bound_as(double v) {
  if constexpr (std::is_integral_v<T>) {
    if (v <= double(std::numeric_limits<T>::lowest())) return std::numeric_limits<T>::lowest();
    if (v >= double(std::numeric_limits<T>::max())) return std::numeric_limits<T>::max();
    return T(v);
  } else {
    return C(T(v));
  }
}
}  // namespace

void pow(std::span<const Tensor> in, std::span<Tensor> out, const Attrs&) {
  visit_numeric(out[0].dtype(), "pow",
                [&]<class T>() { pointwise<T, T, T>(out[0], in, fn::Pow{}); });
}

void pow_scalar(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  const double e = a.value;
  visit_numeric(out[0].dtype(), "pow", [&]<class T>() {
    using C = compute_t<T>;
    // Common float exponents get cheaper (and at least as exact) forms than std::pow.
    // Integers always take the wrapping integer power (x*x could overflow signed).
    if (e == 1) {
      pointwise<T, T>(out[0], in, fn::Identity{});
    } else if constexpr (std::is_floating_point_v<C>) {
      if (e == 2)
        pointwise<T, T>(out[0], in, fn::Square{});
      else if (e == 0.5)
        pointwise<T, T>(out[0], in, fn::Sqrt{});
      else if (e == -1)
        pointwise<T, T>(out[0], in, fn::Reciprocal{});
      else
        pointwise<T, T>(out[0], in, fn::PowScalar<C>{C(e)});
    } else {
      pointwise<T, T>(out[0], in, fn::PowScalar<C>{C(e)});
    }
  });
}

void abs(std::span<const Tensor> in, std::span<Tensor> out, const Attrs&) {
  unary_numeric<fn::Abs>(in, out, "abs");
}
void sign(std::span<const Tensor> in, std::span<Tensor> out, const Attrs&) {
  unary_numeric<fn::Sign>(in, out, "sign");
}

void maximum(std::span<const Tensor> in, std::span<Tensor> out, const Attrs&) {
  visit_all(out[0].dtype(), "maximum",
            [&]<class T>() { pointwise<T, T, T>(out[0], in, fn::Maximum{}); });
}
void minimum(std::span<const Tensor> in, std::span<Tensor> out, const Attrs&) {
  visit_all(out[0].dtype(), "minimum",
            [&]<class T>() { pointwise<T, T, T>(out[0], in, fn::Minimum{}); });
}

void clamp(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  visit_numeric(out[0].dtype(), "clamp", [&]<class T>() {
    using C = compute_t<T>;
    pointwise<T, T>(out[0], in, fn::Clamp<C>{bound_as<T>(a.value), bound_as<T>(a.value2)});
  });
}

}  // namespace ember::cpu
