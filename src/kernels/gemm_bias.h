// A matmul with its bias add in the gemm's epilogue, for compiled graphs on a GPU: out = a @ b +
// bias, the bias added to the float32 sums before they are rounded to out's dtype (one rounding
// where the ops, a matmul and then an add, round twice). src/kernels/cuda/gemm_bias.cpp
// implements it through cuBLASLt; in a build without CUDA it takes nothing.
#pragma once
#include "ember/tensor.h"

namespace ember::gemm_bias {

// out [..., m, n] = a [..., m, k] @ b [k, n] + bias [n], all bfloat16 or all float16 on one
// CUDA device: a's leading dims folded into its rows (rows of k contiguous elements, evenly
// apart), b a matrix read as it lies (rows or columns contiguous), bias and out contiguous.
// False, with nothing written, where it does not take these tensors (another dtype, other
// layouts, no cuBLASLt algorithm): the caller runs the ops instead.
bool run(const Tensor& a, const Tensor& b, const Tensor& bias, const Tensor& out);

}  // namespace ember::gemm_bias
