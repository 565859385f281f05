// CPU kernels of the activation functions (signature: KernelFn).
#pragma once
#include "ops/op_impl.h"

namespace ember::cpu {

void tanh(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a);
void sigmoid(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a);
void relu(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a);
void silu(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a);
void gelu(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a);
void gelu_backward(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a);

}  // namespace ember::cpu
