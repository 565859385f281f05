// Layer norm over the trailing dims: per row, the mean and the variance around it (two passes,
// numerically stable), then out = (x - mean) * rstd * weight + bias. Rows run in parallel; mean and
// rstd are outputs too, saved for the grad.
#include <cmath>
#include <vector>

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

// The fused grad (the GPU's, kept here as its reference): per row,
//   dx = rstd * (gw - mean(gw) - xhat * mean(gw * xhat)) with gw = g * w, xhat = (x - mean) * rstd,
// and dw = sum over rows of g * xhat, db = sum over rows of g, accumulated in double.
void layer_norm_backward(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  const Tensor g = compute_contiguous(in[0]), x = compute_contiguous(in[1]);
  const Tensor mean = compute_contiguous(in[2]), rstd = compute_contiguous(in[3]);
  const Tensor w = compute_contiguous(in[4]);
  const Tensor dx = compute_buffer(out[0]), dw = compute_buffer(out[1]),
               db = compute_buffer(out[2]);
  const int64_t n = shape_numel(a.shape), rows = mean.numel();
  visit_compute(x.dtype(), [&]<class C>() {
    const C *gp = static_cast<const C*>(g.impl()->data()), *xp = static_cast<const C*>(x.impl()->data());
    const C *mp = static_cast<const C*>(mean.impl()->data()),
            *rp = static_cast<const C*>(rstd.impl()->data()), *wp = static_cast<const C*>(w.impl()->data());
    C* dxp = static_cast<C*>(dx.impl()->data());
    std::vector<double> sw(size_t(n), 0.0), sb(size_t(n), 0.0);
    for (int64_t r = 0; r < rows; ++r) {
      const C *gr = gp + r * n, *xr = xp + r * n;
      C sum_gw = 0, sum_gwx = 0;
      for (int64_t i = 0; i < n; ++i) {
        const C gw = gr[i] * wp[i], xhat = (xr[i] - mp[r]) * rp[r];
        sum_gw += gw;
        sum_gwx += gw * xhat;
        sw[size_t(i)] += double(gr[i]) * double(xhat);
        sb[size_t(i)] += double(gr[i]);
      }
      const C mean_gw = sum_gw / C(n), mean_gwx = sum_gwx / C(n);
      for (int64_t i = 0; i < n; ++i) {
        const C xhat = (xr[i] - mp[r]) * rp[r];
        dxp[r * n + i] = rp[r] * (gr[i] * wp[i] - mean_gw - xhat * mean_gwx);
      }
    }
    C* dwp = static_cast<C*>(dw.impl()->data());
    C* dbp = static_cast<C*>(db.impl()->data());
    for (int64_t i = 0; i < n; ++i) {
      dwp[i] = C(sw[size_t(i)]);
      dbp[i] = C(sb[size_t(i)]);
    }
  });
  store_buffer(dx, out[0]);
  store_buffer(dw, out[1]);
  store_buffer(db, out[2]);
}

}  // namespace ember::cpu
