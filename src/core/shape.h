// Shape helpers: printing, dim wrapping, broadcasting, and the checked size arithmetic every
// element and byte count goes through.
#pragma once
#include <cstdint>
#include <string>

#include "ember/tensor_impl.h"

namespace ember {

std::string shape_str(const Shape& s);  // "[2, 3]"
// Wraps a possibly negative dim into [0, ndim); throws naming `op` when out of range.
int64_t wrap_dim(int64_t dim, int64_t ndim, const char* op);
// Broadcast result of two shapes (PyTorch rules); throws naming `op` when incompatible or
// when the result has too many elements.
Shape broadcast_pair(const Shape& a, const Shape& b, const char* op);
// The element count of a shape already checked (a tensor's, an op's output): the product
// is known to fit.
int64_t shape_numel(const Shape& s);

// Sizes that fit: every element count, stride and byte count in ember is an int64 (strides
// and offsets in elements, times the element size for bytes), so a shape is valid when its
// sizes are non-negative and the product of its nonzero sizes (the outermost contiguous
// stride) fits in int64; a shape that is allocated also needs that product times the element
// size to fit. An empty dim does not excuse the others: their strides are still computed.
constexpr int64_t kMaxSize = INT64_MAX;

// a * b and a + b of sizes, or false when the result does not fit in int64.
bool size_mul(int64_t a, int64_t b, int64_t* out);
bool size_add(int64_t a, int64_t b, int64_t* out);
// The element count of `sizes`; throws naming `op` and the shape when a size is negative or
// the count (of the nonzero sizes) does not fit in int64.
int64_t checked_numel(const Shape& sizes, const char* op);
// The bytes of a contiguous tensor of `sizes` and `dtype`; throws as checked_numel does, and
// when the byte count does not fit in int64.
int64_t checked_nbytes(const Shape& sizes, DType dtype, const char* op);

}  // namespace ember
