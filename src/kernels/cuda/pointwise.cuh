// The pointwise ops' kernel functions as the kernel table holds them: unary<K, F> and
// binary<K, F> run the elementwise kernel (elementwise.cuh) over functor F for every dtype of
// kinds K (pointwise.cu, pointwise_math.cu); In and Out are their operands.
#pragma once
#include <span>

#include "kernels/cuda/elementwise.cuh"
#include "kernels/cuda/kernel_table.h"
#include "kernels/functors.h"

namespace ember::cuda::pointwise {

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

}  // namespace ember::cuda::pointwise
