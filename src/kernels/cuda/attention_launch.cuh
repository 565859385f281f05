// Host side of the fused attention kernels: how tensors become kernel arguments (Operand,
// Problem), the dtype and head-size choices, and the launch through a runner, which is CUDA's
// launch in attention_fwd.cu / attention_bwd.cu and a host emulation in the kernels' test. A
// runner is called as run(kernel, blocks, shared_bytes, args, threads) (threads a block: 256
// unless given).
#pragma once
#include <algorithm>
#include <climits>
#include <mutex>
#include <optional>
#include <set>
#include <tuple>
#include <utility>
#include <vector>

#include "ember/error.h"
#include "ember/tensor.h"
#include "kernels/cuda/attention_tiles.cuh"
#include "ops/attrs.h"

namespace ember::cuda::attn {

// Calls f.template operator()<T, C>() with the storage type of `t` and the type computed in:
// float for float32 and the 16-bit types, double for float64.
template <class F>
void visit_dtype(DType t, const char* op, F&& f) {
  switch (t) {
    case DType::Float32:
      f.template operator()<float, float>();
      return;
    case DType::Float64:
      f.template operator()<double, double>();
      return;
    case DType::Float16:
      f.template operator()<__half, float>();
      return;
    case DType::BFloat16:
      f.template operator()<__nv_bfloat16, float>();
      return;
    default:
      EMBER_FAIL(op, ": the CUDA kernels take float32, float64, float16 and bfloat16, got ",
                 dtype_name(t));
  }
}

// kD, the padded head size of the tiles: 64 or 128 (the larger of E and F decides).
inline int head_tile(int64_t E, int64_t F, const char* op) {
  const int64_t h = std::max(E, F);
  EMBER_CHECK(h <= 128, op, ": the CUDA kernels take head sizes up to 128, got E = ", E,
              " (q and k) and F = ", F,
              " (v); scaled_dot_product_attention runs larger heads through its math path");
  return h <= 64 ? 64 : 128;
}

// A tensor the kernels can read: contiguous cols (copied only when they are not), and its batch
// dims merged where their strides allow, at most kMaxBatchDims of them (else a contiguous copy).
template <class T>
struct Readable {
  Tensor tensor;  // keeps a copy alive until the kernels are queued
  Operand<T> operand;
};

template <class T>
std::optional<Operand<T>> operand_of(const Tensor& t) {
  std::vector<std::pair<int64_t, int64_t>> dims;  // (size, stride), outermost first
  for (int64_t d = 0; d + 2 < t.dim(); ++d) {
    const int64_t size = t.size(d), stride = t.stride(d);
    if (size == 1) continue;
    if (!dims.empty() && dims.back().second == stride * size) {
      dims.back().first *= size;
      dims.back().second = stride;
    } else {
      dims.emplace_back(size, stride);
    }
  }
  if (dims.size() > size_t(kMaxBatchDims)) return std::nullopt;
  Operand<T> o;
  o.data = static_cast<const T*>(t.impl()->data());
  o.row_stride = t.stride(-2);
  o.nbatch = int(dims.size());
  for (size_t d = 0; d < dims.size(); ++d) {
    o.batch_sizes[d] = dims[d].first;
    o.batch_strides[d] = dims[d].second;
  }
  return o;
}

template <class T>
Readable<T> readable(const Tensor& t) {
  Tensor x = t.size(-1) <= 1 || t.stride(-1) == 1 ? t : t.contiguous();
  if (auto o = operand_of<T>(x)) return {x, *o};
  x = x.contiguous();
  return {x, *operand_of<T>(x)};
}

// Whether 16-byte loads of rows of `cols` elements are aligned for every row of o.
template <class T>
bool vec_loadable(const Operand<T>& o, int64_t cols) {
  constexpr int64_t W = 16 / int64_t(sizeof(T));
  if (reinterpret_cast<uintptr_t>(o.data) % 16 != 0 || cols % W != 0 || o.row_stride % W != 0)
    return false;
  for (int d = 0; d < o.nbatch; ++d)
    if (o.batch_strides[d] % W != 0) return false;
  return true;
}

// p's dropout from the op's attrs and its rng_state input `rng` (nullptr: the draws are the
// attrs').
template <class C>
void set_dropout(Problem<C>& p, const Attrs& a, const Tensor* rng, const char* op) {
  p.dropout = a.value > 0;
  if (!p.dropout) return;
  EMBER_CHECK(a.offset % 4 == 0, op, ": the random offset ", a.offset,
              " must start a Philox block (a multiple of 4)");
  p.seed = a.seed;
  p.base_block = a.offset / 4;
  if (rng) {
    EMBER_CHECK(rng->dtype() == DType::Int64 && rng->numel() == 2 && rng->is_contiguous(), op,
                ": the draws' tensor must be an rng_state (int64 [2]), got ",
                dtype_name(rng->dtype()), " ", rng->shape_str());
    p.rng = static_cast<const int64_t*>(rng->impl()->data());
  }
  p.threshold = philox::bernoulli_threshold(1 - a.value);
  p.inv_keep = C(1 / (1 - a.value));
}

// The problem of q [..., L, E], k [..., S, E], v [..., S, F] (equal batch dims), the op's attrs
// and its rng_state input `rng` (nullptr: the draws are the attrs').
template <class C>
Problem<C> problem_of(const Tensor& q, const Tensor& k, const Tensor& v, const Attrs& a,
                      const Tensor* rng, const char* op) {
  Problem<C> p;
  p.L = q.size(-2);
  p.S = k.size(-2);
  p.E = int(q.size(-1));
  p.F = int(v.size(-1));
  p.batch = 1;
  for (int64_t d = 0; d + 2 < q.dim(); ++d) p.batch *= q.size(d);
  p.scale = C(a.value2);
  p.causal = a.flag;
  set_dropout(p, a, rng, op);
  return p;
}

// The kernels' arguments: the forward's, and the backward's (which all three of its kernels read).
// Where a kernel writes the rows of a [batch, rows, cols] result: row r of batch entry b at
// data + (b / inner) * outer_stride + (b % inner) * inner_stride + r * row_stride (cols
// contiguous). Dense results have inner 1; the heads-inner layout's [B, H, L, F] view of a
// [B, L, H, F] tensor has inner H (kernels/attention_layout.h).
template <class T>
struct OutRows {
  T* data = nullptr;
  int64_t row_stride = 0, inner = 1, inner_stride = 0, outer_stride = 0;
  EMBER_ATTN_DEVICE T* at(int64_t b, int64_t row) const {
    return data + (b / inner) * outer_stride + (b % inner) * inner_stride + row * row_stride;
  }
};

// t's rows as OutRows: t contiguous, or 4-dim with unit stride along its last dim; else nullopt.
template <class T>
std::optional<OutRows<T>> out_rows(const Tensor& t) {
  OutRows<T> o;
  o.data = static_cast<T*>(t.impl()->data());
  if (t.is_contiguous()) {
    o.row_stride = t.size(-1);
    o.outer_stride = t.size(-2) * t.size(-1);
    return o;
  }
  if (t.dim() != 4 || t.stride(3) != 1) return std::nullopt;
  o.row_stride = t.stride(2);
  o.inner = t.size(1);
  o.inner_stride = t.stride(1);
  o.outer_stride = t.stride(0);
  return o;
}

template <class T, class C>
struct ForwardArgs {
  Operand<T> q, k, v;
  OutRows<T> out;    // [batch, L, F]
  C* lse = nullptr;  // [batch, L], contiguous
  Problem<C> p;
  // Dropout's keep flags, drawn by the tensor-core kernels' first launch for the forward after
  // it (attention_mma_keep.cuh), or drawn ahead (keep_drawn: the op's attention_keep input);
  // null on the other kernels.
  uint32_t* keep_bits = nullptr;
  bool keep_drawn = false;
};
template <class T, class C>
struct BackwardArgs {
  Operand<T> q, k, v, go;
  const C* lse = nullptr;                         // [batch, L], contiguous
  const C* d = nullptr;                           // [batch, L], contiguous
  OutRows<T> dq, dk, dv;  // [batch, L, E], [batch, S, E], [batch, S, F]
  Problem<C> p;
  // Dropout's keep flags for the tensor-core kernels (attention_mma_keep.cuh): the query-major
  // words of every tile, then the key-major ones, drawn by their first launch or drawn ahead
  // (keep_drawn); null on the other kernels.
  uint32_t* keep_bits = nullptr;
  bool keep_drawn = false;
};

// Blocks of a grid over `batch` entries times `tiles` tiles; gridDim.x holds up to INT_MAX.
inline int64_t grid_blocks(int64_t batch, int64_t tiles, const char* op) {
  EMBER_CHECK(tiles == 0 || batch <= INT_MAX / tiles, op, ": ", batch, " batch entries of ", tiles,
              " tiles are more blocks than a CUDA grid holds");
  return batch * tiles;
}

}  // namespace ember::cuda::attn

