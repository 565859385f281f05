// The multi-tensor kernels of kernels/multi_tensor.h. A launch takes up to kListSize tensors;
// its blocks are spread over them in chunks of kChunk elements (a block finds its tensor by a
// search over the per-tensor first-block table), so the whole list is one launch however
// different the sizes are. Arithmetic uses the explicitly rounded intrinsics (__fmul_rn ...),
// which the compiler may not fuse into FMAs: the results are bit for bit those of the eager
// ops, one rounding per operation.
#include <algorithm>
#include <vector>

#include "core/make_tensor.h"
#include "kernels/cuda/elementwise.cuh"
#include "kernels/cuda/row_registers.cuh"  // Pack
#include "kernels/cuda/runtime.h"
#include "kernels/multi_tensor.h"

namespace ember::multi_tensor {

namespace {

using cuda::Pack;
using cuda::detail::check;
using cuda::detail::stream;
using cuda::detail::use_device;

constexpr int kListSize = 64;  // tensors a launch (the argument block stays under 4 KB)
constexpr int kThreads = 256;
constexpr int64_t kChunk = 4096;  // elements a block

// The tensors of one launch: up to four pointers an entry, their length, and the first
// block of each (blocks[count] is the launch's total).
struct List {
  float* ptr[4][kListSize];
  int64_t numel[kListSize];
  float decay[kListSize];
  int64_t first_block[kListSize + 1];
  int count;
};

// A whole chunk whose tensors all start on their packs' alignment goes as kPacks packs of four
// elements a thread, every load issued before any result is stored (several loads in flight a
// thread, where an element at a time waits a round of memory latency each): the packed path.
// Pack k of thread t holds elements 4 (t + k kThreads) .. + 3 of the chunk.
constexpr int kPacks = int(kChunk) / (4 * kThreads);
static_assert(kPacks * 4 * kThreads == kChunk, "a chunk is whole packs a thread");
template <class T>
__device__ __forceinline__ bool pack_aligned(const T* p) {
  return reinterpret_cast<uintptr_t>(p) % sizeof(Pack<T, 4>) == 0;
}
__device__ __forceinline__ int64_t pack_at(int k) {
  return 4 * (int64_t(threadIdx.x) + int64_t(k) * kThreads);
}
template <class T>
__device__ __forceinline__ Pack<T, 4> load_pack(const T* p, int k) {
  return *reinterpret_cast<const Pack<T, 4>*>(p + pack_at(k));
}
template <class T>
__device__ __forceinline__ void store_pack(T* p, int k, const Pack<T, 4>& v) {
  *reinterpret_cast<Pack<T, 4>*>(p + pack_at(k)) = v;
}

__device__ __forceinline__ int find_tensor(const List& l, int64_t block) {
  int lo = 0, hi = l.count - 1;
  while (lo < hi) {  // the last entry whose first block is <= block
    const int mid = (lo + hi + 1) / 2;
    if (l.first_block[mid] <= block) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

// Runs `launch(list, blocks)` over ts[*] in lists of kListSize (the pointers of operand k are
// operands[k][i]).
template <class Launch>
void for_lists(std::vector<std::span<const Tensor>> operands, std::span<const float> decay,
               Launch launch) {
  const size_t n = operands[0].size();
  for (size_t base = 0; base < n; base += kListSize) {
    List l{};
    int64_t blocks = 0;
    l.count = int(std::min<size_t>(kListSize, n - base));
    for (int i = 0; i < l.count; ++i) {
      for (size_t k = 0; k < operands.size(); ++k)
        l.ptr[k][i] = static_cast<float*>(operands[k][base + size_t(i)].impl()->data());
      l.numel[i] = operands[0][base + size_t(i)].numel();
      l.decay[i] = decay.empty() ? 1.0f : decay[base + size_t(i)];
      l.first_block[i] = blocks;
      blocks += (l.numel[i] + kChunk - 1) / kChunk;
    }
    l.first_block[l.count] = blocks;
    if (blocks > 0) launch(l, blocks);
  }
}

__global__ void adamw_kernel(List l, AdamWScalars s) {
  const int t = find_tensor(l, blockIdx.x);
  float *p = l.ptr[0][t], *g = l.ptr[1][t], *m = l.ptr[2][t], *v = l.ptr[3][t];
  const int64_t begin = (int64_t(blockIdx.x) - l.first_block[t]) * kChunk;
  const int64_t end = ::min(l.numel[t], begin + kChunk);
  const float decay = l.decay[t];
  auto update = [&](float& pi, float gi, float& mi, float& vi) {
    pi = __fmul_rn(pi, decay);
    mi = __fadd_rn(__fmul_rn(mi, s.beta1), __fmul_rn(gi, s.one_minus_beta1));
    vi = __fadd_rn(__fmul_rn(vi, s.beta2), __fmul_rn(__fmul_rn(gi, gi), s.one_minus_beta2));
    const float denom = __fadd_rn(__fsqrt_rn(__fdiv_rn(vi, s.bias_correction2)), s.eps);
    pi = __fsub_rn(pi, __fmul_rn(__fdiv_rn(mi, denom), s.step_size));
  };
  if (end - begin == kChunk && pack_aligned(p) && pack_aligned(g) && pack_aligned(m) &&
      pack_aligned(v)) {
    Pack<float, 4> pp[kPacks], gg[kPacks], mm[kPacks], vv[kPacks];
#pragma unroll
    for (int k = 0; k < kPacks; ++k) {
      pp[k] = load_pack(p + begin, k);
      gg[k] = load_pack(g + begin, k);
      mm[k] = load_pack(m + begin, k);
      vv[k] = load_pack(v + begin, k);
    }
#pragma unroll
    for (int k = 0; k < kPacks; ++k) {
#pragma unroll
      for (int j = 0; j < 4; ++j) update(pp[k].v[j], gg[k].v[j], mm[k].v[j], vv[k].v[j]);
      store_pack(p + begin, k, pp[k]);
      store_pack(m + begin, k, mm[k]);
      store_pack(v + begin, k, vv[k]);
    }
    return;
  }
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    float pi = p[i], mi = m[i], vi = v[i];
    update(pi, g[i], mi, vi);
    p[i] = pi;
    m[i] = mi;
    v[i] = vi;
  }
}

__global__ void clip_kernel(List l, const double* sum_sq, double max_norm) {
  const double norm = sqrt(*sum_sq);
  if (!(isfinite(norm) && norm > max_norm && max_norm > 0)) return;
  const float coef = float(max_norm / (norm + 1e-6));
  const int t = find_tensor(l, blockIdx.x);
  float* x = l.ptr[0][t];
  const int64_t begin = (int64_t(blockIdx.x) - l.first_block[t]) * kChunk;
  const int64_t end = ::min(l.numel[t], begin + kChunk);
  if (end - begin == kChunk && pack_aligned(x)) {
    Pack<float, 4> xx[kPacks];
#pragma unroll
    for (int k = 0; k < kPacks; ++k) xx[k] = load_pack(x + begin, k);
#pragma unroll
    for (int k = 0; k < kPacks; ++k) {
#pragma unroll
      for (int j = 0; j < 4; ++j) xx[k].v[j] = __fmul_rn(xx[k].v[j], coef);
      store_pack(x + begin, k, xx[k]);
    }
    return;
  }
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) x[i] = __fmul_rn(x[i], coef);
}

// Each block's sum of squares into partial[first + block], in float64.
__global__ void squares_kernel(List l, double* partial) {
  const int t = find_tensor(l, blockIdx.x);
  const float* x = l.ptr[0][t];
  const int64_t begin = (int64_t(blockIdx.x) - l.first_block[t]) * kChunk;
  const int64_t end = ::min(l.numel[t], begin + kChunk);
  double acc = 0;
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    const double xi = x[i];
    acc += xi * xi;
  }
  __shared__ double warp_sums[kThreads / 32];
  for (int o = 16; o > 0; o /= 2) acc += __shfl_down_sync(0xffffffffu, acc, o);
  if (threadIdx.x % 32 == 0) warp_sums[threadIdx.x / 32] = acc;
  __syncthreads();
  if (threadIdx.x == 0) {
    double total = 0;
    for (int w = 0; w < kThreads / 32; ++w) total += warp_sums[w];
    partial[blockIdx.x] = total;
  }
}

// out = the sum of n partials, by one block (a fixed order: the same result every run).
__global__ void sum_partials_kernel(const double* partial, int64_t n, double* out) {
  __shared__ double sums[kThreads];
  double acc = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) acc += partial[i];
  sums[threadIdx.x] = acc;
  __syncthreads();
  for (int w = kThreads / 2; w > 0; w /= 2) {
    if (int(threadIdx.x) < w) sums[threadIdx.x] += sums[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0) *out = sums[0];
}

template <class S, class D>
__global__ void cast_kernel(List l) {
  const int t = find_tensor(l, blockIdx.x);
  const S* x = reinterpret_cast<const S*>(l.ptr[0][t]);
  D* y = reinterpret_cast<D*>(l.ptr[1][t]);
  const int64_t begin = (int64_t(blockIdx.x) - l.first_block[t]) * kChunk;
  const int64_t end = ::min(l.numel[t], begin + kChunk);
  if (end - begin == kChunk && pack_aligned(x) && pack_aligned(y)) {
    Pack<S, 4> xx[kPacks];
#pragma unroll
    for (int k = 0; k < kPacks; ++k) xx[k] = load_pack(x + begin, k);
#pragma unroll
    for (int k = 0; k < kPacks; ++k) {
      Pack<D, 4> yy;
#pragma unroll
      for (int j = 0; j < 4; ++j) cuda::store(&yy.v[j], cuda::load(&xx[k].v[j]));
      store_pack(y + begin, k, yy);
    }
    return;
  }
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) cuda::store(y + i, cuda::load(x + i));
}

