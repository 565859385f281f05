// The reduction engine: for every output element, folds the input elements of the reduced dims
// with a Reducer. Two layouts get loops of their own, because training runs them hot:
//  - row form: each output's elements are one contiguous run (x.sum(-1) of [rows, C], or a
//    reduction of everything). A run is folded in chunks, each by many independent partial
//    accumulators: the loop vectorizes, and each partial sees few elements. Chunk results merge
//    as a balanced tree, which keeps long rows accurate. Few long rows are split across threads
//    by chunk, with the same tree, so results do not depend on the thread count.
//  - column form: the kept dims end in a contiguous run (x.sum(0) of [rows, C]: bias grads).
//    Whole rows are accumulated into a vector of partials (vectorized along the row), in blocks of
//    rows and of columns; the row blocks' partials then merge pairwise. Blocks are the units of
//    threading.
// Any other layout is first copied into row form (kept dims first, reduced dims last).
//
// A Reducer has `using Acc`, `Acc init()`, `step(Acc&, value, index)` (index: the element's
// row-major position in the reduced index space) and `merge(Acc&, const Acc&)` (combines the folds
// of two disjoint sets of elements). Kernels pass make(o), which builds the reducer of output o
// (two-pass ops hand per-output values through it), and finish(o, acc, count), which stores it.
#pragma once
#include <omp.h>

#include <algorithm>
#include <bit>
#include <type_traits>
#include <vector>

#include "core/shape.h"
#include "kernels/cpu/dtype_visit.h"
#include "kernels/cpu/loops.h"

namespace ember::cpu {

// The input's dims split into kept (outer) and reduced (inner) index spaces, each coalesced and
// without size-1 dims. Strides in elements.
struct ReducePlan {
  Shape outer_sizes, outer_strides;
  Shape inner_sizes, inner_strides;
  int64_t outer_numel = 1, inner_numel = 1;

  bool row_form() const {
    return inner_sizes.empty() || (inner_sizes.size() == 1 && inner_strides[0] == 1);
  }
  bool column_form() const { return !outer_sizes.empty() && outer_strides.back() == 1; }
};
ReducePlan make_reduce_plan(const Tensor& in, const Shape& dims);

// What a reduction reads: the input itself when its layout has a loop, else a row-form copy.
struct ReduceSource {
  Tensor data;
  ReducePlan plan;
};
ReduceSource prepare_reduce(const Tensor& in, const Shape& dims);

// One element in its compute type. float16 goes through the hardware conversion where the
// compiler offers _Float16 (one instruction instead of Half's portable bit manipulation).
template <class T>
inline compute_t<T> load_compute(const T& x) {
#ifdef __FLT16_MAX__
  if constexpr (std::is_same_v<T, Half>) return float(std::bit_cast<_Float16>(x.bits));
#endif
  return compute_t<T>(x);
}

// Offset (in elements) of linear index i of an index space.
inline int64_t space_offset(int64_t i, const Shape& sizes, const Shape& strides) {
  int64_t off = 0;
  for (int64_t d = int64_t(sizes.size()) - 1; d >= 0; --d) {
    off += (i % sizes[d]) * strides[d];
    i /= sizes[d];
  }
  return off;
}

// Offsets of consecutive linear indices of an index space, without a division per step.
class SpaceWalker {
 public:
  SpaceWalker(const Shape& sizes, const Shape& strides, int64_t start)
      : sizes_(sizes), strides_(strides), idx_(sizes.size()) {
    for (int64_t d = int64_t(sizes.size()) - 1; d >= 0; --d) {
      idx_[d] = start % sizes[d];
      start /= sizes[d];
      offset_ += idx_[d] * strides[d];
    }
  }
  int64_t offset() const { return offset_; }
  void next() {
    for (int64_t d = int64_t(sizes_.size()) - 1; d >= 0; --d) {
      offset_ += strides_[d];
      if (++idx_[d] < sizes_[d]) return;
      offset_ -= idx_[d] * strides_[d];
      idx_[d] = 0;
    }
  }

