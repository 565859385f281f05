// CUDA kernels of the gathers and scatters by index tensors (index_select, gather, index_add,
// scatter_add) and of slice_backward. One thread an element of the iteration space (the output
// for the gathers, src or the index for the scatters), grid-stride; its multi-index gives the
// offset of the tensor it addresses plainly and, with the dim's coordinate replaced by the
// index, the offset of the tensor it addresses through the index. Data operands are read and
// written through their strides (views need no copies); index tensors are made contiguous
// first. Scatters start from a copy of x and add with atomics, so several indices may name the
// same element (the order of the additions is not fixed, unlike on the CPU). An index outside
// [0, size) is recorded as a fault (fault.cuh) and its element skipped, as the CPU kernels
// reject it; negative indices are not wrapped, as there.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "core/make_tensor.h"
#include "kernels/cuda/elementwise.cuh"
#include "kernels/cuda/kernel_table.h"
#include "kernels/device_kernels.h"
#include "kernels/embedding_add.h"

namespace ember::cuda {

namespace {

using In = std::span<const Tensor>;
using Out = std::span<Tensor>;

constexpr int kThreads = 256;

// The iteration space and the strides of the two tensors addressed over it: `plain` at the
// multi-index itself, `indexed` with coordinate `dim` replaced by the index.
struct Space {
  int ndim = 0;
  int dim = 0;
  int64_t bound = 0;  // the size of dim in the indexed tensor: valid indices are [0, bound)
  int64_t sizes[kMaxDims] = {};
  int64_t plain[kMaxDims] = {};
  int64_t indexed[kMaxDims] = {};
};

// Blocks for n elements, grid-stride beyond (as elementwise.cuh caps them).
int blocks_for(int64_t n) {
  static const int max_blocks = [] {
    int sms = 0;
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
    return (sms > 0 ? sms : 80) * 32;
  }();
  const int64_t want = (n + kThreads - 1) / kThreads;
  return int(want < max_blocks ? want : max_blocks);
}

void check_rank(const Tensor& t, const char* op) {
  EMBER_CHECK(t.dim() <= kMaxDims, op, ": CUDA kernels take up to ", kMaxDims,
              " dims, got shape ", t.shape_str());
}

// Sizes of the iteration space, strides of the plain and the indexed tensor (same rank).
Space space_of(const Shape& sizes, const Tensor& plain, const Tensor& indexed, int64_t dim,
               int64_t bound) {
  Space s;
  s.ndim = int(sizes.size());
  s.dim = int(dim);
  s.bound = bound;
  for (int d = 0; d < s.ndim; ++d) {
    s.sizes[d] = sizes[size_t(d)];
    s.plain[d] = plain.strides()[size_t(d)];
    s.indexed[d] = indexed.strides()[size_t(d)];
  }
  return s;
}

template <class T>
__device__ __forceinline__ void atomic_add(T* p, T v) {
  if constexpr (std::is_same_v<T, int64_t>) {
    // Two's complement: unsigned wrap-around addition is signed addition.
    atomicAdd(reinterpret_cast<unsigned long long*>(p), static_cast<unsigned long long>(v));
  } else {
    atomicAdd(p, v);
  }
}

// kPerSlice: the index is 1-D and its entry at the dim's coordinate picks the slice
// (index_select, index_add); otherwise the index has the iteration space's shape and one entry
// per element (gather, scatter_add). kScatter: dst[indexed] += src[plain]; otherwise
// dst[plain] = src[indexed].
template <class T, class I, bool kPerSlice, bool kScatter>
__global__ void index_kernel(const T* src, T* dst, const I* idx, Space s, int64_t n,
                             Fault* slot, int32_t op) {
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    int64_t r = i, plain = 0, indexed = 0, at_dim = 0;
    for (int d = s.ndim - 1; d >= 0; --d) {
      const int64_t c = r % s.sizes[d];
      r /= s.sizes[d];
      plain += c * s.plain[d];
      if (d == s.dim) at_dim = c;
      else indexed += c * s.indexed[d];
    }
    const int64_t v = int64_t(idx[kPerSlice ? at_dim : i]);
    if (v < 0 || v >= s.bound) {
      report_fault(slot, FaultKind::IndexOutOfRange, op, v, s.bound, s.dim);
      continue;
    }
    indexed += v * s.indexed[s.dim];
    if constexpr (kScatter) atomic_add(dst + indexed, src[plain]);
    else dst[plain] = src[indexed];
  }
}

// Calls f.template operator()<I>() with the C++ type of an index tensor's dtype.
template <class F>
void visit_index(DType t, const char* op, F&& f) {
  switch (t) {
    case DType::Int64: return f.template operator()<int64_t>();
    case DType::Int32: return f.template operator()<int32_t>();
    default:
      EMBER_FAIL(op, ": index tensors must be int64 or int32, got ", dtype_name(t));
  }
}

// Calls f.template operator()<U>() with an unsigned type of the dtype's width, for kernels that
// only move elements (bool and every float width share one instantiation).
template <class F>
void visit_bits(DType t, F&& f) {
  switch (dtype_size(t)) {
    case 1: return f.template operator()<uint8_t>();
    case 2: return f.template operator()<uint16_t>();
    case 4: return f.template operator()<uint32_t>();
    default: return f.template operator()<uint64_t>();
  }
}

template <bool kPerSlice, bool kScatter, class T, class I>
void launch(const char* name, OpId op, const Tensor& src, const Tensor& dst, const Tensor& idx,
            const Space& s, int64_t n) {
  if (n == 0) return;
  const int device = dst.device().index;
  detail::use_device(device);
  Fault* slot = detail::fault_slot(device);
  index_kernel<T, I, kPerSlice, kScatter><<<blocks_for(n), kThreads, 0, detail::stream(device)>>>(
      static_cast<const T*>(src.impl()->data()), static_cast<T*>(dst.impl()->data()),
      static_cast<const I*>(idx.impl()->data()), s, n, slot, int32_t(op));
  detail::check(cudaGetLastError(), name);
}

// out[.., j, ..] = x[.., index[j], ..]
void index_select(In in, Out out, const Attrs& a) {
  const Tensor& x = in[0];
  const Tensor& o = out[0];
  check_rank(x, "index_select");
  if (o.numel() == 0) return;
  const Tensor idx = in[1].contiguous();
  const Space s = space_of(o.sizes(), o, x, a.dim, x.sizes()[size_t(a.dim)]);
  visit_index(idx.dtype(), "index_select", [&]<class I>() {
    visit_bits(x.dtype(), [&]<class U>() {
      launch<true, false, U, I>("index_select", OpId::index_select, x, o, idx, s, o.numel());
    });
  });
}

// out[p] = x[p with p[dim] = index[p]] over the index's shape.
void gather(In in, Out out, const Attrs& a) {
  const Tensor& x = in[0];
  const Tensor& o = out[0];
  check_rank(x, "gather");
  if (o.numel() == 0) return;
  const Tensor idx = in[1].contiguous();
  const Space s = space_of(idx.sizes(), o, x, a.dim, x.sizes()[size_t(a.dim)]);
  visit_index(idx.dtype(), "gather", [&]<class I>() {
    visit_bits(x.dtype(), [&]<class U>() {
      launch<false, false, U, I>("gather", OpId::gather, x, o, idx, s, idx.numel());
    });
  });
}

// Copies x into the output before the scatter adds into it (the CUDA clone kernel).
void copy_into(const Tensor& x, const Tensor& o) {
  Tensor src[1] = {x};
  Tensor dst[1] = {o};
  device_kernel(OpId::clone, o.device())(In(src, 1), Out(dst, 1), Attrs{});
}

// out = x, then out[.., index[j], ..] += src[.., j, ..]
void index_add(In in, Out out, const Attrs& a) {
  const Tensor& x = in[0];
  const Tensor& src = in[2];
  const Tensor& o = out[0];
  check_rank(x, "index_add");
  copy_into(x, o);
  if (src.numel() == 0) return;
  const Tensor idx = in[1].contiguous();
  const Space s = space_of(src.sizes(), src, o, a.dim, x.sizes()[size_t(a.dim)]);
  visit_index(idx.dtype(), "index_add", [&]<class I>() {
    visit<Kinds::Numeric>(o.dtype(), "index_add", [&]<class T>() {
      launch<true, true, T, I>("index_add", OpId::index_add, src, o, idx, s, src.numel());
    });
  });
}

// out = x, then out[p with p[dim] = index[p]] += src[p] over the index's shape.
void scatter_add(In in, Out out, const Attrs& a) {
  const Tensor& x = in[0];
  const Tensor& src = in[2];
  const Tensor& o = out[0];
  check_rank(x, "scatter_add");
  copy_into(x, o);
  if (in[1].numel() == 0) return;
  const Tensor idx = in[1].contiguous();
  const Space s = space_of(idx.sizes(), src, o, a.dim, x.sizes()[size_t(a.dim)]);
  visit_index(idx.dtype(), "scatter_add", [&]<class I>() {
    visit<Kinds::Numeric>(o.dtype(), "scatter_add", [&]<class T>() {
      launch<false, true, T, I>("scatter_add", OpId::scatter_add, src, o, idx, s, idx.numel());
    });
  });
}

// slice_backward: every output element is the grad's element when its coordinate along dim is
// start + k * step for a k < count, else zero. One pass, no separate zero fill. Index is
// int32_t when the sizes allow (64-bit division is the slow part of the index math).
template <class U, class Index>
__global__ void slice_backward_kernel(const U* g, U* o, Space s, Index start, Index step,
                                      Index count, Index n) {
  const Index stride = Index(gridDim.x) * blockDim.x;
  for (Index i = Index(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    Index r = i, at_dim = 0;
    int64_t plain = 0, indexed = 0;
    for (int d = s.ndim - 1; d >= 0; --d) {
      const Index size = Index(s.sizes[d]);
      const Index c = r % size;
      r /= size;
      plain += int64_t(c) * s.plain[d];
      if (d == s.dim) at_dim = c;
      else indexed += int64_t(c) * s.indexed[d];
    }
    const Index rel = at_dim - start;
    const Index k = step == 1 ? rel : rel / step;
    const bool inside = rel >= 0 && (step == 1 || rel % step == 0) && k < count;
    o[plain] = inside ? g[indexed + int64_t(k) * s.indexed[s.dim]] : U(0);
  }
}

void slice_backward(In in, Out out, const Attrs& a) {
  const Tensor& g = in[0];
  const Tensor& o = out[0];
  const int64_t n = o.numel();
  if (n == 0) return;
  check_rank(o, "slice_backward");
  EMBER_CHECK(g.dim() == o.dim(), "slice_backward: the grad of shape ", g.shape_str(),
              " does not have the rank of the input shape ", o.shape_str());
  EMBER_CHECK(a.step > 0, "slice_backward: the step must be positive, got ", a.step);
  const int64_t len = a.end - a.start;
  const int64_t count = len <= 0 ? 0 : (len + a.step - 1) / a.step;
  Space s = space_of(o.sizes(), o, g, a.dim, 0);
  // The grad fills the sliced region (o's sizes with count along dim); a grad of size 1 along a
  // dim is broadcast over it, as the copy the CPU kernel makes does.
  for (int d = 0; d < s.ndim; ++d) {
    const int64_t want = d == s.dim ? count : s.sizes[d], have = g.sizes()[size_t(d)];
    EMBER_CHECK(have == want || have == 1, "slice_backward: the grad of shape ", g.shape_str(),
                " does not fit the sliced region of ", o.shape_str(), " at dim ", d);
    if (have == 1) s.indexed[d] = 0;
  }
  const int device = o.device().index;
  detail::use_device(device);
  visit_bits(o.dtype(), [&]<class U>() {
    const U* gp = static_cast<const U*>(g.impl()->data());
    U* op = static_cast<U*>(o.impl()->data());
    const bool small = n < (int64_t(1) << 31) && a.start < (int64_t(1) << 31) &&
                       a.step < (int64_t(1) << 31);
    if (small)
      slice_backward_kernel<U, int32_t><<<blocks_for(n), kThreads, 0, detail::stream(device)>>>(
          gp, op, s, int32_t(a.start), int32_t(a.step), int32_t(count), int32_t(n));
    else
      slice_backward_kernel<U, int64_t><<<blocks_for(n), kThreads, 0, detail::stream(device)>>>(
          gp, op, s, a.start, a.step, count, n);
    detail::check(cudaGetLastError(), "slice_backward");
  });
}

}  // namespace

void register_index(KernelTable& t) {
  t[OpId::slice_backward] = slice_backward;
  t[OpId::index_select] = index_select;
  t[OpId::gather] = gather;
  t[OpId::index_add] = index_add;
  t[OpId::scatter_add] = scatter_add;
}

}  // namespace ember::cuda

