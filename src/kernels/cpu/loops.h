// The pointwise loop: out[i] = f(in0[i], in1[i], ...) over broadcast, strided operands.
// Dims are coalesced, contiguous inner rows run as plain vectorizable loops (with special
// cases for scalar-broadcast inputs), and large tensors are split across OpenMP threads.
#pragma once
#include <omp.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <array>
#include <cstring>
#include <span>
#include <tuple>
#include <utility>

#include "ember/tensor.h"
#include "kernels/cpu/dtype_visit.h"

namespace ember::cpu {

constexpr int kMaxLoopDims = 16;
constexpr int kMaxOperands = 5;
// Below this many elements a kernel stays on one thread: forking costs microseconds.
constexpr int64_t kParallelGrain = 32768;
// Outputs at least this large are written with streaming (non-temporal) stores: they will
// not be read back from cache soon, and skipping the read-for-ownership of every output line
// saves a third of the memory traffic of a binary op.
constexpr int64_t kStreamBytes = int64_t(16) << 20;

// Operand 0 is the output; the rest are inputs broadcast to its shape.
struct LoopPlan {
  int ndim = 0;  // coalesced, innermost first
  int nops = 0;
  int64_t size[kMaxLoopDims];
  int64_t stride[kMaxLoopDims][kMaxOperands];  // in bytes
  char* data[kMaxOperands];
  int64_t numel = 1;
};

LoopPlan make_loop_plan(const Tensor& out, std::span<const Tensor> ins);

// Runs body(ptrs, strides, n) over rows of the plan: ptrs[k] points at operand k's first
// element of the row, strides[k] is its step in bytes along the row.
template <class Body>
void for_each_row(const LoopPlan& p, Body&& body) {
  const int64_t n0 = p.size[0];
  const int64_t total = p.numel;
  auto run_range = [&](int64_t begin, int64_t end) {
    if (begin >= end) return;
    int64_t idx[kMaxLoopDims] = {0};
    int64_t rest = begin;
    for (int d = 0; d < p.ndim; ++d) {
      idx[d] = rest % p.size[d];
      rest /= p.size[d];
    }
    char* ptrs[kMaxOperands];
    int64_t inner[kMaxOperands];
    for (int k = 0; k < p.nops; ++k) inner[k] = p.stride[0][k];
    int64_t pos = begin;
    while (pos < end) {
      for (int k = 0; k < p.nops; ++k) {
        int64_t off = 0;
        for (int d = 0; d < p.ndim; ++d) off += idx[d] * p.stride[d][k];
        ptrs[k] = p.data[k] + off;
      }
      int64_t len = std::min(n0 - idx[0], end - pos);
      body(ptrs, inner, len);
      pos += len;
      idx[0] += len;
      for (int d = 0; d < p.ndim - 1 && idx[d] >= p.size[d]; ++d) {
        idx[d] = 0;
        idx[d + 1]++;
      }
    }
  };
  if (total < kParallelGrain || omp_get_max_threads() == 1 || omp_in_parallel()) {
    run_range(0, total);
    return;
  }
#pragma omp parallel
  {
    int nt = omp_get_num_threads(), t = omp_get_thread_num();
    int64_t chunk = (total + nt - 1) / nt;
    run_range(std::min(total, t * chunk), std::min(total, (t + 1) * chunk));
  }
}

namespace detail {
template <class T>
inline T load(const char* p) {
  return *reinterpret_cast<const T*>(p);
}

// Copies a 64-byte aligned block to 64-byte aligned memory, bypassing the cache.
inline void stream_block(void* dst, const void* src, size_t bytes) {
#if defined(__AVX__)
  for (size_t i = 0; i < bytes; i += 32)
    _mm256_stream_si256(reinterpret_cast<__m256i*>(static_cast<char*>(dst) + i),
                        _mm256_load_si256(reinterpret_cast<const __m256i*>(
                            static_cast<const char*>(src) + i)));
#elif defined(__x86_64__)
  for (size_t i = 0; i < bytes; i += 16)
    _mm_stream_si128(reinterpret_cast<__m128i*>(static_cast<char*>(dst) + i),
                     _mm_load_si128(reinterpret_cast<const __m128i*>(
                         static_cast<const char*>(src) + i)));
#else
  std::memcpy(dst, src, bytes);
#endif
}

inline void stream_fence() {
#if defined(__x86_64__)
  _mm_sfence();
#endif
}

// Inner loop with compile-time knowledge of which inputs are contiguous (bit set) and which
// are broadcast scalars (stride 0), so the common cases vectorize. The functor is taken by
// value: through a reference, its members (a fill value, clamp bounds) could alias the output
// and would be reloaded after every store, which stops vectorization.
template <class Out, class... In, class F, size_t... I>
inline void row_loop(char** ptrs, const int64_t* st, int64_t n, F f, std::index_sequence<I...>,
                     bool stream) {
  Out* o = reinterpret_cast<Out*>(ptrs[0]);
  constexpr size_t N = sizeof...(In);
  bool out_contig = st[0] == int64_t(sizeof(Out));
  bool contig = out_contig && ((st[I + 1] == int64_t(sizeof(In))) && ...);
  if (contig) {
    std::tuple<const In*...> in{reinterpret_cast<const In*>(ptrs[I + 1])...};
    int64_t i = 0;
    if constexpr (64 % sizeof(Out) == 0) {
      if (stream) {
        // Compute a block into L1, then stream it out.
        constexpr int64_t kBlock = 2048 / int64_t(sizeof(Out));
        alignas(64) Out buf[kBlock];
        for (; i < n && (reinterpret_cast<uintptr_t>(o + i) & 63); ++i)
          o[i] = Out(f(compute_t<In>(std::get<I>(in)[i])...));
        for (; i + kBlock <= n; i += kBlock) {
          for (int64_t j = 0; j < kBlock; ++j)
            buf[j] = Out(f(compute_t<In>(std::get<I>(in)[i + j])...));
          stream_block(o + i, buf, sizeof(buf));
        }
        stream_fence();
      }
    }
    for (; i < n; ++i)
      o[i] = Out(f(compute_t<In>(std::get<I>(in)[i])...));
    return;
  }
  if constexpr (N >= 1 && N <= 2) {
    // One operand broadcast along the row (x + scalar, scalar * x).
    bool scalar[N] = {(st[I + 1] == 0)...};
    bool rest_contig[N] = {(st[I + 1] == int64_t(sizeof(In)))...};
    if (out_contig) {
      if constexpr (N == 1) {
        if (scalar[0]) {
          auto v = f(compute_t<In>(load<In>(ptrs[1]))...);
          for (int64_t i = 0; i < n; ++i) o[i] = Out(v);
          return;
        }
      } else {
        using A = std::tuple_element_t<0, std::tuple<In...>>;
        using B = std::tuple_element_t<N - 1, std::tuple<In...>>;
        if (scalar[1] && rest_contig[0]) {
          const A* a = reinterpret_cast<const A*>(ptrs[1]);
          auto b = compute_t<B>(load<B>(ptrs[2]));
          for (int64_t i = 0; i < n; ++i) o[i] = Out(f(compute_t<A>(a[i]), b));
          return;
        }
        if (scalar[0] && rest_contig[1]) {
          auto a = compute_t<A>(load<A>(ptrs[1]));
          const B* b = reinterpret_cast<const B*>(ptrs[2]);
          for (int64_t i = 0; i < n; ++i) o[i] = Out(f(a, compute_t<B>(b[i])));
          return;
        }
      }
    }
  }
  char* op = ptrs[0];
  for (int64_t i = 0; i < n; ++i) {
    *reinterpret_cast<Out*>(op + i * st[0]) =
        Out(f(compute_t<In>(load<In>(ptrs[I + 1] + i * st[I + 1]))...));
  }
}
}  // namespace detail

// out = f(ins...) elementwise; Out and In... are the storage types of the operands.
template <class Out, class... In, class F>
void pointwise(const Tensor& out, std::span<const Tensor> ins, F f) {
  LoopPlan plan = make_loop_plan(out, ins);
  const bool stream = plan.numel * int64_t(sizeof(Out)) >= kStreamBytes;
  for_each_row(plan, [&](char** ptrs, const int64_t* st, int64_t n) {
    detail::row_loop<Out, In...>(ptrs, st, n, f, std::index_sequence_for<In...>{}, stream);
  });
}

}  // namespace ember::cpu
