// CPU kernels of the activation functions: float types (relu also integers).
#include "kernels/cpu/pointwise_activation.h"

#include "kernels/cpu/loops.h"
#include "kernels/functors.h"

namespace ember::cpu {

namespace {
template <class F>
void unary_float(std::span<const Tensor> in, std::span<Tensor> out, const char* name) {
  visit_float(out[0].dtype(), name, [&]<class T>() { pointwise<T, T>(out[0], in, F{}); });
}
template <class F>
void binary_float(std::span<const Tensor> in, std::span<Tensor> out, const char* name) {
  visit_float(out[0].dtype(), name, [&]<class T>() { pointwise<T, T, T>(out[0], in, F{}); });
}
}  // namespace

void tanh(std::span<const Tensor> in, std::span<Tensor> out, const Attrs&) {
  unary_float<fn::Tanh>(in, out, "tanh");
}
void sigmoid(std::span<const Tensor> in, std::span<Tensor> out, const Attrs&) {
  unary_float<fn::Sigmoid>(in, out, "sigmoid");
}
void relu(std::span<const Tensor> in, std::span<Tensor> out, const Attrs&) {
  visit_numeric(out[0].dtype(), "relu",
                [&]<class T>() { pointwise<T, T>(out[0], in, fn::Relu{}); });
}
void silu(std::span<const Tensor> in, std::span<Tensor> out, const Attrs&) {
  unary_float<fn::Silu>(in, out, "silu");
}
void gelu(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  const DType t = out[0].dtype();
  if (a.flag)
    unary_float<fn::GeluTanh>(in, out, "gelu");
  else if (t == DType::BFloat16 || t == DType::Float16)  // results of 16 bits (functors.h)
    unary_float<fn::GeluHalf>(in, out, "gelu");
  else
    unary_float<fn::Gelu>(in, out, "gelu");
}
void gelu_backward(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  const DType t = out[0].dtype();
  if (a.flag)
    binary_float<fn::GeluTanhBackward>(in, out, "gelu_backward");
  else if (t == DType::BFloat16 || t == DType::Float16)  // results of 16 bits (functors.h)
    binary_float<fn::GeluBackwardHalf>(in, out, "gelu_backward");
  else
    binary_float<fn::GeluBackward>(in, out, "gelu_backward");
}

}  // namespace ember::cpu
