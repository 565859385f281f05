// mark_dynamic and mark_static (compile.h): per-tensor hints the compiled callables read when
// they are given the tensor.
#include "core/shape.h"
#include "ember/compile.h"
#include "ember/error.h"

namespace ember {

namespace {
uint64_t dim_bit(const Tensor& t, int64_t dim, const char* op) {
  EMBER_CHECK(t.defined(), op, ": the tensor is undefined");
  const int64_t d = wrap_dim(dim, t.dim(), op);
  EMBER_CHECK(d < 64, op, ": dim ", dim, " of a tensor of ", t.dim(),
              " dims: only the first 64 dims can be marked");
  return uint64_t(1) << d;
}
}  // namespace

void mark_dynamic(const Tensor& t, int64_t dim) {
  const uint64_t bit = dim_bit(t, dim, "mark_dynamic");
  t.impl()->dynamic_dims |= bit;
  t.impl()->static_dims &= ~bit;
}

void mark_static(const Tensor& t, int64_t dim) {
  const uint64_t bit = dim_bit(t, dim, "mark_static");
  t.impl()->static_dims |= bit;
  t.impl()->dynamic_dims &= ~bit;
}

}  // namespace ember
