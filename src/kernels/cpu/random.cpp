// CPU kernels of the random ops. Each output element is computed from its own Philox draws
// (see ops/defs/factory.def for the layout), so the result does not depend on how the work
// is split across threads.
#include "kernels/cpu/random.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "core/philox.h"
#include "kernels/cpu/dtype_visit.h"
#include "kernels/cpu/loops.h"

namespace ember::cpu {

namespace {

// A Philox block costs about as much as a dozen pointwise ops, so threads pay off sooner.
constexpr int64_t kRandomGrain = kParallelGrain / 8;

// Ops start on a Philox block; the front ends reserve whole blocks.
void check_offset(const Attrs& a, const char* op) {
  EMBER_CHECK(a.offset % 4 == 0, op, ": the random offset ", a.offset,
              " must start a Philox block (a multiple of 4)");
}

// Calls body(words, first, count) for every Philox block feeding n elements, where each
// block feeds `per_block` consecutive elements: elements [first, first + count) come from
// block attrs.offset / 4 + first / per_block.
template <class Body>
void for_each_block(int64_t n, int64_t per_block, const Attrs& a, Body body) {
  const uint64_t base = a.offset / 4;
  const int64_t nblocks = (n + per_block - 1) / per_block;
#pragma omp parallel for schedule(static) if (n >= kRandomGrain && !omp_in_parallel())
  for (int64_t b = 0; b < nblocks; ++b) {
    const philox::Block w = philox::block(a.seed, base + uint64_t(b));
    const int64_t first = b * per_block;
    body(w, first, std::min(per_block, n - first));
  }
}

// Significant bits of a uniform in [0, 1) for each 16/32-bit float type.
template <class T>
constexpr int uniform_bits() {
  if constexpr (std::is_same_v<T, Half>) return 11;
  if constexpr (std::is_same_v<T, BFloat16>) return 8;
  return 24;
}

template <class T>
T* out_data(const Tensor& t) {
  return static_cast<T*>(t.impl()->data());
}

}  // namespace

void rand(std::span<const Tensor>, std::span<Tensor> out, const Attrs& a) {
  check_offset(a, "rand");
  const int64_t n = out[0].numel();
  visit_float(out[0].dtype(), "rand", [&]<class T>() {
    T* p = out_data<T>(out[0]);
    if constexpr (std::is_same_v<T, double>) {
      for_each_block(n, 2, a, [p](const philox::Block& w, int64_t first, int64_t count) {
        for (int64_t k = 0; k < count; ++k)
          p[first + k] = philox::uniform_double(w.v[2 * k], w.v[2 * k + 1]);
      });
    } else {
      constexpr int bits = uniform_bits<T>();
      for_each_block(n, 4, a, [p](const philox::Block& w, int64_t first, int64_t count) {
        for (int64_t k = 0; k < count; ++k) p[first + k] = T(philox::uniform_float(w.v[k], bits));
      });
    }
  });
}

void randn(std::span<const Tensor>, std::span<Tensor> out, const Attrs& a) {
  check_offset(a, "randn");
  const int64_t n = out[0].numel();
  visit_float(out[0].dtype(), "randn", [&]<class T>() {
    T* p = out_data<T>(out[0]);
    if constexpr (std::is_same_v<T, double>) {
      for_each_block(n, 2, a, [p](const philox::Block& w, int64_t first, int64_t count) {
        auto z = philox::box_muller(philox::uniform_double_open0(w.v[0], w.v[1]),
                                    philox::uniform_double(w.v[2], w.v[3]));
        p[first] = z.z0;
        if (count > 1) p[first + 1] = z.z1;
      });
    } else {
      for_each_block(n, 4, a, [p](const philox::Block& w, int64_t first, int64_t count) {
        for (int64_t k = 0; k < count; k += 2) {
          auto z = philox::box_muller(philox::uniform_float_open0(w.v[k]),
                                      philox::uniform_float(w.v[k + 1]));
          p[first + k] = T(z.z0);
          if (k + 1 < count) p[first + k + 1] = T(z.z1);
        }
      });
    }
  });
}

void randint(std::span<const Tensor>, std::span<Tensor> out, const Attrs& a) {
  check_offset(a, "randint");
  const int64_t n = out[0].numel();
  // Unsigned arithmetic: high - low may exceed INT64_MAX, and low + x wraps back into range.
  const uint64_t low = uint64_t(a.start);
  const uint64_t range = uint64_t(a.end) - low;
  visit_numeric(out[0].dtype(), "randint", [&]<class T>() {
    T* p = out_data<T>(out[0]);
    for_each_block(n, 2, a, [=](const philox::Block& w, int64_t first, int64_t count) {
      for (int64_t k = 0; k < count; ++k) {
        uint64_t x = philox::uniform_below(w.v[2 * k], w.v[2 * k + 1], range);
        p[first + k] = T(compute_t<T>(int64_t(low + x)));
      }
    });
  });
}

void rng_state(std::span<const Tensor>, std::span<Tensor> out, const Attrs& a) {
  int64_t* p = static_cast<int64_t*>(out[0].impl()->data());
  p[0] = int64_t(a.seed);
  p[1] = int64_t(a.offset);
}

void bernoulli(std::span<const Tensor>, std::span<Tensor> out, const Attrs& a) {
  check_offset(a, "bernoulli");
  const int64_t n = out[0].numel();
  const uint64_t threshold = philox::bernoulli_threshold(a.value);
  visit_all(out[0].dtype(), "bernoulli", [&]<class T>() {
    T* p = out_data<T>(out[0]);
    const T one = T(compute_t<T>(1)), zero = T(compute_t<T>(0));
    for_each_block(n, 4, a, [=](const philox::Block& w, int64_t first, int64_t count) {
      for (int64_t k = 0; k < count; ++k)
        p[first + k] = philox::bernoulli(w.v[k], threshold) ? one : zero;
    });
  });
}

void dropout(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  check_offset(a, "dropout");
  const Tensor x = in[0].contiguous();
  const int64_t n = out[0].numel();
  const uint64_t threshold = philox::bernoulli_threshold(1 - a.value);
  visit_float(out[0].dtype(), "dropout", [&]<class T>() {
    using C = compute_t<T>;
    const T* xp = static_cast<const T*>(x.impl()->data());
    T* p = out_data<T>(out[0]);
    const C scale = C(1 / (1 - a.value));
    for_each_block(n, 4, a, [=](const philox::Block& w, int64_t first, int64_t count) {
      for (int64_t k = 0; k < count; ++k)
        p[first + k] = T(C(xp[first + k]) * (philox::bernoulli(w.v[k], threshold) ? scale : C(0)));
    });
  });
}

void dropout_rng(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  const Tensor rng = in[1].contiguous();
  Attrs drawn = a;
  drawn.seed = uint64_t(static_cast<const int64_t*>(rng.impl()->data())[0]);
  drawn.offset = uint64_t(static_cast<const int64_t*>(rng.impl()->data())[1]);
  dropout(in.first(1), out, drawn);
}

// ---- multinomial ----

namespace {

// The weights, read row by row through their strides and converted to double.
struct Rows {
  const char* data;
  DType dtype;
  int64_t rows, cols, row_stride, col_stride;  // strides in elements

