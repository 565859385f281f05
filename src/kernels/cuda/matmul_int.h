// Integer matmul on CUDA (matmul_int.cu), which the matmul kernel (matmul.cpp) hands int32 and
// int64 products to.
#pragma once
#include "ember/tensor.h"

namespace ember::cuda {

// c = a @ b for int32 or int64 tensors on one GPU (c allocated with the broadcast shape, k > 0).
void integer_matmul(const Tensor& a, const Tensor& b, Tensor& c);

}  // namespace ember::cuda
