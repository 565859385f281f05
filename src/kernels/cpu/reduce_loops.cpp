// Reduction plans: splitting dims into kept and reduced index spaces, and the row-form copy for
// layouts that have no loop of their own.
#include "kernels/cpu/reduce_loops.h"

#include "core/make_tensor.h"
#include "kernels/cpu/pointwise.h"

namespace ember::cpu {

namespace {
// Appends a dim, merged into the previous one when the two are contiguous with each other.
void push_dim(Shape& sizes, Shape& strides, int64_t size, int64_t stride) {
  if (!sizes.empty() && strides.back() == stride * size) {
    sizes.back() *= size;
    strides.back() = stride;
    return;
  }
  sizes.push_back(size);
  strides.push_back(stride);
}
}  // namespace

ReducePlan make_reduce_plan(const Tensor& in, const Shape& dims) {
  ReducePlan p;
  size_t j = 0;
  for (int64_t d = 0; d < in.dim(); ++d) {
    bool reduced = j < dims.size() && dims[j] == d;
    if (reduced) ++j;
    int64_t size = in.sizes()[d];
    (reduced ? p.inner_numel : p.outer_numel) *= size;
    if (size == 1) continue;
    if (reduced)
      push_dim(p.inner_sizes, p.inner_strides, size, in.strides()[d]);
    else
      push_dim(p.outer_sizes, p.outer_strides, size, in.strides()[d]);
  }
  return p;
}

ReduceSource prepare_reduce(const Tensor& in, const Shape& dims) {
  ReducePlan p = make_reduce_plan(in, dims);
  if (p.outer_numel == 0 || p.inner_numel == 0 || p.row_form() || p.column_form())
    return {in, std::move(p)};
  // Copy with the kept dims first and the reduced dims last: then each output's elements are
  // one contiguous run.
  Shape sizes, strides, row_dims;
  for (bool reduced : {false, true}) {
    size_t j = 0;
    for (int64_t d = 0; d < in.dim(); ++d) {
      bool is_reduced = j < dims.size() && dims[j] == d;
      if (is_reduced) ++j;
      if (is_reduced != reduced) continue;
      if (reduced) row_dims.push_back(int64_t(sizes.size()));
      sizes.push_back(in.sizes()[d]);
      strides.push_back(in.strides()[d]);
    }
  }
  Tensor view = make_view(in, sizes, strides, in.storage_offset());
  Tensor copy = make_tensor(sizes, in.dtype(), in.device());
  Tensor src[1] = {view};
  Tensor dst[1] = {copy};
  clone(src, dst, Attrs{});
  ReducePlan rp = make_reduce_plan(copy, row_dims);
  return {copy, std::move(rp)};
}

}  // namespace ember::cpu