 private:
  const Shape& sizes_;
  const Shape& strides_;
  Shape idx_;
  int64_t offset_ = 0;
};

// Elements per chunk of a contiguous run; row blocks, column blocks and row sub-blocks of the
// column form.
constexpr int64_t kReduceChunk = 4096;
constexpr int64_t kColumnRowBlock = 256;
constexpr int64_t kColumnBlock = 256;
constexpr int64_t kColumnSubBlock = 16;

// Independent partial accumulators of a contiguous fold: four 512-bit vectors of them.
template <class Acc>
constexpr int kLanes = std::max<int>(4, int(256 / sizeof(Acc)));

// Merges lanes [0, 2W) into lane 0 as a tree; W is a compile-time constant so that every level
// is a fixed-size loop that vectorizes.
template <int W, class R, class Acc>
inline void merge_lanes(Acc* lane, const R& r) {
  if constexpr (W >= 1) {
    for (int j = 0; j < W; ++j) r.merge(lane[j], lane[j + W]);
    merge_lanes<W / 2>(lane, r);
  }
}

// Folds n <= kReduceChunk contiguous elements whose reduced-space indices start at i0.
template <class T, class R>
typename R::Acc fold_chunk(const T* x, int64_t n, int64_t i0, const R& r) {
  using Acc = typename R::Acc;
  constexpr int K = kLanes<Acc>;
  Acc lane[K];
  for (int j = 0; j < K; ++j) lane[j] = r.init();
  int64_t i = 0;
  for (; i + K <= n; i += K) {
#pragma omp simd
    for (int j = 0; j < K; ++j) r.step(lane[j], load_compute(x[i + j]), i0 + i + j);
  }
  for (int j = 0; i < n; ++i, ++j) r.step(lane[j], load_compute(x[i]), i0 + i);
  merge_lanes<K / 2>(lane, r);
  return lane[0];
}

// Merges parts [lo, hi) as a balanced tree: the shape in which fold_run merges its chunks.
template <class R>
typename R::Acc merge_tree(const typename R::Acc* parts, int64_t lo, int64_t hi, const R& r) {
  if (hi - lo == 1) return parts[lo];
  const int64_t mid = lo + (hi - lo) / 2;
  typename R::Acc acc = merge_tree(parts, lo, mid, r);
  r.merge(acc, merge_tree(parts, mid, hi, r));
  return acc;
}

// Folds chunks [lo, hi) of a contiguous run of n elements, merging them as a balanced tree so
// that rounding errors grow with the log of the chunk count, not the count.
template <class T, class R>
typename R::Acc fold_chunks(const T* x, int64_t n, int64_t lo, int64_t hi, const R& r) {
  if (hi - lo == 1) {
    const int64_t c = lo * kReduceChunk;
    return fold_chunk(x + c, std::min(kReduceChunk, n - c), c, r);
  }
  const int64_t mid = lo + (hi - lo) / 2;
  typename R::Acc acc = fold_chunks(x, n, lo, mid, r);
  r.merge(acc, fold_chunks(x, n, mid, hi, r));
  return acc;
}

// Folds a contiguous run of any length. Runs shorter than the lanes fold in one accumulator:
// setting up and merging the lanes would cost more than the run.
template <class T, class R>
typename R::Acc fold_run(const T* x, int64_t n, const R& r) {
  if (n < kLanes<typename R::Acc>) {
    typename R::Acc acc = r.init();
    for (int64_t i = 0; i < n; ++i) r.step(acc, load_compute(x[i]), i);
    return acc;
  }
  return fold_chunks(x, n, 0, (n + kReduceChunk - 1) / kReduceChunk, r);
}

inline bool use_threads(int64_t work) {
  return work >= kParallelGrain && omp_get_max_threads() > 1 && !omp_in_parallel();
}

template <class T, class MakeR, class Finish>
void reduce_row_form(const T* base, const ReducePlan& p, const MakeR& make, const Finish& finish) {
  using R = decltype(make(int64_t(0)));
  using Acc = typename R::Acc;
  const int64_t rows = p.outer_numel, n = p.inner_numel;
  const int64_t nchunks = (n + kReduceChunk - 1) / kReduceChunk;
  const bool threads = use_threads(rows * n);
  if (threads && nchunks > 1 && rows < 4 * omp_get_max_threads()) {
    // Few long rows: threads take chunks; each row's chunk results then merge in fold_run's tree.
    std::vector<Acc> part(size_t(rows * nchunks));
#pragma omp parallel for schedule(static)
    for (int64_t t = 0; t < rows * nchunks; ++t) {
      int64_t r = t / nchunks, c = (t % nchunks) * kReduceChunk;
      const T* row = base + space_offset(r, p.outer_sizes, p.outer_strides);
      part[size_t(t)] = fold_chunk(row + c, std::min(kReduceChunk, n - c), c, make(r));
    }
    for (int64_t r = 0; r < rows; ++r)
      finish(r, merge_tree(part.data() + r * nchunks, 0, nchunks, make(r)), n);
    return;
  }
#pragma omp parallel for schedule(static) if (threads && rows > 1)
  for (int64_t r = 0; r < rows; ++r) {
    const T* row = base + space_offset(r, p.outer_sizes, p.outer_strides);
    finish(r, fold_run(row, n, make(r)), n);
  }
}

template <class T, class MakeR, class Finish>
void reduce_column_form(const T* base, const ReducePlan& p, const MakeR& make,
                        const Finish& finish) {
  using R = decltype(make(int64_t(0)));
  using Acc = typename R::Acc;
  const int64_t cols = p.outer_sizes.back();
  const Shape rest_sizes(p.outer_sizes.begin(), p.outer_sizes.end() - 1);
  const Shape rest_strides(p.outer_strides.begin(), p.outer_strides.end() - 1);
  const int64_t groups = p.outer_numel / cols, rows = p.inner_numel;
  const int64_t nrb = (rows + kColumnRowBlock - 1) / kColumnRowBlock;
  const int64_t ncb = (cols + kColumnBlock - 1) / kColumnBlock;
  // Partials of every row block (only when there are several), merged pairwise below.
  std::vector<Acc> part(size_t(nrb > 1 ? groups * nrb * cols : 0));
  const bool threads = use_threads(p.outer_numel * rows);

#pragma omp parallel for schedule(static) if (threads)
  for (int64_t t = 0; t < groups * ncb * nrb; ++t) {
    const int64_t g = t / (ncb * nrb), cb = t / nrb % ncb, rb = t % nrb;
    const int64_t c0 = cb * kColumnBlock, w = std::min(kColumnBlock, cols - c0);
    const int64_t r0 = rb * kColumnRowBlock, r1 = std::min(rows, r0 + kColumnRowBlock);
    const int64_t o0 = g * cols + c0;
    const T* gbase = base + space_offset(g, rest_sizes, rest_strides) + c0;
    // Runs of kColumnSubBlock rows fold into `sub`, which then merges into `acc`: a cascade
    // that keeps the error of a block to a few dozen roundings.
    Acc acc[kColumnBlock], sub[kColumnBlock];
    for (int64_t j = 0; j < w; ++j) acc[j] = make(o0 + j).init();
    SpaceWalker walk(p.inner_sizes, p.inner_strides, r0);
    for (int64_t r = r0; r < r1;) {
      for (int64_t j = 0; j < w; ++j) sub[j] = make(o0 + j).init();
      for (const int64_t end = std::min(r1, r + kColumnSubBlock); r < end; ++r, walk.next()) {
        const T* x = gbase + walk.offset();
#pragma omp simd
        for (int64_t j = 0; j < w; ++j) make(o0 + j).step(sub[j], load_compute(x[j]), r);
      }
#pragma omp simd
      for (int64_t j = 0; j < w; ++j) make(o0 + j).merge(acc[j], sub[j]);
    }
    if (nrb == 1) {
      for (int64_t j = 0; j < w; ++j) finish(o0 + j, acc[j], rows);
    } else {
      std::copy(acc, acc + w, part.begin() + (g * nrb + rb) * cols + c0);
    }
  }
  if (nrb == 1) return;
#pragma omp parallel for schedule(static) if (threads)
  for (int64_t t = 0; t < groups * ncb; ++t) {
    const int64_t g = t / ncb, c0 = t % ncb * kColumnBlock, w = std::min(kColumnBlock, cols - c0);
    const int64_t o0 = g * cols + c0;
    // Pairwise over the row blocks, level by level, each level vectorized along the columns.
    Acc* first = part.data() + g * nrb * cols + c0;
    for (int64_t step = 1; step < nrb; step *= 2) {
      for (int64_t rb = 0; rb + step < nrb; rb += 2 * step) {
        Acc* dst = first + rb * cols;
        const Acc* src = first + (rb + step) * cols;
#pragma omp simd
        for (int64_t j = 0; j < w; ++j) make(o0 + j).merge(dst[j], src[j]);
      }
    }
    const Acc* acc = first;
    for (int64_t j = 0; j < w; ++j) finish(o0 + j, acc[j], rows);
  }
}

// Runs a reduction over a prepared source: out[o] = finish(o, fold of make(o) over o's elements).
template <class T, class MakeR, class Finish>
void run_reduce(const ReduceSource& src, const MakeR& make, const Finish& finish) {
  const ReducePlan& p = src.plan;
  if (p.outer_numel == 0) return;
  if (p.inner_numel == 0) {
    for (int64_t o = 0; o < p.outer_numel; ++o) finish(o, make(o).init(), int64_t(0));
    return;
  }
  const T* base = static_cast<const T*>(src.data.impl()->data());
  if (p.row_form())
    reduce_row_form(base, p, make, finish);
  else
    reduce_column_form(base, p, make, finish);
}

// One-pass form: prepares the source and runs.
template <class T, class MakeR, class Finish>
void reduce(const Tensor& in, const Shape& dims, const MakeR& make, const Finish& finish) {
  run_reduce<T>(prepare_reduce(in, dims), make, finish);
}

}  // namespace ember::cpu
