// Softmax and log-softmax over one dim, max-subtracted so no exp overflows. With the dim last,
// each row is one task (max, exp and sum, scale: three sweeps while the row is in cache); with
// the dim elsewhere, a task takes a block of neighbouring columns and sweeps them together, so
// the loops run along contiguous memory.
#include <algorithm>

#include "kernels/cpu/reduce_loops.h"
#include "kernels/cpu/reducers.h"
#include "kernels/cpu/rowwise.h"
#include "kernels/cpu/rowwise_buffers.h"

namespace ember::cpu {

namespace {

template <class C>
void softmax_row(const C* x, C* y, int64_t n, bool log) {
  const C m = fold_run(x, n, ExtremeReducer<C, true>{});
  if (log) {
    // (x - max) - log(sum), not x - (max + log(sum)): the latter rounds max + log(sum) at the
    // scale of x and loses the small results.
    const C log_sum = fn::Log{}(fold_run(x, n, ExpSumReducer<C>{m}));
    for (int64_t i = 0; i < n; ++i) y[i] = (x[i] - m) - log_sum;
    return;
  }
  for (int64_t i = 0; i < n; ++i) y[i] = fn::ExpFtz{}(x[i] - m);
  const C inv = C(1) / fold_run(y, n, SumReducer<C>{});
  for (int64_t i = 0; i < n; ++i) y[i] *= inv;
}

// Columns [c0, c0 + w) of one [n, inner] slab, w <= kColumnBlock.
template <class C>
void softmax_columns(const C* x, C* y, int64_t n, int64_t inner, int64_t w, bool log) {
  C m[kColumnBlock], s[kColumnBlock];
  const ExtremeReducer<C, true> max_of;
  for (int64_t j = 0; j < w; ++j) {
    m[j] = max_of.init();
    s[j] = 0;
  }
  for (int64_t k = 0; k < n; ++k) {
    const C* xr = x + k * inner;
#pragma omp simd
    for (int64_t j = 0; j < w; ++j) max_of.step(m[j], xr[j], k);
  }
  for (int64_t k = 0; k < n; ++k) {
    const C* xr = x + k * inner;
    C* yr = y + k * inner;
    for (int64_t j = 0; j < w; ++j) {
      C e = fn::ExpFtz{}(xr[j] - m[j]);
      s[j] += e;
      if (!log) yr[j] = e;
    }
  }
  for (int64_t j = 0; j < w; ++j) s[j] = log ? fn::Log{}(s[j]) : C(1) / s[j];
  for (int64_t k = 0; k < n; ++k) {
    const C* xr = x + k * inner;
    C* yr = y + k * inner;
    if (log) {
#pragma omp simd
      for (int64_t j = 0; j < w; ++j) yr[j] = (xr[j] - m[j]) - s[j];
    } else {
#pragma omp simd
      for (int64_t j = 0; j < w; ++j) yr[j] *= s[j];
    }
  }
}

void softmax_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a, bool log) {
  const Tensor x = compute_contiguous(in[0]);
  const Tensor y = compute_buffer(out[0]);
  // [outer, n, inner] around the softmax dim (a 0-dim tensor is one element).
  int64_t outer = 1, n = 1, inner = 1;
  for (int64_t d = 0; d < x.dim(); ++d)
    (d < a.dim ? outer : d == a.dim ? n : inner) *= x.sizes()[d];
  const bool threads = use_threads(outer * n * inner);
  visit_compute(x.dtype(), [&]<class C>() {
    const C* xp = static_cast<const C*>(x.impl()->data());
    C* yp = static_cast<C*>(y.impl()->data());
    if (inner == 1) {
#pragma omp parallel for schedule(static) if (threads && outer > 1)
      for (int64_t r = 0; r < outer; ++r) softmax_row(xp + r * n, yp + r * n, n, log);
      return;
    }
    const int64_t ncb = (inner + kColumnBlock - 1) / kColumnBlock;
#pragma omp parallel for schedule(static) if (threads)
    for (int64_t t = 0; t < outer * ncb; ++t) {
      const int64_t o = t / ncb, c0 = t % ncb * kColumnBlock;
      const int64_t off = o * n * inner + c0;
      softmax_columns(xp + off, yp + off, n, inner, std::min(kColumnBlock, inner - c0), log);
    }
  });
  store_buffer(y, out[0]);
}

}  // namespace

void softmax(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  softmax_kernel(in, out, a, false);
}
void log_softmax(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  softmax_kernel(in, out, a, true);
}

}  // namespace ember::cpu
