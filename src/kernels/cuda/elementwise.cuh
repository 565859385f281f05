// Elementwise kernels on the GPU, grid-stride. When every operand is contiguous and as large as
// the output, the linear index is the offset itself and each thread takes 4 elements through
// 16-byte loads. Otherwise each operand's element is found from the output's linear index
// through the operand's own strides (0 along broadcast dims), so views and broadcasts cost index
// math, not copies: dims that every operand steps through as one are merged first, the index
// math runs in 32 bits when the tensor allows, and when every operand walks the inner dim
// contiguously or broadcasts along it a thread takes 4 of its elements (a bias add). Half types
// are loaded into float and rounded back on store (to nearest even, as on the CPU), so the
// functors of kernels/functors.h compute in the same types as the CPU kernels.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cuda/std/tuple>

#include <cstdint>
#include <span>
#include <type_traits>
#include <utility>

#include "ember/tensor.h"
#include "kernels/cuda/runtime.h"

namespace ember::cuda {

constexpr int kMaxDims = 8;

// Storage type -> compute type (what functors take).
template <class T> struct Compute { using type = T; };
template <> struct Compute<__half> { using type = float; };
template <> struct Compute<__nv_bfloat16> { using type = float; };
template <class T> using compute_t = typename Compute<T>::type;

template <class T>
__device__ __forceinline__ compute_t<T> load(const T* p) {
  if constexpr (std::is_same_v<T, __half>) return __half2float(*p);
  else if constexpr (std::is_same_v<T, __nv_bfloat16>) return __bfloat162float(*p);
  else return *p;
}
template <class T, class V>
__device__ __forceinline__ void store(T* p, V v) {
  if constexpr (std::is_same_v<T, __half>) *p = __float2half_rn(float(v));
  else if constexpr (std::is_same_v<T, __nv_bfloat16>) *p = __float2bfloat16_rn(float(v));
  else *p = T(v);
}

// Where every operand's elements are: operand 0 is the output. Dims are coalesced on the host
// (adjacent dims that every operand steps through as one are merged), so a bias add over
// [64, 256, 1536] indexes [16384, 1536].
template <int N>
struct Geometry {
  int ndim = 0;
  bool flat = true;
  int64_t sizes[kMaxDims] = {};
  int64_t strides[N + 1][kMaxDims] = {};
  char* data[N + 1] = {};
  bool unit_inner[N + 1] = {};  // operand k's innermost stride is 1 (else 0: broadcast)
};

// The contiguous case, kVec elements a thread at a time through aligned vector loads and
// stores (16 bytes for float32); the tail past the last whole vector is done element-wise.
constexpr int kVec = 4;
template <class T>
struct alignas(sizeof(T) * kVec) Vec {
  T v[kVec];
};

template <class Out, class F, class... In, size_t... K>
__device__ __forceinline__ void apply(const Geometry<sizeof...(In)>& g, const int64_t* off, F f,
                                      std::index_sequence<K...>) {
  store(reinterpret_cast<Out*>(g.data[0]) + off[0],
        f(load(reinterpret_cast<const In*>(g.data[K + 1]) + off[K + 1])...));
}

// kVec consecutive elements of an operand: a vector load where its inner stride is 1, else one
// element repeated (a dim broadcast along the inner one).
template <class T>
__device__ __forceinline__ Vec<T> load_vec(const T* p, bool unit) {
  if (unit) return *reinterpret_cast<const Vec<T>*>(p);
  Vec<T> v;
  const T x = *p;
#pragma unroll
  for (int j = 0; j < kVec; ++j) v.v[j] = x;
  return v;
}

// kVec outputs from vectors starting at off[k] of each operand.
template <class Out, class F, class... In, size_t... K>
__device__ __forceinline__ void apply_vec(const Geometry<sizeof...(In)>& g, const int64_t* off,
                                          F f, std::index_sequence<K...>) {
  const ::cuda::std::tuple<Vec<In>...> ins{
      load_vec(reinterpret_cast<const In*>(g.data[K + 1]) + off[K + 1], g.unit_inner[K + 1])...};
  Vec<Out> o;
#pragma unroll
  for (int j = 0; j < kVec; ++j) store(&o.v[j], f(load(&::cuda::std::get<K>(ins).v[j])...));
  *reinterpret_cast<Vec<Out>*>(reinterpret_cast<Out*>(g.data[0]) + off[0]) = o;
}

template <class Out, class F, class... In>
__global__ void elementwise_flat_kernel(int64_t n, Geometry<sizeof...(In)> g, F f) {
  constexpr int N = sizeof...(In);
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  const int64_t whole = n / kVec;
  const int64_t first = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  for (int64_t v = first; v < whole; v += step) {
    int64_t off[N + 1];
    for (int k = 0; k <= N; ++k) off[k] = v * kVec;
    apply_vec<Out, F, In...>(g, off, f, std::index_sequence_for<In...>{});
  }
  for (int64_t i = whole * kVec + first; i < n; i += step) {
    int64_t off[N + 1];
    for (int k = 0; k <= N; ++k) off[k] = i;
    apply<Out, F, In...>(g, off, f, std::index_sequence_for<In...>{});
  }
}

// Strided or broadcast operands: each element's offsets from its linear index through the
// (coalesced) sizes, in Index arithmetic (32-bit when the tensor allows: 64-bit division is
// the slow part). Vec: kVec elements of the inner dim a thread (its size a multiple of kVec,
// every operand's inner stride 1 or 0, vectors aligned).
template <class Out, class F, class Index, bool Vec, class... In>
__global__ void elementwise_strided_kernel(Index units, Geometry<sizeof...(In)> g, F f) {
  constexpr int N = sizeof...(In);
  const Index step = Index(gridDim.x) * blockDim.x;
  for (Index u = Index(blockIdx.x) * blockDim.x + threadIdx.x; u < units; u += step) {
    int64_t off[N + 1];
    for (int k = 0; k <= N; ++k) off[k] = 0;
    Index r = Vec ? u * Index(kVec) : u;
    for (int d = g.ndim - 1; d >= 0; --d) {
      const Index size = Index(g.sizes[d]);
      const Index c = r % size;
      r /= size;
      for (int k = 0; k <= N; ++k) off[k] += int64_t(c) * g.strides[k][d];
    }
    if constexpr (Vec) apply_vec<Out, F, In...>(g, off, f, std::index_sequence_for<In...>{});
    else apply<Out, F, In...>(g, off, f, std::index_sequence_for<In...>{});
  }
}

// Merges adjacent dims d-1, d that every operand steps through as one (stride[d-1] ==
// stride[d] * size[d]), and drops dims of size 1.
template <int N>
void coalesce(Geometry<N>& g) {
  int nd = 0;
  for (int d = 0; d < g.ndim; ++d) {
    if (g.sizes[d] == 1) continue;
    if (nd > 0) {
      bool merge = true;
      for (int k = 0; k <= N; ++k)
        merge = merge && g.strides[k][nd - 1] == g.strides[k][d] * g.sizes[d];
      if (merge) {
        g.sizes[nd - 1] *= g.sizes[d];
        for (int k = 0; k <= N; ++k) g.strides[k][nd - 1] = g.strides[k][d];
        continue;
      }
    }
    g.sizes[nd] = g.sizes[d];
    for (int k = 0; k <= N; ++k) g.strides[k][nd] = g.strides[k][d];
    ++nd;
  }
  g.ndim = nd;
}

// Launches f over out's elements on out's device; `in` broadcast to out's shape. Out and In...
// are storage types matching the tensors' dtypes (checked by the callers' dtype visit).
template <class Out, class... In, class F>
void elementwise(const char* op, const Tensor& out, std::span<const Tensor> in, F f) {
  constexpr int N = sizeof...(In);
  const int64_t n = out.numel();
  if (n == 0) return;
  EMBER_CHECK(out.dim() <= kMaxDims, op, ": CUDA kernels take up to ", kMaxDims,
              " dims, got shape ", out.shape_str());
  Geometry<N> g;
  g.ndim = int(out.dim());
  for (int d = 0; d < g.ndim; ++d) g.sizes[d] = out.sizes()[size_t(d)];
  auto place = [&](int k, const Tensor& t) {
    g.data[k] = static_cast<char*>(t.impl()->storage->data) +
                t.storage_offset() * int64_t(dtype_size(t.dtype()));
    const int lead = g.ndim - int(t.dim());
    for (int d = 0; d < int(t.dim()); ++d)
      g.strides[k][lead + d] = t.sizes()[size_t(d)] == 1 ? 0 : t.strides()[size_t(d)];
    g.flat = g.flat && t.is_contiguous() && t.numel() == n;
  };
  place(0, out);
  for (int k = 0; k < N; ++k) place(k + 1, in[size_t(k)]);
  const int device = out.device().index;
  detail::use_device(device);
  constexpr int kThreads = 256;
  static const int max_blocks = [] {
    int sms = 0;
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
    return (sms > 0 ? sms : 80) * 32;
  }();
  auto blocks_for = [](int64_t units) {
    const int64_t want = (units + kThreads - 1) / kThreads;
    return int(want < max_blocks ? want : max_blocks);
  };
  // Vector loads need every vector aligned: the base pointers, and (strided) every outer step.
  auto vec_aligned = [](const void* p, size_t bytes) {
    return reinterpret_cast<uintptr_t>(p) % bytes == 0;
  };
  const size_t elem_bytes[N + 1] = {sizeof(Out), sizeof(In)...};
  const cudaStream_t stream = detail::stream(device);
  if (g.flat) {
    bool aligned = true;
    for (int k = 0; k <= N; ++k) aligned = aligned && vec_aligned(g.data[k], elem_bytes[k] * kVec);
    if (aligned) {
      for (int k = 0; k <= N; ++k) g.unit_inner[k] = true;
      elementwise_flat_kernel<Out, F, In...><<<blocks_for(n / kVec + 1), kThreads, 0, stream>>>(n, g, f);
      detail::check(cudaGetLastError(), op);
      return;
    }
  }
  coalesce(g);
  if (g.ndim == 0) g.ndim = 1, g.sizes[0] = 1;  // every dim of size 1
  const int inner = g.ndim - 1;
  bool vec = g.sizes[inner] % kVec == 0 && g.strides[0][inner] == 1;
  for (int k = 0; k <= N && vec; ++k) {
    const int64_t si = g.strides[k][inner];
    g.unit_inner[k] = si == 1;
    vec = (si == 0 || si == 1) && vec_aligned(g.data[k], elem_bytes[k] * (si == 1 ? kVec : 1));
    for (int d = 0; d < inner && vec && si == 1; ++d) vec = g.strides[k][d] % kVec == 0;
  }
  const bool small = n < (int64_t(1) << 31);
  if (vec && small)
    elementwise_strided_kernel<Out, F, uint32_t, true, In...>
        <<<blocks_for(n / kVec), kThreads, 0, stream>>>(uint32_t(n / kVec), g, f);
  else if (vec)
    elementwise_strided_kernel<Out, F, int64_t, true, In...>
        <<<blocks_for(n / kVec), kThreads, 0, stream>>>(n / kVec, g, f);
  else if (small)
    elementwise_strided_kernel<Out, F, uint32_t, false, In...>
        <<<blocks_for(n), kThreads, 0, stream>>>(uint32_t(n), g, f);
  else
    elementwise_strided_kernel<Out, F, int64_t, false, In...>
        <<<blocks_for(n), kThreads, 0, stream>>>(n, g, f);
  detail::check(cudaGetLastError(), op);
}

// Calls f.template operator()<T>() with T the storage type of `dtype`; dtypes outside `K` are
// an error (and their kernels are never instantiated).
enum class Kinds { Float, Numeric, All };
template <Kinds K, class F>
void visit(DType dtype, const char* op, F&& f) {
  const bool is_float = dtype == DType::Float32 || dtype == DType::Float64 ||
                        dtype == DType::Float16 || dtype == DType::BFloat16;
  EMBER_CHECK(K == Kinds::All || (K == Kinds::Float ? is_float : dtype != DType::Bool), op,
              ": not supported for ", dtype_name(dtype), " tensors on CUDA");
  constexpr bool ints = K != Kinds::Float;
  switch (dtype) {
    case DType::Bool:
      if constexpr (K == Kinds::All) f.template operator()<bool>();
      return;
    case DType::Int32:
      if constexpr (ints) f.template operator()<int32_t>();
      return;
    case DType::Int64:
      if constexpr (ints) f.template operator()<int64_t>();
      return;
    case DType::Float16: return f.template operator()<__half>();
    case DType::BFloat16: return f.template operator()<__nv_bfloat16>();
    case DType::Float32: return f.template operator()<float>();
    case DType::Float64: return f.template operator()<double>();
  }
}

}  // namespace ember::cuda
