// CPU reduction kernels: sums and means, extremes and their positions, variance, logsumexp, and
// the tie mask of the amax/amin grads. Layouts, threading and accuracy: reduce_loops.h.
#include "kernels/cpu/reduce.h"

#include <algorithm>
#include <cmath>

#include "kernels/cpu/reduce_loops.h"
#include "kernels/cpu/reducers.h"

namespace ember::cpu {

namespace {
template <class T>
T* data_of(const Tensor& t) {
  return static_cast<T*>(t.impl()->data());
}

template <bool Max>
void extreme(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a, const char* name) {
  visit_numeric(in[0].dtype(), name, [&]<class T>() {
    using Acc = compute_t<T>;
    T* o = data_of<T>(out[0]);
    reduce<T>(
        in[0], a.dims, [](int64_t) { return ExtremeReducer<Acc, Max>{}; },
        [o](int64_t i, Acc acc, int64_t) { o[i] = T(acc); });
  });
}

// The extreme first, then the first position that holds it.
template <bool Max>
void arg_extreme(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a,
                 const char* name) {
  visit_numeric(in[0].dtype(), name, [&]<class T>() {
    using C = compute_t<T>;
    ReduceSource src = prepare_reduce(in[0], a.dims);
    std::vector<C> best(size_t(src.plan.outer_numel));
    run_reduce<T>(
        src, [](int64_t) { return ExtremeReducer<C, Max>{}; },
        [&best](int64_t i, C m, int64_t) { best[i] = m; });
    int64_t* o = data_of<int64_t>(out[0]);
    run_reduce<T>(
        src,
        [&best](int64_t i) {
          return FirstMatchReducer<C>{best[i], is_nan(best[i])};
        },
        [o](int64_t i, int64_t pos, int64_t) { o[i] = pos; });
  });
}

// Two passes over the same source: the mean, then the squared deviations from it.
template <bool Sqrt>
void variance(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a, const char* name) {
  visit_float(in[0].dtype(), name, [&]<class T>() {
    using Acc = acc_t<T>;
    ReduceSource src = prepare_reduce(in[0], a.dims);
    std::vector<Acc> mean(size_t(src.plan.outer_numel));
    run_reduce<T>(
        src, [](int64_t) { return SumReducer<Acc>{}; },
        [&mean](int64_t i, Acc s, int64_t n) { mean[i] = s / Acc(n); });
    T* o = data_of<T>(out[0]);
    const double correction = a.value;
    run_reduce<T>(
        src, [&mean](int64_t i) { return SquaredDeviationReducer<Acc>{mean[i]}; },
        [o, correction](int64_t i, Acc ss, int64_t n) {
          Acc v = ss / Acc(std::max(0.0, double(n) - correction));
          o[i] = T(Sqrt ? fn::Sqrt{}(v) : v);
        });
  });
}
}  // namespace

void sum(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  visit_numeric(in[0].dtype(), "sum", [&]<class T>() {
    using Acc = acc_t<T>;
    T* o = data_of<T>(out[0]);
    reduce<T>(
        in[0], a.dims, [](int64_t) { return SumReducer<Acc>{}; },
        [o](int64_t i, Acc acc, int64_t) { o[i] = T(compute_t<T>(acc)); });
  });
}

void mean(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  visit_float(in[0].dtype(), "mean", [&]<class T>() {
    using Acc = acc_t<T>;
    T* o = data_of<T>(out[0]);
    reduce<T>(
        in[0], a.dims, [](int64_t) { return SumReducer<Acc>{}; },
        [o](int64_t i, Acc acc, int64_t n) { o[i] = T(acc / Acc(n)); });
  });
}

void amax(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  extreme<true>(in, out, a, "amax");
}
void amin(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  extreme<false>(in, out, a, "amin");
}
void argmax(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  arg_extreme<true>(in, out, a, "argmax");
}
void argmin(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  arg_extreme<false>(in, out, a, "argmin");
}
void var(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  variance<false>(in, out, a, "var");
}
void std_dev(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  variance<true>(in, out, a, "std");
}

// Max-subtracted: max first, then log(sum(exp(x - max))) + max. An infinite or NaN max is the
// result itself (all -inf, or an empty reduction, gives -inf).
void logsumexp(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  visit_float(in[0].dtype(), "logsumexp", [&]<class T>() {
    using Acc = acc_t<T>;
    ReduceSource src = prepare_reduce(in[0], a.dims);
    std::vector<Acc> max(size_t(src.plan.outer_numel));
    run_reduce<T>(
        src, [](int64_t) { return ExtremeReducer<Acc, true>{}; },
        [&max](int64_t i, Acc m, int64_t) { max[i] = m; });
    T* o = data_of<T>(out[0]);
    run_reduce<T>(
        src, [&max](int64_t i) { return ExpSumReducer<Acc>{max[i]}; },
        [o, &max](int64_t i, Acc s, int64_t) {
          Acc m = max[i];
          o[i] = T(std::isfinite(m) ? m + fn::Log{}(s) : m);
        });
  });
}

void equal_mask(std::span<const Tensor> in, std::span<Tensor> out, const Attrs&) {
  visit_numeric(out[0].dtype(), "equal_mask", [&]<class T>() {
    pointwise<T, T, T>(out[0], in, [](auto x, auto y) {
      using C = decltype(x);
      return x == y ? C(1) : C(0);
    });
  });
}

}  // namespace ember::cpu