  void load(int64_t r, std::vector<double>& w) const {
    visit_float(dtype, "multinomial", [&]<class T>() {
      const T* p = reinterpret_cast<const T*>(data) + r * row_stride;
      for (int64_t c = 0; c < cols; ++c) w[c] = double(compute_t<T>(p[c * col_stride]));
    });
  }
};

// Rejects what has no distribution: negative, infinite or NaN weights, rows summing to
// zero, and (without replacement) rows with fewer positive weights than samples.
void check_weights(const Rows& w, int64_t samples, bool replacement, bool one_row) {
  std::vector<double> row(size_t(w.cols));
  for (int64_t r = 0; r < w.rows; ++r) {
    w.load(r, row);
    std::string where = one_row ? std::string() : " in row " + std::to_string(r);
    int64_t positive = 0;
    for (int64_t c = 0; c < w.cols; ++c) {
      double v = row[c];
      EMBER_CHECK(std::isfinite(v) && v >= 0, "multinomial: weight ", v, " at index ", c, where,
                  " is not allowed; weights must be non-negative and finite");
      positive += v > 0;
    }
    EMBER_CHECK(positive > 0, "multinomial: the weights", where,
                " are all zero; each row needs at least one positive weight");
    EMBER_CHECK(replacement || positive >= samples, "multinomial: cannot draw ", samples,
                " samples without replacement", where, ": only ", positive,
                " categories have a positive weight");
  }
}

// With replacement: invert the cumulative weights at a uniform in [0, total).
void sample_with_replacement(const std::vector<double>& w, const Attrs& a, uint64_t first_block,
                             int64_t samples, int64_t* out, std::vector<double>& cdf) {
  double total = 0;
  int64_t last_positive = 0;
  for (size_t c = 0; c < w.size(); ++c) {
    total += w[c];
    cdf[c] = total;
    if (w[c] > 0) last_positive = int64_t(c);
  }
  for (int64_t j = 0; j < samples; ++j) {
    philox::Block b = philox::block(a.seed, first_block + uint64_t(j / 2));
    int lane = int(j % 2) * 2;
    double target = philox::uniform_double(b.v[lane], b.v[lane + 1]) * total;
    // The first category whose cumulative weight exceeds the target; zero weights never
    // qualify because their cumulative weight equals the one before.
    int64_t idx = std::upper_bound(cdf.begin(), cdf.end(), target) - cdf.begin();
    out[j] = std::min(idx, last_positive);  // target == total only by rounding
  }
}

// Without replacement: the exponential race; the smallest keys -log(u) / w win, in order.
void sample_without_replacement(const std::vector<double>& w, const Attrs& a, uint64_t first_block,
                                int64_t samples, int64_t* out, std::vector<double>& key,
                                std::vector<int64_t>& order) {
  const int64_t cols = int64_t(w.size());
  order.clear();
  for (int64_t c = 0; c < cols; ++c) {
    if (!(w[c] > 0)) continue;
    philox::Block b = philox::block(a.seed, first_block + uint64_t(c / 2));
    int lane = int(c % 2) * 2;
    key[c] = -std::log(philox::uniform_double_open0(b.v[lane], b.v[lane + 1])) / w[c];
    order.push_back(c);
  }
  auto before = [&](int64_t x, int64_t y) {
    return key[x] < key[y] || (key[x] == key[y] && x < y);
  };
  std::partial_sort(order.begin(), order.begin() + samples, order.end(), before);
  std::copy(order.begin(), order.begin() + samples, out);
}

}  // namespace

void multinomial(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  check_offset(a, "multinomial");
  const Tensor& probs = in[0];
  const bool one_row = probs.dim() == 1;
  Rows w{static_cast<const char*>(probs.impl()->data()),
         probs.dtype(),
         one_row ? 1 : probs.size(0),
         probs.size(-1),
         one_row ? 0 : probs.stride(0),
         probs.stride(-1)};
  const int64_t samples = a.end;
  check_weights(w, samples, a.flag, one_row);
  // One sample is distributed alike either way, and the cumulative search is much cheaper
  // than a key per category.
  const bool replacement = a.flag || samples == 1;

  const int64_t per_row = (replacement ? samples : w.cols) * 2;
  const uint64_t row_blocks = uint64_t((per_row + 3) / 4);
  int64_t* o = out_data<int64_t>(out[0]);
  const bool parallel = w.rows > 1 && w.rows * std::max(w.cols, samples) >= kRandomGrain;
#pragma omp parallel if (parallel && !omp_in_parallel())
  {
    std::vector<double> row(size_t(w.cols)), scratch(size_t(w.cols));
    std::vector<int64_t> order;
#pragma omp for schedule(static)
    for (int64_t r = 0; r < w.rows; ++r) {
      w.load(r, row);
      uint64_t first_block = a.offset / 4 + uint64_t(r) * row_blocks;
      int64_t* dst = o + r * samples;
      if (replacement)
        sample_with_replacement(row, a, first_block, samples, dst, scratch);
      else
        sample_without_replacement(row, a, first_block, samples, dst, scratch, order);
    }
  }
}

}  // namespace ember::cpu
