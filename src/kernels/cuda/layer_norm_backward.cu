// CUDA layer_norm_backward: with xhat = (x - mean) * rstd and gw = g * w,
//   dx = rstd * (gw - mean(gw) - xhat * mean(gw * xhat))   (a warp a row, two passes over it)
//   dw = sum over rows of g * xhat, db = sum over rows of g (column partials, then a fold)
// in the compute type (float for float32 and the half types, double for float64). The column
// sums fold in a fixed order, so the grads are the same from run to run. Operands are made
// contiguous first. Aligned rows of up to 32 * 8 16-byte chunks (1024 float32, 2048 half) are
// held in registers, and one kernel computes dx and the column partials from a single read of g
// and x; other rows take a dx pass and a column pass, each reading 16 bytes at a time where
// aligned.
#include <algorithm>
#include <array>
#include <atomic>

#include "core/make_tensor.h"
#include "kernels/cuda/column_fold.cuh"
#include "kernels/cuda/elementwise.cuh"
#include "kernels/cuda/kernel_table.h"
#include "kernels/cuda/row_registers.cuh"
#include "kernels/layer_norm_grad.h"

namespace ember::cuda {

namespace {

template <class A>
__device__ __forceinline__ A warp_sum(A v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

template <class T, class C>
__global__ void dx_kernel(const T* g, const T* x, const C* mean, const C* rstd, const T* w, T* dx,
                          int64_t rows, int64_t n) {
  const int lane = threadIdx.x & 31;
  const int64_t warps = (int64_t(gridDim.x) * blockDim.x) >> 5;
  for (int64_t r = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) >> 5; r < rows; r += warps) {
    const T *gr = g + r * n, *xr = x + r * n;
    const C mu = mean[r], rs = rstd[r];
    C sum_gw = 0, sum_gwx = 0;
    for (int64_t i = lane; i < n; i += 32) {
      const C gw = C(load(gr + i)) * C(load(w + i));
      sum_gw += gw;
      sum_gwx += gw * ((C(load(xr + i)) - mu) * rs);
    }
    const C mean_gw = warp_sum(sum_gw) / C(n), mean_gwx = warp_sum(sum_gwx) / C(n);
    for (int64_t i = lane; i < n; i += 32) {
      const C gw = C(load(gr + i)) * C(load(w + i));
      const C xhat = (C(load(xr + i)) - mu) * rs;
      store(dx + r * n + i, rs * (gw - mean_gw - xhat * mean_gwx));
    }
  }
}

// dx with the row held in registers (row_registers.cuh), and dw and db summed over the rows
// from the g and x it holds: one read of g and x, 16-byte accesses (V elements a chunk, E chunks
// a lane), for aligned rows up to 32 * V * 8. A lane's columns are the same in every row, so each lane adds its rows' g * xhat and g to registers;
// the block's warps then fold those in warp order (shared memory, 2 n values) and the block
// writes one row of partials, pw[block][col] and pb[block][col], for the fold (column_fold.cuh). g and
// x are read once in all.
// v rounded to T and back (the identity for float and double).
template <class T, class C>
__device__ __forceinline__ C rounded(C v) {
  T t;
  store(&t, v);
  return C(load(&t));
}

// g may be of another (16-bit) type G than x, converted exactly as it is read; `residual`, when
// not null, is added to dx (a residual stream's grad, which eager code adds after).
template <class T, class G, class C, int V, int E>
__global__ void dx_dw_rows_kernel(const G* g, const T* x, const C* mean, const C* rstd,
                                  const T* w, const T* residual, T* dx, int64_t rows, int n,
                                  C* pw, C* pb) {
  extern __shared__ unsigned char shared_bytes[];
  C* sw = reinterpret_cast<C*>(shared_bytes);
  C* sb = sw + n;
  const int lane = threadIdx.x & 31;
  const int64_t warps = (int64_t(gridDim.x) * blockDim.x) >> 5;
  C wv[E][V], aw[E][V], ab[E][V];
  load_row<T, C, V, E>(w, n, lane, 32, wv);
#pragma unroll
  for (int k = 0; k < E; ++k)
#pragma unroll
    for (int i = 0; i < V; ++i) aw[k][i] = ab[k][i] = C(0);
  for (int64_t r = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) >> 5; r < rows; r += warps) {
    C gv[E][V], xv[E][V];
    load_row<G, C, V, E>(g + r * n, n, lane, 32, gv);
    load_row<T, C, V, E>(x + r * n, n, lane, 32, xv);
    const C mu = mean[r], rs = rstd[r];
    C sum_gw = 0, sum_gwx = 0;  // elements past n read as 0, so they add nothing anywhere
#pragma unroll
    for (int k = 0; k < E; ++k)
#pragma unroll
      for (int i = 0; i < V; ++i) {
        xv[k][i] = (xv[k][i] - mu) * rs;
        aw[k][i] += gv[k][i] * xv[k][i];
        ab[k][i] += gv[k][i];
        gv[k][i] *= wv[k][i];
        sum_gw += gv[k][i];
        sum_gwx += gv[k][i] * xv[k][i];
      }
    const C mean_gw = warp_sum(sum_gw) / C(n), mean_gwx = warp_sum(sum_gwx) / C(n);
#pragma unroll
    for (int k = 0; k < E; ++k)
#pragma unroll
      for (int i = 0; i < V; ++i) gv[k][i] = rs * (gv[k][i] - mean_gw - xv[k][i] * mean_gwx);
    if (residual) {
      // dx rounded to T first, then added: what storing dx and adding in another op gives.
      load_row<T, C, V, E>(residual + r * n, n, lane, 32, xv);
#pragma unroll
      for (int k = 0; k < E; ++k)
#pragma unroll
        for (int i = 0; i < V; ++i) gv[k][i] = rounded<T>(gv[k][i]) + xv[k][i];
    }
    store_row<T, C, V, E>(dx + r * n, n, lane, 32, gv);
  }
  for (int c = threadIdx.x; c < n; c += blockDim.x) sw[c] = sb[c] = C(0);
  __syncthreads();
  const int warp = threadIdx.x >> 5;
  for (int turn = 0; turn < int(blockDim.x >> 5); ++turn) {  // warp order: the same every run
    if (warp == turn)
#pragma unroll
      for (int k = 0; k < E; ++k)
#pragma unroll
        for (int i = 0; i < V; ++i) {
          const int c = (k * 32 + lane) * V + i;
          if (c < n) {
            sw[c] += aw[k][i];
            sb[c] += ab[k][i];
          }
        }
    __syncthreads();
  }
  for (int c = threadIdx.x; c < n; c += blockDim.x) {
    pw[int64_t(blockIdx.x) * n + c] = sw[c];
    pb[int64_t(blockIdx.x) * n + c] = sb[c];
  }
}

// Calls f with dx_dw_rows_kernel for the fewest chunks a lane that hold a row of n; false when
// a row is longer than 8 chunks a lane.
// (and with E, the chunks a lane, as f's second argument)
template <class T, class G, class C, int V, class F>
bool with_rows_kernel(int64_t n, F f) {
  switch ((n + 32 * V - 1) / (32 * V)) {
    case 1: f(dx_dw_rows_kernel<T, G, C, V, 1>, 1); return true;
    case 2: f(dx_dw_rows_kernel<T, G, C, V, 2>, 2); return true;
    case 3: f(dx_dw_rows_kernel<T, G, C, V, 3>, 3); return true;
    case 4: f(dx_dw_rows_kernel<T, G, C, V, 4>, 4); return true;
    case 5: f(dx_dw_rows_kernel<T, G, C, V, 5>, 5); return true;
    case 6: f(dx_dw_rows_kernel<T, G, C, V, 6>, 6); return true;
    case 7: f(dx_dw_rows_kernel<T, G, C, V, 7>, 7); return true;
    case 8: f(dx_dw_rows_kernel<T, G, C, V, 8>, 8); return true;
    default: return false;
  }
}

// Column partials of dw and db: a block covers 32 columns x 8 row lanes (a warp reads 32
// neighbouring elements of a row); split s of the rows writes partial[s][col].
constexpr int kColumns = 32, kRowLanes = 8;

template <class T, class C>
__global__ void dw_db_partial_kernel(const T* g, const T* x, const C* mean, const C* rstd,
                                     int64_t rows, int64_t n, C* pw, C* pb) {
  __shared__ C tile_w[kRowLanes][kColumns + 1], tile_b[kRowLanes][kColumns + 1];
  const int64_t col = int64_t(blockIdx.x) * kColumns + threadIdx.x;
  C aw = 0, ab = 0;
  if (col < n) {
    const int64_t step = int64_t(gridDim.y) * kRowLanes;
    for (int64_t r = int64_t(blockIdx.y) * kRowLanes + threadIdx.y; r < rows; r += step) {
      const C gv = C(load(g + r * n + col));
      aw += gv * ((C(load(x + r * n + col)) - mean[r]) * rstd[r]);
      ab += gv;
    }
  }
  tile_w[threadIdx.y][threadIdx.x] = aw;
  tile_b[threadIdx.y][threadIdx.x] = ab;
  __syncthreads();
  if (threadIdx.y == 0 && col < n) {
    for (int k = 1; k < kRowLanes; ++k) {
      aw += tile_w[k][threadIdx.x];
      ab += tile_b[k][threadIdx.x];
    }
    pw[int64_t(blockIdx.y) * n + col] = aw;
    pb[int64_t(blockIdx.y) * n + col] = ab;
  }
}

// The same with V neighbouring columns a thread through 16-byte loads (n a multiple of V, rows
// aligned): a warp reads 512 contiguous bytes of g and of x per row.
template <class T, class C, int V>
__global__ void dw_db_partial_vec_kernel(const T* g, const T* x, const C* mean, const C* rstd,
                                         int64_t rows, int64_t n, C* pw, C* pb) {
  __shared__ C tile_w[kRowLanes][kColumns * V + 1], tile_b[kRowLanes][kColumns * V + 1];
  const int64_t c0 = (int64_t(blockIdx.x) * kColumns + threadIdx.x) * V;
  C aw[V] = {}, ab[V] = {};
  if (c0 < n) {
    const int64_t step = int64_t(gridDim.y) * kRowLanes;
    for (int64_t r = int64_t(blockIdx.y) * kRowLanes + threadIdx.y; r < rows; r += step) {
      const Pack<T, V> gp = *reinterpret_cast<const Pack<T, V>*>(g + r * n + c0);
      const Pack<T, V> xp = *reinterpret_cast<const Pack<T, V>*>(x + r * n + c0);
      const C mu = mean[r], rs = rstd[r];
#pragma unroll
      for (int i = 0; i < V; ++i) {
        const C gv = C(load(&gp.v[i]));
        aw[i] += gv * ((C(load(&xp.v[i])) - mu) * rs);
        ab[i] += gv;
      }
    }
  }
#pragma unroll
  for (int i = 0; i < V; ++i) {
    tile_w[threadIdx.y][threadIdx.x * V + i] = aw[i];
    tile_b[threadIdx.y][threadIdx.x * V + i] = ab[i];
  }
  __syncthreads();
  if (threadIdx.y == 0 && c0 < n) {
#pragma unroll
    for (int i = 0; i < V; ++i) {
      C w = aw[i], b = ab[i];
      for (int k = 1; k < kRowLanes; ++k) {
        w += tile_w[k][threadIdx.x * V + i];
        b += tile_b[k][threadIdx.x * V + i];
      }
      pw[int64_t(blockIdx.y) * n + c0 + i] = w;
      pb[int64_t(blockIdx.y) * n + c0 + i] = b;
    }
  }
}

int sm_count() {
  static const int sms = [] {
    int n = 0;
    cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, 0);
    return n > 0 ? n : 80;
  }();
  return sms;
}

