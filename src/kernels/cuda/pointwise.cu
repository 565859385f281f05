// CUDA kernels of the pointwise ops: arithmetic, float math, activations, comparisons,
// selection, casts and copies. Each is the elementwise kernel (elementwise.cuh) over the same
// functor the CPU kernel calls, so both devices compute the same formulas in the same types.
#include "kernels/cuda/elementwise.cuh"
#include "kernels/cuda/kernel_table.h"
#include "kernels/functors.h"

namespace ember::cuda {

namespace {

using In = std::span<const Tensor>;
using Out = std::span<Tensor>;

template <Kinds K, class F>
void unary(const char* op, In in, Out out) {
  visit<K>(out[0].dtype(), op, [&]<class T>() { elementwise<T, T>(op, out[0], in, F{}); });
}
template <Kinds K, class F>
void binary(const char* op, In in, Out out) {
  visit<K>(out[0].dtype(), op, [&]<class T>() { elementwise<T, T, T>(op, out[0], in, F{}); });
}
template <class F>
void compare(const char* op, In in, Out out) {
  visit<Kinds::All>(in[0].dtype(), op,
                    [&]<class T>() { elementwise<bool, T, T>(op, out[0], in, F{}); });
}

#define EMBER_CUDA_UNARY(name, kinds, F) \
  void name(In in, Out out, const Attrs&) { unary<kinds, F>(#name, in, out); }
#define EMBER_CUDA_BINARY(name, kinds, F) \
  void name(In in, Out out, const Attrs&) { binary<kinds, F>(#name, in, out); }
#define EMBER_CUDA_COMPARE(name, F) \
  void name(In in, Out out, const Attrs&) { compare<F>(#name, in, out); }

EMBER_CUDA_BINARY(add, Kinds::Numeric, fn::Add)
EMBER_CUDA_BINARY(sub, Kinds::Numeric, fn::Sub)
EMBER_CUDA_BINARY(mul, Kinds::Numeric, fn::Mul)
EMBER_CUDA_BINARY(div, Kinds::Numeric, fn::Div)
EMBER_CUDA_BINARY(maximum, Kinds::All, fn::Maximum)
EMBER_CUDA_BINARY(minimum, Kinds::All, fn::Minimum)
EMBER_CUDA_UNARY(neg, Kinds::Numeric, fn::Neg)
EMBER_CUDA_UNARY(abs, Kinds::Numeric, fn::Abs)
EMBER_CUDA_UNARY(sign, Kinds::Numeric, fn::Sign)
EMBER_CUDA_UNARY(relu, Kinds::Numeric, fn::Relu)
EMBER_CUDA_UNARY(exp, Kinds::Float, fn::Exp)
EMBER_CUDA_UNARY(log, Kinds::Float, fn::Log)
EMBER_CUDA_UNARY(sqrt, Kinds::Float, fn::Sqrt)
EMBER_CUDA_UNARY(rsqrt, Kinds::Float, fn::Rsqrt)
EMBER_CUDA_UNARY(tanh, Kinds::Float, fn::Tanh)
EMBER_CUDA_UNARY(sigmoid, Kinds::Float, fn::Sigmoid)
EMBER_CUDA_UNARY(silu, Kinds::Float, fn::Silu)
EMBER_CUDA_COMPARE(eq, fn::Eq)
EMBER_CUDA_COMPARE(ne, fn::Ne)
EMBER_CUDA_COMPARE(lt, fn::Lt)
EMBER_CUDA_COMPARE(le, fn::Le)
EMBER_CUDA_COMPARE(gt, fn::Gt)
EMBER_CUDA_COMPARE(ge, fn::Ge)

void gelu(In in, Out out, const Attrs& a) {
  const DType t = out[0].dtype();
  if (a.flag) unary<Kinds::Float, fn::GeluTanh>("gelu", in, out);
  else if (t == DType::BFloat16 || t == DType::Float16)  // results of 16 bits (functors.h)
    unary<Kinds::Float, fn::GeluHalf>("gelu", in, out);
  else unary<Kinds::Float, fn::Gelu>("gelu", in, out);
}
void gelu_backward(In in, Out out, const Attrs& a) {
  const DType t = out[0].dtype();
  if (a.flag) binary<Kinds::Float, fn::GeluTanhBackward>("gelu_backward", in, out);
  else if (t == DType::BFloat16 || t == DType::Float16)  // results of 16 bits (functors.h)
    binary<Kinds::Float, fn::GeluBackwardHalf>("gelu_backward", in, out);
  else binary<Kinds::Float, fn::GeluBackward>("gelu_backward", in, out);
}

void where(In in, Out out, const Attrs&) {
  visit<Kinds::All>(out[0].dtype(), "where", [&]<class T>() {
    elementwise<T, bool, T, T>("where", out[0], in, fn::Where{});
  });
}

struct ToBool {
  template <class V> __device__ bool operator()(V v) const { return v != V(0); }
};
template <class D>
struct Convert {
  template <class V> __device__ compute_t<D> operator()(V v) const { return compute_t<D>(v); }
};
void cast(In in, Out out, const Attrs&) {
  visit<Kinds::All>(in[0].dtype(), "cast", [&]<class S>() {
    visit<Kinds::All>(out[0].dtype(), "cast", [&]<class D>() {
      if constexpr (std::is_same_v<D, bool>) elementwise<D, S>("cast", out[0], in, ToBool{});
      else elementwise<D, S>("cast", out[0], in, Convert<D>{});
    });
  });
}

// Copies the bits, by element size.
void clone(In in, Out out, const Attrs&) {
  switch (dtype_size(in[0].dtype())) {
    case 1: return elementwise<uint8_t, uint8_t>("clone", out[0], in, fn::Identity{});
    case 2: return elementwise<uint16_t, uint16_t>("clone", out[0], in, fn::Identity{});
    case 4: return elementwise<uint32_t, uint32_t>("clone", out[0], in, fn::Identity{});
    case 8: return elementwise<uint64_t, uint64_t>("clone", out[0], in, fn::Identity{});
  }
}

}  // namespace

void register_pointwise(KernelTable& t) {
  t[OpId::add] = add;
  t[OpId::sub] = sub;
  t[OpId::mul] = mul;
  t[OpId::div] = div;
  t[OpId::maximum] = maximum;
  t[OpId::minimum] = minimum;
  t[OpId::neg] = neg;
  t[OpId::abs] = abs;
  t[OpId::sign] = sign;
  t[OpId::relu] = relu;
  t[OpId::exp] = exp;
  t[OpId::log] = log;
  t[OpId::sqrt] = sqrt;
  t[OpId::rsqrt] = rsqrt;
  t[OpId::tanh] = tanh;
  t[OpId::sigmoid] = sigmoid;
  t[OpId::silu] = silu;
  t[OpId::gelu] = gelu;
  t[OpId::gelu_backward] = gelu_backward;
  t[OpId::eq] = eq;
  t[OpId::ne] = ne;
  t[OpId::lt] = lt;
  t[OpId::le] = le;
  t[OpId::gt] = gt;
  t[OpId::ge] = ge;
  t[OpId::where] = where;
  t[OpId::cast] = cast;
  t[OpId::clone] = clone;
}

}  // namespace ember::cuda
