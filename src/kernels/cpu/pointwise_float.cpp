// CPU kernels of float-only unary math.
#include "kernels/cpu/pointwise_float.h"

#include "kernels/cpu/loops.h"
#include "kernels/functors.h"

namespace ember::cpu {

namespace {
template <class F>
void unary_float(std::span<const Tensor> in, std::span<Tensor> out, const char* name) {
  visit_float(out[0].dtype(), name, [&]<class T>() { pointwise<T, T>(out[0], in, F{}); });
}
}  // namespace

void exp(std::span<const Tensor> in, std::span<Tensor> out, const Attrs&) {
  unary_float<fn::Exp>(in, out, "exp");
}
void log(std::span<const Tensor> in, std::span<Tensor> out, const Attrs&) {
  unary_float<fn::Log>(in, out, "log");
}
void sqrt(std::span<const Tensor> in, std::span<Tensor> out, const Attrs&) {
  unary_float<fn::Sqrt>(in, out, "sqrt");
}
void rsqrt(std::span<const Tensor> in, std::span<Tensor> out, const Attrs&) {
  unary_float<fn::Rsqrt>(in, out, "rsqrt");
}

}  // namespace ember::cpu
