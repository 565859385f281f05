// CPU kernels of the row-wise ops (signature: KernelFn): softmax, log_softmax, layer_norm,
// cross_entropy. Attrs: see ops/defs/reduction.def.
#pragma once
#include "ops/op_impl.h"

namespace ember::cpu {

void softmax(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a);
void log_softmax(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a);
void layer_norm(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a);
void layer_norm_backward(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a);
void cross_entropy(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a);

}  // namespace ember::cpu
