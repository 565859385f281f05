// Helpers shared by the index kernels: element offset tables over strided dims, contiguous
// copies of index tensors, and the bounds check every index goes through.
#pragma once
#include <omp.h>

#include <algorithm>
#include <vector>

#include "core/make_tensor.h"
#include "kernels/cpu/loops.h"
#include "kernels/cpu/pointwise.h"

namespace ember::cpu {

// Offsets (in elements) of every position of dims [begin, end) of `sizes`, row-major, for a
// tensor with `strides`. Outer and inner index spaces of gathers become two small tables, so
// the hot loops add two numbers instead of walking a multi-index.
inline std::vector<int64_t> offset_table(const Shape& sizes, const Shape& strides, int64_t begin,
                                         int64_t end) {
  std::vector<int64_t> t{0};
  for (int64_t d = begin; d < end; ++d) {
    std::vector<int64_t> next;
    next.reserve(t.size() * size_t(std::max<int64_t>(sizes[d], 0)));
    for (int64_t base : t)
      for (int64_t k = 0; k < sizes[d]; ++k) next.push_back(base + k * strides[d]);
    t = std::move(next);
  }
  return t;
}

// True when a table is 0, 1, 2, ...: those dims are contiguous and a loop needs no lookups.
inline bool is_identity(const std::vector<int64_t>& t) {
  for (size_t i = 0; i < t.size(); ++i)
    if (t[i] != int64_t(i)) return false;
  return true;
}

// Product of sizes[begin, end).
inline int64_t span_numel(const Shape& sizes, int64_t begin, int64_t end) {
  int64_t n = 1;
  for (int64_t d = begin; d < end; ++d) n *= sizes[d];
  return n;
}

// True when dims [begin, end) of t are laid out contiguously (row-major, unit innermost).
inline bool dims_contiguous(const Tensor& t, int64_t begin, int64_t end) {
  int64_t expected = 1;
  for (int64_t d = end - 1; d >= begin; --d) {
    if (t.sizes()[d] == 1) continue;
    if (t.strides()[d] != expected) return false;
    expected *= t.sizes()[d];
  }
  return true;
}

// t itself when contiguous, else a contiguous copy made by the copy kernel.
inline Tensor contiguous_copy(const Tensor& t) {
  if (t.is_contiguous()) return t;
  Tensor c = make_tensor(t.sizes(), t.dtype(), t.device());
  Tensor src[1] = {t};
  Tensor dst[1] = {c};
  clone(src, dst, Attrs{});
  return c;
}

// Throws unless every one of the n indices lies in [0, size). The scan runs in parallel (as a
// min/max reduction) and only a failure pays for finding the first bad index.
template <class I>
void check_indices(const I* idx, int64_t n, int64_t size, const char* op, int64_t dim) {
  int64_t lo = 0, hi = size - 1;
  bool bad = false;
#pragma omp parallel for reduction(|| : bad) if (n >= kParallelGrain)
  for (int64_t i = 0; i < n; ++i) bad = bad || int64_t(idx[i]) < lo || int64_t(idx[i]) > hi;
  if (!bad) return;
  for (int64_t i = 0; i < n; ++i) {
    int64_t v = int64_t(idx[i]);
    EMBER_CHECK(v >= 0 && v < size, op, ": index ", v, " is out of range for dim ", dim,
                " of size ", size, " (valid indices are 0 to ", size - 1, ")");
  }
}

// Calls f.template operator()<I>() with the C++ type of an index tensor's dtype.
template <class F>
void visit_index(DType t, const char* op, F&& f) {
  switch (t) {
    case DType::Int64:
      f.template operator()<int64_t>();
      return;
    case DType::Int32:
      f.template operator()<int32_t>();
      return;
    default:
      EMBER_FAIL(op, ": index tensors must be int64 or int32, got ", dtype_name(t));
  }
}

// Calls f.template operator()<U>() with an unsigned type of the dtype's width, for kernels
// that only move elements (so bool and every float width share one instantiation).
template <class F>
void visit_bits(DType t, F&& f) {
  switch (dtype_size(t)) {
    case 1:
      f.template operator()<uint8_t>();
      return;
    case 2:
      f.template operator()<uint16_t>();
      return;
    case 4:
      f.template operator()<uint32_t>();
      return;
    default:
      f.template operator()<uint64_t>();
      return;
  }
}

}  // namespace ember::cpu
