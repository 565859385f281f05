// Products with a few rows on CUDA (gemv.cuh): what matmul and the bias gemm hand to it.
#pragma once
#include <cstdint>

#include "ember/dtype.h"

namespace ember::cuda::gemv {

// out [rows, n] (contiguous) = x [rows, k] (rows ldx apart, unit stride along k) times w^T,
// w [n, k] (rows ldw apart, unit stride along k: a linear layer's weight), plus residual
// [rows, n] (contiguous) and bias [n] where given, summed in float and rounded once. Launches
// on the device's stream and returns true, or launches nothing and returns false where it does
// not take the product: more rows than it takes, a dtype other than float32, float16 and
// bfloat16. With round_product, the product is rounded to dt before bias and residual are
// added (as the matmul op stores it); with gelu (16-bit dt, no residual), the result is the
// exact gelu of product + bias. With ln_w and ln_b (16-bit dt, 512 < k <= 4096), x's rows
// are first layer-normalized over k (eps ln_eps) in each block, as the layer_norm op's CUDA
// kernel computes and rounds them, bit for bit: the op's result never goes through memory.
bool run(const void* x, int64_t ldx, const void* w, int64_t ldw, const void* bias,
         const void* residual, void* out, int64_t rows, int64_t n, int64_t k, DType dt,
         int device, bool round_product = false, bool gelu = false,
         const void* ln_w = nullptr, const void* ln_b = nullptr, float ln_eps = 0);

}  // namespace ember::cuda::gemv
