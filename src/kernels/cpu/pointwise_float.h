// CPU kernels of float-only unary math (signature: KernelFn).
#pragma once
#include "ops/op_impl.h"

namespace ember::cpu {

void exp(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a);
void log(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a);
void sqrt(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a);
void rsqrt(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a);

}  // namespace ember::cpu
