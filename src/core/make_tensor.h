// Creating tensors from metadata: fresh contiguous storage, views, symbolic tensors.
#pragma once
#include "ember/tensor.h"

namespace ember {

// Uninitialized contiguous tensor.
Tensor make_tensor(const Shape& sizes, DType dtype, Device device = kCPU);
// A tensor sharing `base`'s storage with other sizes/strides/offset (no autograd).
Tensor make_view(const Tensor& base, const Shape& sizes, const Shape& strides, int64_t offset);
// Checks sizes are non-negative and the element count fits; names `op` in the error.
void check_sizes(const Shape& sizes, const char* op);

}  // namespace ember
