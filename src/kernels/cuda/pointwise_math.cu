// CUDA kernels of the unary pointwise ops (float math and activations, gelu's grad among them):
// the elementwise kernel (elementwise.cuh) over the functors the CPU kernels call. Apart from
// pointwise.cu so that the library's largest CUDA sources compile in parallel.
#include "kernels/cuda/pointwise.cuh"

namespace ember::cuda {

namespace {

using namespace pointwise;

#define EMBER_CUDA_UNARY(name, kinds, F) \
  void name(In in, Out out, const Attrs&) { unary<kinds, F>(#name, in, out); }

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


}  // namespace

void register_pointwise_math(KernelTable& t) {
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
}

}  // namespace ember::cuda
