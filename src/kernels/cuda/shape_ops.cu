// CUDA kernels of cat, tril, triu and topk, mirroring the CPU kernels (kernels/cpu/cat.cpp,
// tri.cpp, topk.cpp). cat and tril/triu only move bits: one thread an element (grid-stride),
// typed by element size, each input read through its own strides. cat copies each input into
// its slab of the output along dim; tril/triu keep the elements on one side of a diagonal of the
// last two dims and write zero bits elsewhere. topk runs a block per lane along dim: round t
// takes the first entry, in topk's total order on (value, position), among those after the
// entry of round t - 1, by a block-wide selection; the order is the CPU's (NaN above every
// number, ties to the lower position), so values and indices match it exactly. The lane is
// cached in shared memory when it fits and read from global memory otherwise.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "kernels/cuda/elementwise.cuh"
#include "kernels/cuda/kernel_table.h"

namespace ember::cuda {

namespace {

constexpr int kThreads = 256;

int grid_for(int64_t work) {
  static const int max_blocks = [] {
    int sms = 0;
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
    return (sms > 0 ? sms : 80) * 32;
  }();
  const int64_t want = (work + kThreads - 1) / kThreads;
  return int(want < max_blocks ? want : max_blocks);
}

// Calls f.template operator()<U>() with U an unsigned type as wide as one element.
template <class F>
void visit_bits(DType dtype, F&& f) {
  switch (dtype_size(dtype)) {
    case 1: return f.template operator()<uint8_t>();
    case 2: return f.template operator()<uint16_t>();
    case 4: return f.template operator()<uint32_t>();
    default: return f.template operator()<uint64_t>();
  }
}

// Sizes of an index space and the strides of a tensor over it (elements).
struct Dims {
  int ndim = 0;
  int64_t sizes[kMaxDims] = {};
  int64_t strides[kMaxDims] = {};

  __device__ int64_t offset(int64_t i) const {
    int64_t off = 0;
    for (int d = ndim - 1; d >= 0; --d) {
      off += (i % sizes[d]) * strides[d];
      i /= sizes[d];
    }
    return off;
  }
};

// ---- cat ----

// Element i of the input (row-major over its sizes) goes to the same position of the output
// slab; both offsets come from the same multi-index.
template <class U>
__global__ void strided_copy_kernel(const U* src, U* dst, int64_t n, Dims from, Dims to) {
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    int64_t s = 0, o = 0, r = i;
    for (int d = from.ndim - 1; d >= 0; --d) {
      const int64_t c = r % from.sizes[d];
      r /= from.sizes[d];
      s += c * from.strides[d];
      o += c * to.strides[d];
    }
    dst[o] = src[s];
  }
}

void cat(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  const Tensor& o = out[0];
  const int64_t d = a.dim;
  if (o.numel() == 0) return;
  EMBER_CHECK(o.dim() <= kMaxDims, "cat: CUDA kernels take up to ", kMaxDims,
              " dims, got shape ", o.shape_str());
  const int device = o.device().index;
  detail::use_device(device);
  const int64_t esize = int64_t(dtype_size(o.dtype()));
  int64_t start = 0;
  for (const Tensor& t : in) {
    const int64_t len = t.sizes()[size_t(d)];
    const int64_t n = t.numel();
    if (n > 0) {
      Dims from, to;
      from.ndim = to.ndim = int(t.dim());
      for (int k = 0; k < from.ndim; ++k) {
        from.sizes[k] = to.sizes[k] = t.sizes()[size_t(k)];
        from.strides[k] = t.strides()[size_t(k)];
        to.strides[k] = o.strides()[size_t(k)];
      }
      const char* src = static_cast<const char*>(t.impl()->data());
      char* dst = static_cast<char*>(o.impl()->data()) + start * o.strides()[size_t(d)] * esize;
      visit_bits(o.dtype(), [&]<class U>() {
        strided_copy_kernel<U><<<grid_for(n), kThreads, 0, detail::stream(device)>>>(
            reinterpret_cast<const U*>(src), reinterpret_cast<U*>(dst), n, from, to);
      });
      detail::check(cudaGetLastError(), "cat");
    }
    start += len;
  }
}

// ---- tril / triu ----

// Output element q (contiguous) is row i, column j of matrix b. Row i keeps columns
// [keep_begin, keep_end): tril keeps j <= i + k, triu j >= i + k.
template <bool kLower, class U>
__global__ void tri_kernel(const U* x, U* out, int64_t n, int64_t rows, int64_t cols,
                           int64_t rs, int64_t cs, Dims batch, int64_t k) {
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t q = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; q < n; q += step) {
    const int64_t j = q % cols, r = q / cols;
    const int64_t i = r % rows, b = r / rows;
    int64_t edge = kLower ? i + k + 1 : i + k;
    edge = edge < 0 ? 0 : edge > cols ? cols : edge;
    const bool keep = kLower ? j < edge : j >= edge;
    out[q] = keep ? x[batch.offset(b) + i * rs + j * cs] : U(0);
  }
}

