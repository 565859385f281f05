// Shape helpers: printing, dim wrapping, broadcasting.
#pragma once
#include <string>

#include "ember/tensor_impl.h"

namespace ember {

std::string shape_str(const Shape& s);  // "[2, 3]"
// Wraps a possibly negative dim into [0, ndim); throws naming `op` when out of range.
int64_t wrap_dim(int64_t dim, int64_t ndim, const char* op);
// Broadcast result of two shapes (PyTorch rules); throws naming `op` when incompatible.
Shape broadcast_pair(const Shape& a, const Shape& b, const char* op);
int64_t shape_numel(const Shape& s);

}  // namespace ember