// dx (plus residual, when defined), dw and db with the rows held in registers, all tensors
// contiguous; false (nothing launched) when the rows do not qualify: n a multiple of T's
// 16-byte vector and at most 8 vectors a lane, rows and their starts aligned for the accesses.
template <class T, class G>
bool rows_in_registers(const Tensor& g, const Tensor& x, const Tensor& mean, const Tensor& rstd,
                       const Tensor& w, const Tensor& residual, const Tensor& dx,
                       const Tensor& dw, const Tensor& db, int64_t n,
                       const layer_norm_grad::FoldLauncher* defer = nullptr) {
  using C = compute_t<T>;
  constexpr int V = 16 / sizeof(T);
  const int64_t rows = mean.numel();
  auto aligned = [](const Tensor& t, size_t bytes) {
    return reinterpret_cast<uintptr_t>(t.impl()->data()) % bytes == 0;
  };
  if (rows <= 0 || n <= 0 || n % V != 0 || n > 32 * V * 8 || !aligned(x, 16) ||
      !aligned(w, 16) || !aligned(dx, 16) || !aligned(g, sizeof(G) * V) ||
      (residual.defined() && !aligned(residual, 16)))
    return false;
  const int device = x.device().index;
  detail::use_device(device);
  const cudaStream_t stream = detail::stream(device);
  constexpr DType acc = std::is_same_v<C, double> ? DType::Float64 : DType::Float32;
  auto data = [](const Tensor& t) { return t.defined() ? t.impl()->data() : nullptr; };
  // Blocks of 4 warps, as many as stay resident at once (the rows held in registers make a
  // thread's registers many; smaller blocks fit more warps on a multiprocessor), each warp a
  // row at a time; a block's partials a row.
  constexpr int kThreads = 128;
  const size_t shared = 2 * size_t(n) * sizeof(C);
  // Blocks resident per multiprocessor, asked once per kernel (E) at the largest shared size
  // its rows can take (2 * 32 * V * E values), so the answer holds for every n it serves.
  static std::array<std::atomic<int>, 9> resident_of{};
  return with_rows_kernel<T, G, C, V>(n, [&](auto kernel, int e) {
    int resident = resident_of[size_t(e)].load(std::memory_order_relaxed);
    if (resident == 0) {
      const size_t most = 2 * size_t(32 * V * e) * sizeof(C);
      if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&resident, kernel, kThreads, most) !=
              cudaSuccess ||
          resident < 1)
        resident = 1;
      resident_of[size_t(e)].store(resident, std::memory_order_relaxed);
    }
    const int64_t blocks =
        std::min<int64_t>((rows + 3) / 4, int64_t(sm_count()) * resident);
    Tensor partial = make_tensor({2, blocks, n}, acc, x.device());
    C* pw = static_cast<C*>(partial.impl()->data());
    C* pb = pw + blocks * n;
    kernel<<<unsigned(blocks), kThreads, shared, stream>>>(
        static_cast<const G*>(data(g)), static_cast<const T*>(data(x)),
        static_cast<const C*>(data(mean)), static_cast<const C*>(data(rstd)),
        static_cast<const T*>(data(w)), static_cast<const T*>(data(residual)),
        static_cast<T*>(data(dx)), rows, int(n), pw, pb);
    detail::check(cudaGetLastError(), "layer_norm_backward");
    T *w_out = static_cast<T*>(data(dw)), *b_out = static_cast<T*>(data(db));
    auto fold = [=] {
      fold_partial_rows(pw, int(blocks), n, w_out, b_out, 2, FoldSum{}, 0, stream);
      detail::check(cudaGetLastError(), "layer_norm_backward (fold)");
    };
    if (defer)
      (*defer)(partial, fold);
    else
      fold();
  });
}