template <bool kLower>
void tri(const Tensor& x, Tensor& o, int64_t k, const char* op) {
  const int64_t n = o.numel();
  if (n == 0) return;
  const int64_t nd = x.dim();
  EMBER_CHECK(nd <= kMaxDims, op, ": CUDA kernels take up to ", kMaxDims, " dims, got shape ",
              x.shape_str());
  const int64_t rows = x.sizes()[size_t(nd - 2)], cols = x.sizes()[size_t(nd - 1)];
  Dims batch;
  batch.ndim = int(nd - 2);
  for (int d = 0; d < batch.ndim; ++d) {
    batch.sizes[d] = x.sizes()[size_t(d)];
    batch.strides[d] = x.strides()[size_t(d)];
  }
  const int device = x.device().index;
  detail::use_device(device);
  visit_bits(x.dtype(), [&]<class U>() {
    tri_kernel<kLower, U><<<grid_for(n), kThreads, 0, detail::stream(device)>>>(
        static_cast<const U*>(x.impl()->data()), static_cast<U*>(o.impl()->data()), n, rows,
        cols, x.strides()[size_t(nd - 2)], x.strides()[size_t(nd - 1)], batch, k);
  });
  detail::check(cudaGetLastError(), op);
}

void tril(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  tri<true>(in[0], out[0], a.start, "tril");
}
void triu(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  tri<false>(in[0], out[0], a.start, "triu");
}

// ---- topk ----

// x > y in the order topk ranks by: NaN above every number (as PyTorch ranks it).
template <class C>
__device__ __forceinline__ bool ranks_above(C x, C y) {
  if constexpr (std::is_floating_point_v<C>) {
    if (x != x) return y == y;
    if (y != y) return false;
  }
  return x > y;
}

// The total order of the CPU kernel on (value, position): with `largest`, higher ranks first,
// else lower; ties go to the lower position. Position -1 stands for no entry, after all others.
template <class C>
__device__ __forceinline__ bool before(C pv, int64_t pi, C qv, int64_t qi, bool largest) {
  if (qi < 0) return pi >= 0;
  if (pi < 0) return false;
  const C u = largest ? pv : qv, v = largest ? qv : pv;
  if (ranks_above(u, v)) return true;
  if (ranks_above(v, u)) return false;
  return pi < qi;
}

// The first entry of the block in the order; every thread gets it.
template <class C>
__device__ void block_first(C& v, int64_t& i, bool largest) {
  __shared__ C vals[32];
  __shared__ int64_t idxs[32];
  for (int s = 16; s > 0; s >>= 1) {
    const C v2 = __shfl_down_sync(0xffffffffu, v, s);
    const int64_t i2 = __shfl_down_sync(0xffffffffu, i, s);
    if (before(v2, i2, v, i, largest)) {
      v = v2;
      i = i2;
    }
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) {
    vals[warp] = v;
    idxs[warp] = i;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    const int warps = int((blockDim.x + 31) >> 5);
    for (int w = 1; w < warps; ++w)
      if (before(vals[w], idxs[w], v, i, largest)) {
        v = vals[w];
        i = idxs[w];
      }
    vals[0] = v;
    idxs[0] = i;
  }
  __syncthreads();
  v = vals[0];
  i = idxs[0];
  __syncthreads();  // vals and idxs are written again by the next call
}