int device_of(std::span<const Tensor> ts) { return ts[0].device().index; }

}  // namespace

bool takes(std::span<const Tensor> ts) {
  if (ts.empty() || !ts[0].defined() || ts[0].device().type != DeviceType::CUDA) return false;
  for (const Tensor& t : ts)
    if (!t.defined() || t.device() != ts[0].device() || t.dtype() != DType::Float32 ||
        !t.is_contiguous())
      return false;
  return true;
}

Tensor sum_of_squares(std::span<const Tensor> ts) {
  EMBER_CHECK(takes(ts), "multi_tensor::sum_of_squares: needs contiguous float32 tensors on one "
                         "CUDA device");
  const int dev = device_of(ts);
  int64_t blocks = 0;
  for (const Tensor& t : ts) blocks += (t.numel() + kChunk - 1) / kChunk;
  Tensor partial = make_tensor({std::max<int64_t>(blocks, 1)}, DType::Float64, ts[0].device());
  Tensor out = make_tensor({}, DType::Float64, ts[0].device());
  auto* pp = static_cast<double*>(partial.impl()->data());
  use_device(dev);
  int64_t done = 0;
  for_lists({ts}, {}, [&](const List& l, int64_t nb) {
    squares_kernel<<<unsigned(nb), kThreads, 0, stream(dev)>>>(l, pp + done);
    done += nb;
  });
  sum_partials_kernel<<<1, kThreads, 0, stream(dev)>>>(pp, done,
                                                       static_cast<double*>(out.impl()->data()));
  check(cudaGetLastError(), "multi_tensor::sum_of_squares");
  return out;
}

