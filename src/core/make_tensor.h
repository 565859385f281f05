// Creating tensors from metadata: fresh contiguous storage, views, symbolic tensors.
#pragma once
#include "ember/tensor.h"

namespace ember {

// Uninitialized contiguous tensor; throws when its byte count does not fit (core/shape.h) or
// the memory cannot be had.
Tensor make_tensor(const Shape& sizes, DType dtype, Device device = kCPU);
// A tensor sharing `base`'s storage with other sizes/strides/offset (no autograd).
Tensor make_view(const Tensor& base, const Shape& sizes, const Shape& strides, int64_t offset);
// Checks sizes are non-negative and the element count fits (core/shape.h); names `op` in the
// error.
void check_sizes(const Shape& sizes, const char* op);
// The same for a tensor to be allocated: its byte count in `dtype` must fit too.
void check_sizes(const Shape& sizes, DType dtype, const char* op);

}  // namespace ember
