// CPU kernels of comparisons, logical ops and selection (signature: KernelFn).
#pragma once
#include "ops/op_impl.h"

namespace ember::cpu {

void eq(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a);
void ne(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a);
void lt(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a);
void le(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a);
void gt(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a);
void ge(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a);
void logical_and(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a);
void logical_or(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a);
void logical_xor(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a);
void logical_not(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a);
void where(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a);
void masked_fill(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a);

}  // namespace ember::cpu
