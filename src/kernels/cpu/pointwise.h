// CPU kernels of the pointwise ops (signature: KernelFn).
#pragma once
#include "ops/op_impl.h"

namespace ember::cpu {

void add(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a);
void sub(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a);
void mul(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a);
void div(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a);
void neg(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a);
void cast(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a);
void clone(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a);

}  // namespace ember::cpu
