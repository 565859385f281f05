// CPU kernels of powers, sign-like math, max/min and clamp (signature: KernelFn).
#pragma once
#include "ops/op_impl.h"

namespace ember::cpu {

void pow(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a);
void pow_scalar(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a);
void abs(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a);
void sign(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a);
void maximum(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a);
void minimum(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a);
void clamp(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a);

}  // namespace ember::cpu