// in: g, x, mean, rstd, weight; out: dx, dw, db.
void layer_norm_backward(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  visit<Kinds::Float>(in[1].dtype(), "layer_norm_backward", [&]<class T>() {
    using C = compute_t<T>;
    const Tensor g = in[0].contiguous(), x = in[1].contiguous(), mean = in[2].contiguous(),
                 rstd = in[3].contiguous(), w = in[4].contiguous();
    int64_t n = 1;
    for (int64_t s : a.shape) n *= s;
    const int64_t rows = mean.numel();
    const int device = x.device().index;
    detail::use_device(device);
    const cudaStream_t stream = detail::stream(device);
    auto ptr = [](const Tensor& t) { return static_cast<const T*>(t.impl()->data()); };
    auto cptr = [](const Tensor& t) { return static_cast<const C*>(t.impl()->data()); };
    T* dx = static_cast<T*>(out[0].impl()->data());
    T* dw = static_cast<T*>(out[1].impl()->data());
    T* db = static_cast<T*>(out[2].impl()->data());
    // 16-byte accesses where every row (and the weight) starts 16-byte aligned.
    constexpr int V = 16 / sizeof(T);
    auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
    const bool vec = n % V == 0 && aligned(ptr(g)) && aligned(ptr(x)) && aligned(ptr(w)) &&
                     aligned(dx);
    constexpr DType acc = std::is_same_v<C, double> ? DType::Float64 : DType::Float32;
    // Rows held in registers: dx, dw and db from one read of g and x, a block's partials a row.
    if (rows_in_registers<T, T>(g, x, mean, rstd, w, Tensor(), out[0], out[1], out[2], n)) return;
    if (rows > 0 && n > 0) {
      const int64_t blocks = std::min<int64_t>((rows + 7) / 8, int64_t(sm_count()) * 16);
      dx_kernel<T, C><<<unsigned(blocks), 256, 0, stream>>>(ptr(g), ptr(x), cptr(mean),
                                                            cptr(rstd), ptr(w), dx, rows, n);
      detail::check(cudaGetLastError(), "layer_norm_backward");
    }
    if (n == 0) return;
    const int64_t columns = vec ? int64_t(kColumns) * V : kColumns;
    const int64_t groups = (n + columns - 1) / columns;
    const int64_t want = (int64_t(sm_count()) * 8 + groups - 1) / groups;
    const int splits = int(std::clamp<int64_t>(std::min(want, rows / (kRowLanes * 8)), 1, 1024));
    Tensor partial = make_tensor({2, int64_t(splits), n}, acc, x.device());
    C* pw = static_cast<C*>(partial.impl()->data());
    C* pb = pw + int64_t(splits) * n;
    const dim3 grid{unsigned(groups), unsigned(splits)}, block{kColumns, kRowLanes};
    if (vec)
      dw_db_partial_vec_kernel<T, C, V><<<grid, block, 0, stream>>>(
          ptr(g), ptr(x), cptr(mean), cptr(rstd), rows, n, pw, pb);
    else
      dw_db_partial_kernel<T, C><<<grid, block, 0, stream>>>(ptr(g), ptr(x), cptr(mean),
                                                            cptr(rstd), rows, n, pw, pb);
    fold_partial_rows(pw, splits, n, dw, db, 2, FoldSum{}, 0, stream);
    detail::check(cudaGetLastError(), "layer_norm_backward");
  });
}

}  // namespace

}  // namespace ember::cuda

