// CPU kernels of the index family: gathers and scatters by index tensors, concatenation,
// positional masks, top-k, and BLAS matmul (signature: KernelFn).
#pragma once
#include "kernels/cpu/gemm.h"
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
// out = a @ b for float32/float64 matrices, then epi(ctx, r0, r1) over out's rows (of its last
// dim) in blocks: float32 through ember's gemm (kernels/cpu/gemm.h), the epilogue running on
// each block of rows as it completes; otherwise BLAS and then the epilogue in a pass.
void matmul_epilogue(const Tensor& a, const Tensor& b, const Tensor& out, RowEpilogue epi,
                     void* const* ctx);

}  // namespace ember::cpu
