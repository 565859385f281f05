// CPU kernels of the fused attention ops (signature: KernelFn; inputs, attrs and outputs as in
// ops/defs/reduction.def). Plain loops: the reference the CUDA kernels are checked against.
#pragma once
#include "ops/op_impl.h"

namespace ember::cpu {

void attention(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a);
void attention_backward(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a);
void cached_attention(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a);
void attention_keep(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a);

}  // namespace ember::cpu