namespace ember::layer_norm_grad {

bool backward_fused(const Tensor& g, const Tensor& x, const Tensor& mean, const Tensor& rstd,
                    const Tensor& w, const Tensor& residual, const Tensor& dx, const Tensor& dw,
                    const Tensor& db, const FoldLauncher* defer) {
  const Device d = x.device();
  auto fits = [&](const Tensor& t, DType dt, const Shape& sizes) {
    return t.defined() && t.dtype() == dt && t.device() == d && t.is_contiguous() &&
           t.sizes() == sizes;
  };
  const Shape& ws = w.sizes();
  if (d.type != DeviceType::CUDA || !fits(x, DType::Float32, x.sizes()) ||
      !fits(w, DType::Float32, ws) || !fits(dx, DType::Float32, x.sizes()) ||
      !fits(dw, DType::Float32, ws) || !fits(db, DType::Float32, ws) ||
      (residual.defined() && !fits(residual, DType::Float32, x.sizes())) ||
      !fits(mean, DType::Float32, mean.sizes()) || !fits(rstd, DType::Float32, mean.sizes()) ||
      !g.defined() || g.device() != d || !g.is_contiguous() || g.sizes() != x.sizes())
    return false;
  const int64_t n = w.numel();
  if (n == 0 || x.numel() != mean.numel() * n) return false;
  switch (g.dtype()) {
    case DType::Float32:
      return cuda::rows_in_registers<float, float>(g, x, mean, rstd, w, residual, dx, dw, db, n,
                                                   defer);
    case DType::BFloat16:
      return cuda::rows_in_registers<float, __nv_bfloat16>(g, x, mean, rstd, w, residual, dx, dw,
                                                           db, n, defer);
    case DType::Float16:
      return cuda::rows_in_registers<float, __half>(g, x, mean, rstd, w, residual, dx, dw, db, n,
                                                    defer);
    default:
      return false;
  }
}

}  // namespace ember::layer_norm_grad

namespace ember::cuda {

void register_layer_norm_backward(KernelTable& t) {
  t[OpId::layer_norm_backward] = layer_norm_backward;
}

}  // namespace ember::cuda