void clip_(std::span<const Tensor> ts, const Tensor& sum_sq, double max_norm) {
  EMBER_CHECK(takes(ts), "multi_tensor::clip_: needs contiguous float32 tensors on one CUDA "
                         "device");
  EMBER_CHECK(sum_sq.defined() && sum_sq.numel() == 1 && sum_sq.dtype() == DType::Float64 &&
                  sum_sq.device() == ts[0].device(),
              "multi_tensor::clip_: the sum of squares must be one float64 on ",
              ts[0].device().str());
  const int dev = device_of(ts);
  use_device(dev);
  const auto* sp = static_cast<const double*>(sum_sq.impl()->data());
  for_lists({ts}, {}, [&](const List& l, int64_t nb) {
    clip_kernel<<<unsigned(nb), kThreads, 0, stream(dev)>>>(l, sp, max_norm);
  });
  check(cudaGetLastError(), "multi_tensor::clip_");
}

void adamw_step(std::span<const Tensor> p, std::span<const Tensor> g, std::span<const Tensor> m,
                std::span<const Tensor> v, std::span<const float> decay, const AdamWScalars& s) {
  EMBER_CHECK(g.size() == p.size() && m.size() == p.size() && v.size() == p.size() &&
                  decay.size() == p.size(),
              "multi_tensor::adamw_step: ", p.size(), " parameters but ", g.size(), " grads, ",
              m.size(), " and ", v.size(), " moments, ", decay.size(), " decays");
  for (auto list : {p, g, m, v})
    EMBER_CHECK(takes(list) && list[0].device() == p[0].device(),
                "multi_tensor::adamw_step: needs contiguous float32 tensors on one CUDA device");
  for (size_t i = 0; i < p.size(); ++i)
    EMBER_CHECK(g[i].numel() == p[i].numel() && m[i].numel() == p[i].numel() &&
                    v[i].numel() == p[i].numel(),
                "multi_tensor::adamw_step: parameter ", i, " of shape ", p[i].shape_str(),
                " has a grad or moment of another size");
  const int dev = device_of(p);
  use_device(dev);
  for_lists({p, g, m, v}, decay, [&](const List& l, int64_t nb) {
    adamw_kernel<<<unsigned(nb), kThreads, 0, stream(dev)>>>(l, s);
  });
  check(cudaGetLastError(), "multi_tensor::adamw_step");
}

