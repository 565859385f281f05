// Layer norm over the trailing dims: per row, the mean and the variance around it (two passes,
// numerically stable), then out = (x - mean) * rstd * weight + bias. Rows run in parallel; mean and
// rstd are outputs too, saved for the grad.
#include <cmath>

#include "core/shape.h"
#include "kernels/cpu/reduce_loops.h"
#include "kernels/cpu/reducers.h"
#include "kernels/cpu/rowwise.h"
#include "kernels/cpu/rowwise_buffers.h"

namespace ember::cpu {

namespace {
template <class C>
const C* data_or_null(const Tensor& t) {
  return t.defined() ? static_cast<const C*>(t.impl()->data()) : nullptr;
}

template <class C>
void normalize_row(const C* x, C* y, int64_t n, C mean, C rstd, const C* w, const C* b) {
  if (w && b) {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) y[i] = (x[i] - mean) * rstd * w[i] + b[i];
  } else if (w) {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) y[i] = (x[i] - mean) * rstd * w[i];
  } else {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) y[i] = (x[i] - mean) * rstd;
  }
}
}  // namespace

void layer_norm(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  const Tensor x = compute_contiguous(in[0]);
  const Tensor w = in.size() > 1 ? compute_contiguous(in[1]) : Tensor();
  const Tensor b = in.size() > 2 ? compute_contiguous(in[2]) : Tensor();
  const Tensor y = compute_buffer(out[0]);
  const int64_t n = shape_numel(a.shape), rows = out[1].numel();
  visit_compute(x.dtype(), [&]<class C>() {
    const C* xp = static_cast<const C*>(x.impl()->data());
    const C *wp = data_or_null<C>(w), *bp = data_or_null<C>(b);
    C* yp = static_cast<C*>(y.impl()->data());
    C* mean = static_cast<C*>(out[1].impl()->data());
    C* rstd = static_cast<C*>(out[2].impl()->data());
    const C eps = C(a.value);
#pragma omp parallel for schedule(static) if (use_threads(rows * n) && rows > 1)
    for (int64_t r = 0; r < rows; ++r) {
      const C* xr = xp + r * n;
      const C mu = fold_run(xr, n, SumReducer<C>{}) / C(n);
      const C var = fold_run(xr, n, SquaredDeviationReducer<C>{mu}) / C(n);
      mean[r] = mu;
      rstd[r] = C(1) / fn::Sqrt{}(var + eps);
      normalize_row(xr, yp + r * n, n, mu, rstd[r], wp, bp);
    }
  });
  store_buffer(y, out[0]);
}

}  // namespace ember::cpu
