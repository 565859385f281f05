// A matmul with its bias add in the gemm's epilogue, for compiled graphs on a GPU: out = a @ b +
// bias in one kernel, where the ops (a matmul, then an add) take two and pass the product through
// memory; with a residual added after the bias, one kernel where the ops take three. Results
// are within an ulp of out's dtype of the exact sums, as the ops' are (the GPU tests check
// both, and that it is no further from them than the ops).
// src/kernels/cuda/gemm_bias.cpp implements it through cuBLASLt; in a build without CUDA it takes
// nothing.
#pragma once
#include "ember/tensor.h"

namespace ember::gemm_bias {

// out [..., m, n] = a [..., m, k] @ b [k, n] + bias [n] (+ residual [..., m, n], when given),
// all bfloat16 or all float16 on one CUDA device: a's leading dims folded into its rows (rows of
// k contiguous elements, evenly apart), b a matrix read as it lies (rows or columns contiguous),
// bias, residual and out contiguous. The residual is the gemm's C operand (beta 1), so a
// residual block's `x + linear(y)` is one kernel too. False, with nothing written, where it does
// not take these tensors (another dtype, other layouts, no cuBLASLt algorithm): the caller runs
// the ops instead.
// With gelu (no residual), out is the exact gelu of a @ b + bias, taken only where
// rounds_product_first holds (cuBLASLt's gelu epilogue is the tanh form).
// With ln (its weight and bias defined), a is the layer_norm's input and the product is of
// layer_norm(a, [k], ln.weight, ln.bias, ln.eps) as the op computes it: taken by the gemv kernel
// alone (16-bit rows of 513 to 4096 elements, rounds_product_first), else false. With ln, the
// bias may be undefined (a product without one, and then no residual and no gelu).
struct LayerNormIn {
  Tensor weight, bias;
  double eps = 1e-5;
};
bool run(const Tensor& a, const Tensor& b, const Tensor& bias, const Tensor& out,
         const Tensor& residual = Tensor(), bool gelu = false, const LayerNormIn* ln = nullptr);

// The rows at most that a product with its weight read through w.t() runs by the gemv kernel
// (kernels/cuda/gemv.h): a decode step's.
constexpr int64_t kFewRows = 4;
// Whether run, for a of `rows` rows and b [k, n] of strides b_strides, takes the gemv kernel,
// which rounds the product to out's dtype before it adds the bias and the residual, as the
// matmul op stores it: the biased product is then eager's matmul-then-add bit for bit, and
// with a residual what one fused add of bias and residual over the stored product gives (the
// cuBLASLt epilogue rounds the unrounded product's sum once instead).
inline bool rounds_product_first(int64_t rows, int64_t k, int64_t n, const Shape& b_strides) {
  const int64_t sr = b_strides[0], sc = b_strides[1];
  const bool as_rows = sc == 1 && sr >= n;  // b read as it lies, not through w.t()
  return rows >= 1 && rows <= kFewRows && !as_rows && sr == 1 && sc >= k;
}

}  // namespace ember::gemm_bias
