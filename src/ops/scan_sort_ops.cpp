// Prefix sums and sorting as composites: cumsum is log2(n) shifted adds of slices (Hillis and
// Steele's scan), sort is topk over the whole dim (its order is a total one: ties go to the
// lower position, NaN ranks above every number), so both are differentiable and compile.
#include "ops/frontend.h"

namespace ember {

Tensor cumsum(const Tensor& x, int64_t dim) {
  EMBER_CHECK(x.defined(), "cumsum: undefined tensor argument");
  // Integers and bools sum in int64, as PyTorch's.
  Tensor y = is_floating(x.dtype()) ? x : x.to(DType::Int64);
  if (x.dim() == 0) {
    wrap_dim(dim, 0, "cumsum");
    return y.clone();
  }
  const int64_t d = wrap_dim(dim, x.dim(), "cumsum"), n = x.size(d);
  if (n <= 1) return y.clone();
  // After the step of shift s, y[i] holds the sum of the 2s elements ending at i (fewer near
  // the start), so ceil(log2(n)) steps sum every prefix.
  for (int64_t s = 1; s < n; s *= 2)
    y = cat({y.slice(d, 0, s), y.slice(d, s, n) + y.slice(d, 0, n - s)}, d);
  return y;
}

std::pair<Tensor, Tensor> sort(const Tensor& x, int64_t dim, bool descending) {
  EMBER_CHECK(x.defined(), "sort: undefined tensor argument");
  EMBER_CHECK(x.dtype() != DType::Bool, "sort: not supported for bool tensors; cast with .to() ",
              "first");
  const int64_t n = x.dim() == 0 ? 1 : x.size(wrap_dim(dim, x.dim(), "sort"));
  return x.topk(n, dim, descending, true);
}

Tensor argsort(const Tensor& x, int64_t dim, bool descending) {
  EMBER_CHECK(x.defined(), "argsort: undefined tensor argument");
  return sort(x, dim, descending).second;
}

}  // namespace ember
