// CPU kernels of the index family: gathers and scatters by index tensors, concatenation,
// positional masks, top-k, and BLAS matmul (signature: KernelFn).
#pragma once
#include "ops/op_impl.h"

namespace ember::cpu {

void index_select(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a);
void gather(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a);
void index_add(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a);
void scatter_add(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a);
void cat(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a);
void tril(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a);
void triu(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a);
void topk(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a);
void matmul(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a);
// out += a @ b for float32/float64 matrices (batch dims broadcast; out contiguous, of the
// broadcast result shape): the compiler's gemm with a fused additive epilogue.
void matmul_accumulate(const Tensor& a, const Tensor& b, const Tensor& out);

}  // namespace ember::cpu
