// Buffers of the row-wise kernels: they compute on contiguous float32/float64 rows, so 16-bit
// inputs are widened (and strided ones packed) once up front, and 16-bit outputs are written
// through a float32 buffer.
#pragma once
#include "ember/tensor.h"

namespace ember::cpu {

// float64 stays, every other floating dtype computes in float32.
inline DType compute_dtype(DType t) {
  return t == DType::Float64 ? t : DType::Float32;
}
// Calls f.template operator()<C>() with C = double for float64, float otherwise.
template <class F>
void visit_compute(DType t, F&& f) {
  if (t == DType::Float64)
    f.template operator()<double>();
  else
    f.template operator()<float>();
}
// t itself when it is contiguous in its compute dtype, else a contiguous converted copy.
Tensor compute_contiguous(const Tensor& t);
// t itself when contiguous, else a contiguous copy (any dtype).
Tensor packed(const Tensor& t);
// Where a kernel writes `out`: out itself when its dtype is the compute dtype, else a buffer.
Tensor compute_buffer(const Tensor& out);
// Stores a buffer from compute_buffer into out (nothing to do when they are the same tensor).
void store_buffer(const Tensor& buf, const Tensor& out);

}  // namespace ember::cpu
