// CPU kernels of the reduction ops (signature: KernelFn). Attrs: see ops/defs/reduction.def.
#pragma once
#include "ops/op_impl.h"

namespace ember::cpu {

void sum(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a);
void mean(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a);
void amax(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a);
void amin(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a);
void argmax(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a);
void argmin(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a);
void var(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a);
void std_dev(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a);
void logsumexp(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a);
void equal_mask(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a);

}  // namespace ember::cpu