#ifndef EMBER_CUDA_EMULATION
#include "kernels/cuda/runtime.h"

namespace ember::cuda::attn {

// Launches on the device's stream with the shared memory the kernel asks for: over 48 KiB needs
// the opt-in attribute, and more than the device offers a block is an error naming the op.
struct CudaRunner {
  const char* op;
  int device;
  cudaStream_t stream;

  template <class Args>
  void operator()(void (*kernel)(Args), int64_t blocks, size_t smem, const Args& args,
                  int threads = kThreads) const {
    int optin = 0;
    if (!detail::allow_shared(reinterpret_cast<const void*>(kernel), device, smem, op)) {
      detail::check(
          cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device), op);
      EMBER_CHECK(false, op, ": the kernel needs ", smem, " bytes of shared memory a block and device ",
                  device, " offers ", optin, "; use head sizes up to 64 or float32/16-bit inputs on it");
    }
    kernel<<<unsigned(blocks), unsigned(threads), smem, stream>>>(args);
    detail::check(cudaGetLastError(), op);
  }
};

// The runner for the device of `t`, made current.
inline CudaRunner cuda_runner(const Tensor& t, const char* op) {
  const int device = t.device().index;
  detail::use_device(device);
  return CudaRunner{op, device, detail::stream(device)};
}

}  // namespace ember::cuda::attn
#endif