namespace ember::embedding_add {

namespace {

// Thread i takes element i of out: row r = i / C gathers a's row a_index[r] and b's row
// b_index[r] (b_index[0] where b has one), summed in the compute type, rounded once.
template <class T, class I>
__global__ void embedding_add_kernel(const T* a, const I* ai, int64_t a_rows, const T* b,
                                     const I* bi, int64_t b_rows, bool b_one, T* out,
                                     int64_t n, int64_t C, cuda::Fault* slot) {
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    const int64_t r = i / C, c = i - r * C;
    const int64_t ja = int64_t(ai[r]), jb = int64_t(bi[b_one ? 0 : r]);
    if (ja < 0 || ja >= a_rows) {
      cuda::report_fault(slot, cuda::FaultKind::IndexOutOfRange, int32_t(OpId::index_select), ja,
                         a_rows, 0);
      continue;
    }
    if (jb < 0 || jb >= b_rows) {
      cuda::report_fault(slot, cuda::FaultKind::IndexOutOfRange, int32_t(OpId::index_select), jb,
                         b_rows, 0);
      continue;
    }
    cuda::store(out + i, cuda::load(a + ja * C + c) + cuda::load(b + jb * C + c));
  }
}

}  // namespace

bool run(const Tensor& a_weight, const Tensor& a_index, const Tensor& b_weight,
         const Tensor& b_index, Tensor& out) {
  const DType t = out.dtype();
  if (a_weight.dim() != 2 || b_weight.dim() != 2 || a_index.dim() != 1 || b_index.dim() != 1)
    return false;
  const int64_t C = a_weight.size(1);
  if (C < 1 || b_weight.size(1) != C || out.numel() != a_index.numel() * C ||
      (b_index.numel() != 1 && b_index.numel() != a_index.numel()) || a_weight.dtype() != t ||
      b_weight.dtype() != t || a_index.dtype() != b_index.dtype() ||
      (a_index.dtype() != DType::Int64 && a_index.dtype() != DType::Int32) ||
      !a_weight.is_contiguous() || !b_weight.is_contiguous() || !a_index.is_contiguous() ||
      !b_index.is_contiguous() || !out.is_contiguous() ||
      (t != DType::Float32 && t != DType::Float64 && t != DType::Float16 && t != DType::BFloat16))
    return false;
  const Device d = out.device();
  for (const Tensor* x : {&a_weight, &a_index, &b_weight, &b_index})
    if (x->device() != d) return false;
  const int64_t n = out.numel();
  if (n == 0) return true;
  const int device = d.index;
  cuda::detail::use_device(device);
  cuda::Fault* slot = cuda::detail::fault_slot(device);
  auto go = [&]<class T, class I>() {
    embedding_add_kernel<T, I><<<cuda::blocks_for(n), cuda::kThreads, 0,
                                 cuda::detail::stream(device)>>>(
        static_cast<const T*>(a_weight.impl()->data()),
        static_cast<const I*>(a_index.impl()->data()), a_weight.size(0),
        static_cast<const T*>(b_weight.impl()->data()),
        static_cast<const I*>(b_index.impl()->data()), b_weight.size(0), b_index.numel() == 1,
        static_cast<T*>(out.impl()->data()), n, C, slot);
  };
  auto with_index = [&]<class T>() {
    if (a_index.dtype() == DType::Int64) go.template operator()<T, int64_t>();
    else go.template operator()<T, int32_t>();
  };
  switch (t) {
    case DType::Float32: with_index.template operator()<float>(); break;
    case DType::Float64: with_index.template operator()<double>(); break;
    case DType::Float16: with_index.template operator()<__half>(); break;
    default: with_index.template operator()<__nv_bfloat16>(); break;
  }
  cuda::detail::check(cudaGetLastError(), "index_select + add (embeddings)");
  return true;
}

}  // namespace ember::embedding_add
