// CUDA kernels of the pointwise arithmetic ops (float math and activations: pointwise_math.cu;
// comparisons and where: pointwise_compare.cu; cast and clone: pointwise_cast.cu). Each is the
// elementwise kernel (elementwise.cuh) over the same functor the CPU kernel calls, so both
// devices compute the same formulas in the same types.
#include "kernels/cuda/pointwise.cuh"

namespace ember::cuda {

namespace {

using namespace pointwise;

#define EMBER_CUDA_BINARY(name, kinds, F) \
  void name(In in, Out out, const Attrs&) { binary<kinds, F>(#name, in, out); }

EMBER_CUDA_BINARY(add, Kinds::Numeric, fn::Add)
EMBER_CUDA_BINARY(sub, Kinds::Numeric, fn::Sub)
EMBER_CUDA_BINARY(mul, Kinds::Numeric, fn::Mul)
EMBER_CUDA_BINARY(div, Kinds::Numeric, fn::Div)
EMBER_CUDA_BINARY(maximum, Kinds::All, fn::Maximum)
EMBER_CUDA_BINARY(minimum, Kinds::All, fn::Minimum)

}  // namespace

void register_pointwise(KernelTable& t) {
  t[OpId::add] = add;
  t[OpId::sub] = sub;
  t[OpId::mul] = mul;
  t[OpId::div] = div;
  t[OpId::maximum] = maximum;
  t[OpId::minimum] = minimum;
}

}  // namespace ember::cuda