// A block a lane (grid-stride). Lane l is position l of the dims other than `dim`, row-major;
// the output at rank t of lane l = (outer, inner) is ((outer * k) + t) * inner + inner_pos, as
// on the CPU. `cached`: the lane fits in the dynamic shared memory.
template <class T>
__global__ void topk_kernel(const T* x, T* values, int64_t* indices, int64_t lanes, int64_t n,
                            int64_t xs, Dims lane_dims, int64_t inner, int64_t k, bool largest,
                            bool cached) {
  using C = compute_t<T>;
  extern __shared__ __align__(16) unsigned char smem[];
  C* cache = reinterpret_cast<C*>(smem);
  for (int64_t l = blockIdx.x; l < lanes; l += gridDim.x) {
    const T* lane = x + lane_dims.offset(l);
    if (cached) {
      for (int64_t j = threadIdx.x; j < n; j += blockDim.x) cache[j] = C(load(lane + j * xs));
      __syncthreads();
    }
    const int64_t outer = l / inner, ipos = l % inner;
    C prev_v = C(0);
    int64_t prev_i = -1;
    for (int64_t t = 0; t < k; ++t) {
      // The first entry after the previous round's winner (all entries in round 0).
      C best_v = C(0);
      int64_t best_i = -1;
      for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
        const C v = cached ? cache[j] : C(load(lane + j * xs));
        if (t > 0 && !before(prev_v, prev_i, v, j, largest)) continue;
        if (before(v, j, best_v, best_i, largest)) {
          best_v = v;
          best_i = j;
        }
      }
      block_first(best_v, best_i, largest);
      if (threadIdx.x == 0) {
        const int64_t pos = (outer * k + t) * inner + ipos;
        store(values + pos, best_v);
        indices[pos] = best_i;
      }
      prev_v = best_v;
      prev_i = best_i;
    }
    if (cached) __syncthreads();  // the cache is refilled for the next lane
  }
}

void topk(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  const Tensor& x = in[0];
  const int64_t d = a.dim, k = a.start, nd = x.dim();
  const bool largest = a.flag;
  if (out[0].numel() == 0) return;  // k == 0 or no lanes
  EMBER_CHECK(nd <= kMaxDims, "topk: CUDA kernels take up to ", kMaxDims, " dims, got shape ",
              x.shape_str());
  const int64_t n = x.sizes()[size_t(d)];
  Dims lane_dims;
  int64_t lanes = 1, inner = 1;
  for (int64_t q = 0; q < nd; ++q) {
    if (q == d) continue;
    lane_dims.sizes[lane_dims.ndim] = x.sizes()[size_t(q)];
    lane_dims.strides[lane_dims.ndim++] = x.strides()[size_t(q)];
    lanes *= x.sizes()[size_t(q)];
    if (q > d) inner *= x.sizes()[size_t(q)];
  }
  const int64_t xs = x.strides()[size_t(d)];
  const int device = x.device().index;
  detail::use_device(device);
  visit<Kinds::Numeric>(x.dtype(), "topk", [&]<class T>() {
    using C = compute_t<T>;
    // 48 KiB of shared memory a block without opting in, block_first's arrays included.
    constexpr int64_t kCacheBytes = 40 * 1024;
    const bool cached = n * int64_t(sizeof(C)) <= kCacheBytes;
    const size_t shared = cached ? size_t(n) * sizeof(C) : 0;
    const int threads = n >= 4096 ? 512 : n >= 512 ? 256 : n >= 64 ? 128 : 32;
    const int blocks = int(lanes < 65535 ? lanes : 65535);
    topk_kernel<T><<<blocks, threads, shared, detail::stream(device)>>>(
        static_cast<const T*>(x.impl()->data()), static_cast<T*>(out[0].impl()->data()),
        static_cast<int64_t*>(out[1].impl()->data()), lanes, n, xs, lane_dims, inner, k, largest,
        cached);
    detail::check(cudaGetLastError(), "topk");
  });
}

}  // namespace

void register_shape_ops(KernelTable& t) {
  t[OpId::cat] = cat;
  t[OpId::tril] = tril;
  t[OpId::triu] = triu;
  t[OpId::topk] = topk;
}

}  // namespace ember::cuda
