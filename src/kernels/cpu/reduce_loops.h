// The reduction loop: for every output element, combine the input elements over the reduced
// dims. Reduced dims become the inner loop; the outer loop runs in parallel.
#pragma once
#include <omp.h>

#include "core/shape.h"
#include "kernels/cpu/dtype_visit.h"
#include "kernels/cpu/loops.h"

namespace ember::cpu {

// Splits an input's dims into kept (outer) and reduced (inner) index spaces.
struct ReducePlan {
  Shape outer_sizes, outer_strides;  // kept dims (input strides, elements)
  Shape inner_sizes, inner_strides;  // reduced dims
  int64_t outer_numel = 1, inner_numel = 1;
};
ReducePlan make_reduce_plan(const Tensor& in, const Shape& dims);

// Offset (in elements) of linear index i of an index space.
inline int64_t space_offset(int64_t i, const Shape& sizes, const Shape& strides) {
  int64_t off = 0;
  for (int64_t d = int64_t(sizes.size()) - 1; d >= 0; --d) {
    off += (i % sizes[d]) * strides[d];
    i /= sizes[d];
  }
  return off;
}

// For each output element o (contiguous output), calls
//   out[o] = finish(fold over reduced elements of combine(acc, value))
// Acc init, Combine(acc&, value_compute, index_in_row) and Finish(acc, count) -> Out.
template <class T, class Out, class Acc, class Combine, class Finish>
void reduce_rows(const Tensor& in, const Tensor& out, const Shape& dims, Acc init,
                 Combine combine, Finish finish) {
  ReducePlan p = make_reduce_plan(in, dims);
  const T* base = static_cast<const T*>(in.impl()->data());
  Out* o = static_cast<Out*>(out.impl()->data());
  const bool inner_contig = p.inner_sizes.size() <= 1 &&
                            (p.inner_sizes.empty() || p.inner_strides[0] == 1);
  const int64_t total = p.outer_numel * p.inner_numel;
#pragma omp parallel for if (total >= kParallelGrain && p.outer_numel > 1)
  for (int64_t r = 0; r < p.outer_numel; ++r) {
    const T* row = base + space_offset(r, p.outer_sizes, p.outer_strides);
    Acc acc = init;
    if (inner_contig) {
      for (int64_t i = 0; i < p.inner_numel; ++i) combine(acc, compute_t<T>(row[i]), i);
    } else {
      for (int64_t i = 0; i < p.inner_numel; ++i)
        combine(acc, compute_t<T>(row[space_offset(i, p.inner_sizes, p.inner_strides)]), i);
    }
    o[r] = finish(acc, p.inner_numel);
  }
}

}  // namespace ember::cpu
