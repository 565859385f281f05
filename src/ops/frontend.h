// Helpers shared by the op front ends (the functions users call): promotion, scalars,
// attribute building.
#pragma once
#include <optional>

#include "core/shape.h"
#include "dispatch/dispatcher.h"
#include "ember/autograd.h"
#include "ember/ops.h"

namespace ember {

// The dtype a binary op computes in: PyTorch's rules, where a 0-dim tensor only decides the
// category (bool < integer < floating), not the width.
DType result_type(const Tensor& a, const Tensor& b);
// A 0-dim tensor holding `v`, typed to combine with `like` as a Python scalar would.
Tensor wrap_scalar(double v, const Tensor& like);
// A 0-dim tensor holding v, on `device` (scalar operands live where the tensor they meet is).
Tensor scalar_tensor_on(double v, DType dtype, Device device);
// Under an autocast scope (ember/autocast.h): float32 tensors cast to the scope's dtype (for the
// ops run in lower precision), and half tensors cast to float32 (for the ops run in float32).
// Outside a scope, or for other dtypes, the tensor itself.
Tensor autocast_lower(const Tensor& t);
Tensor autocast_float32(const Tensor& t);
// `draws` draws reserved from the global generator as an rng_state tensor on `device` ({seed,
// offset}): what a fused op with dropout takes under capture instead of attrs, which a replayed
// graph would repeat (the rng_state node draws afresh at each run).
Tensor reserve_random_tensor(uint64_t draws, Device device, const char* op);
// Zeros of `shape` in `like`'s dtype, on `like`'s device.
Tensor zeros_shaped_like(const Shape& shape, const Tensor& like);
// t cast to dtype (no-op when equal).
inline Tensor cast_to(const Tensor& t, DType d) { return t.dtype() == d ? t : t.to(d); }
// Dtype of per-row statistics saved for a grad (layer_norm's mean and rstd, the logsumexp of
// cross_entropy and attention): float32 for 16-bit inputs, which are computed in float.
inline DType stats_dtype(DType t) { return t == DType::Float64 ? t : DType::Float32; }
// Integral and bool inputs are promoted to the default float dtype (exp, log, div ...).
Tensor to_floating(const Tensor& t);

// Elementwise op on two tensors after promotion to a common dtype.
Tensor binary(OpId op, const Tensor& a, const Tensor& b);
Tensor unary(OpId op, const Tensor& a, const Attrs& attrs = {});

// Normalized reduction dims (sorted, unique, wrapped); empty means all dims.
Shape reduction_dims(const Shape& dims, int64_t ndim, const char* op);
// Shape after reducing `dims` (normalized) with or without keepdim.
Shape reduced_shape(const Shape& sizes, const Shape& dims, bool keepdim);

}  // namespace ember
