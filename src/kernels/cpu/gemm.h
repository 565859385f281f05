// ember's float32 gemm with a fused row epilogue: the compiler's gemm groups run their
// pointwise tail (bias, residual, activation) on each block of rows right after the product
// there is complete, while the block is still in cache, instead of in a pass of its own.
#pragma once
#include <cstdint>

namespace ember::cpu {

// Runs a group's pointwise tail on output rows [r0, r1): reads the product from the output,
// writes the result in its place. Called from inside the gemm's parallel region, each row once.
using RowEpilogue = void (*)(void* const* ctx, int64_t r0, int64_t r1);

// Whether gemm_f32 computes products itself (a build with AVX-512, and EMBER_GEMM not set to
// "openblas"); otherwise, and for a single row, it calls OpenBLAS and then the epilogue.
bool own_gemm_enabled();

// epi over rows [0, rows) in blocks, in parallel: the tail of a product computed elsewhere.
void epilogue_pass(int64_t rows, RowEpilogue epi, void* const* ctx);

// c[M, N] (contiguous) = a[M, K] times b, then epi(ctx, r0, r1) over all rows in blocks
// (none when epi is null). a's element (m, k) is a[m * lda + k], or with a_cols (a stored by
// columns: a weight grad's dy^T) a[k * lda + m]; b's element (k, n) is b[k * bk + n * bn], with
// bk == 1 or bn == 1.
void gemm_f32(int64_t M, int64_t N, int64_t K, const float* a, int64_t lda, bool a_cols,
              const float* b, int64_t bk, int64_t bn, float* c, RowEpilogue epi, void* const* ctx);

}  // namespace ember::cpu