void cast_(std::span<const Tensor> src, std::span<const Tensor> dst) {
  EMBER_CHECK(!src.empty() && src.size() == dst.size() && src[0].defined() && dst[0].defined(),
              "multi_tensor::cast_: needs as many destinations as sources (", src.size(),
              " sources, ", dst.size(), " destinations)");
  const DType from = src[0].dtype(), to = dst[0].dtype();
  auto half = [](DType t) { return t == DType::BFloat16 || t == DType::Float16; };
  EMBER_CHECK((from == DType::Float32 && half(to)) || (half(from) && to == DType::Float32),
              "multi_tensor::cast_: casts float32 to bfloat16 or float16 or back, not ",
              dtype_name(from), " to ", dtype_name(to));
  const Device dev = src[0].device();
  EMBER_CHECK(dev.type == DeviceType::CUDA, "multi_tensor::cast_: needs CUDA tensors");
  for (size_t i = 0; i < src.size(); ++i)
    EMBER_CHECK(src[i].defined() && src[i].dtype() == from && src[i].is_contiguous() &&
                    src[i].device() == dev && dst[i].defined() && dst[i].dtype() == to &&
                    dst[i].is_contiguous() && dst[i].device() == dev &&
                    dst[i].sizes() == src[i].sizes(),
                "multi_tensor::cast_: pair ", i, " is not a contiguous ", dtype_name(from),
                " tensor and a contiguous ", dtype_name(to), " tensor of its shape on ", dev.str());
  use_device(dev.index);
  const cudaStream_t s = stream(dev.index);
  for_lists({src, dst}, {}, [&](const List& l, int64_t nb) {
    const unsigned g = unsigned(nb);
    if (to == DType::BFloat16) cast_kernel<float, __nv_bfloat16><<<g, kThreads, 0, s>>>(l);
    else if (to == DType::Float16) cast_kernel<float, __half><<<g, kThreads, 0, s>>>(l);
    else if (from == DType::BFloat16) cast_kernel<__nv_bfloat16, float><<<g, kThreads, 0, s>>>(l);
    else cast_kernel<__half, float><<<g, kThreads, 0, s>>>(l);
  });
  check(cudaGetLastError(), "multi_tensor::cast_");
}

}  // namespace ember::multi_tensor
