// CUDA kernels of the pointwise ops that take a constant (powers, clamp, masked_fill) and of the
// logical ops and the tie mask, over the CPU kernels' functors and with their special cases, so
// both devices give the same values.
#include <limits>

#include "kernels/cuda/elementwise.cuh"
#include "kernels/cuda/kernel_table.h"
#include "kernels/functors.h"

namespace ember::cuda {

namespace {

using In = std::span<const Tensor>;
using Out = std::span<Tensor>;

// A double bound as T's compute type, as the CPU's bound_as: integer bounds saturate to the
// dtype's limits, half types round the bound to T first.
template <class T, class C = compute_t<T>>
C bound_as(double v) {
  if constexpr (std::is_integral_v<T>) {
    if (v <= double(std::numeric_limits<T>::lowest())) return std::numeric_limits<T>::lowest();
    if (v >= double(std::numeric_limits<T>::max())) return std::numeric_limits<T>::max();
    return T(v);
  } else if constexpr (std::is_same_v<T, __half>) {
    return __half2float(__double2half(v));
  } else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return __bfloat162float(__double2bfloat16(v));
  } else {
    return C(v);
  }
}

void pow(In in, Out out, const Attrs&) {
  visit<Kinds::Numeric>(out[0].dtype(), "pow",
                        [&]<class T>() { elementwise<T, T, T>("pow", out[0], in, fn::Pow{}); });
}

void pow_scalar(In in, Out out, const Attrs& a) {
  const double e = a.value;
  visit<Kinds::Numeric>(out[0].dtype(), "pow", [&]<class T>() {
    using C = compute_t<T>;
    if (e == 1) {
      elementwise<T, T>("pow", out[0], in, fn::Identity{});
    } else if constexpr (std::is_floating_point_v<C>) {
      if (e == 2) elementwise<T, T>("pow", out[0], in, fn::Square{});
      else if (e == 0.5) elementwise<T, T>("pow", out[0], in, fn::Sqrt{});
      else if (e == -1) elementwise<T, T>("pow", out[0], in, fn::Reciprocal{});
      else elementwise<T, T>("pow", out[0], in, fn::PowScalar<C>{C(e)});
    } else {
      elementwise<T, T>("pow", out[0], in, fn::PowScalar<C>{C(e)});
    }
  });
}

void clamp(In in, Out out, const Attrs& a) {
  visit<Kinds::Numeric>(out[0].dtype(), "clamp", [&]<class T>() {
    using C = compute_t<T>;
    elementwise<T, T>("clamp", out[0], in, fn::Clamp<C>{bound_as<T>(a.value), bound_as<T>(a.value2)});
  });
}

void masked_fill(In in, Out out, const Attrs& a) {
  visit<Kinds::All>(out[0].dtype(), "masked_fill", [&]<class T>() {
    using C = compute_t<T>;
    const C value = std::is_same_v<T, bool> ? C(a.value != 0) : bound_as<T>(a.value);
    elementwise<T, T, bool>("masked_fill", out[0], in, fn::MaskedFill<C>{value});
  });
}

template <class F, int Arity>
void logical(const char* op, In in, Out out) {
  visit<Kinds::All>(in[0].dtype(), op, [&]<class T>() {
    if constexpr (Arity == 1) elementwise<bool, T>(op, out[0], in, F{});
    else elementwise<bool, T, T>(op, out[0], in, F{});
  });
}
void logical_and(In in, Out out, const Attrs&) {
  logical<fn::LogicalAnd, 2>("logical_and", in, out);
}
void logical_or(In in, Out out, const Attrs&) { logical<fn::LogicalOr, 2>("logical_or", in, out); }
void logical_xor(In in, Out out, const Attrs&) {
  logical<fn::LogicalXor, 2>("logical_xor", in, out);
}
void logical_not(In in, Out out, const Attrs&) {
  logical<fn::LogicalNot, 1>("logical_not", in, out);
}

struct EqualMask {
  template <class C> __device__ C operator()(C x, C y) const { return x == y ? C(1) : C(0); }
};
void equal_mask(In in, Out out, const Attrs&) {
  visit<Kinds::Numeric>(out[0].dtype(), "equal_mask",
                        [&]<class T>() { elementwise<T, T, T>("equal_mask", out[0], in, EqualMask{}); });
}

}  // namespace

void register_pointwise_attrs(KernelTable& t) {
  t[OpId::pow] = pow;
  t[OpId::pow_scalar] = pow_scalar;
  t[OpId::clamp] = clamp;
  t[OpId::masked_fill] = masked_fill;
  t[OpId::logical_and] = logical_and;
  t[OpId::logical_or] = logical_or;
  t[OpId::logical_xor] = logical_xor;
  t[OpId::logical_not] = logical_not;
  t[OpId::equal_mask] = equal_mask;
}

}  // namespace ember::cuda
