// The CUDA renderer's translation units and launch grids (render_cuda.h).
#include "compiler/render_cuda.h"

#include <algorithm>

#include "ember/error.h"

namespace ember::compiler {

const std::string& cuda_prelude() {
  static const std::string s = R"(#include "kernels/functors.h"
#include "core/philox.h"

// Dropout of x, element i of a tensor whose draws start at rng = {seed, offset}: x scaled where
// draw i (word lane = i % 4 of Philox block i / 4 past the offset's) passes the threshold, else
// x * 0 (the eager dropout kernels' choice and arithmetic). Four neighbouring elements share a
// block: the vector loop spells `block` alike for them, so the block is computed once.
template <typename C>
__device__ __forceinline__ C ember_dropout(C x, const int64_t* rng, uint64_t block, int lane,
                                           uint64_t threshold, C scale) {
  const ember::philox::Block b =
      ember::philox::block(uint64_t(rng[0]), uint64_t(rng[1]) / 4 + block);
  return x * (ember::philox::bernoulli(b.v[lane], threshold) ? scale : C(0));
}

// 16-byte (or smaller) groups of elements, loaded and stored as one access.
template <typename S, int V>
struct alignas(sizeof(S) * V) ember_vec {
  S e[V];
};

template <typename T> __device__ __forceinline__ T ember_neg_inf();
template <> __device__ __forceinline__ float ember_neg_inf<float>() {
  return -__int_as_float(0x7f800000);
}
template <> __device__ __forceinline__ double ember_neg_inf<double>() {
  return -__longlong_as_double(0x7ff0000000000000ll);
}
// max that keeps a NaN from either side.
template <typename T> __device__ __forceinline__ T ember_max(T a, T b) {
  return (a < b || b != b) ? b : a;
}
template <typename T, bool Max> __device__ __forceinline__ T ember_warp_reduce(T v) {
  for (int o = 16; o > 0; o >>= 1) {
    const T w = __shfl_xor_sync(0xffffffffu, v, o);
    v = Max ? ember_max(v, w) : v + w;
  }
  return v;
}
// The block's reduction of v, in every thread; `red` holds 32 partials. Every thread of the
// block calls it.
template <typename T, bool Max> __device__ __forceinline__ T ember_block_reduce(T v, T* red) {
  v = ember_warp_reduce<T, Max>(v);
  const int warps = int(blockDim.x) >> 5;
  if (warps <= 1) return v;
  const int lane = int(threadIdx.x) & 31, w = int(threadIdx.x) >> 5;
  __syncthreads();  // the partials of an earlier reduction are read
  if (lane == 0) red[w] = v;
  __syncthreads();
  v = lane < warps ? red[lane] : (Max ? ember_neg_inf<T>() : T(0));
  return ember_warp_reduce<T, Max>(v);
}

)";
  return s;
}

CudaLaunch render_cuda_kernel(std::ostringstream& os, const kir::Kernel& k) {
  EMBER_CHECK(!k.pattern && !k.epilogue, "compiler: ", k.name,
              ": the CUDA renderer takes elementwise and row kernels only");
  return k.rows ? render_cuda_rows(os, k) : render_cuda_elementwise(os, k);
}

unsigned cuda_grid(const CudaLaunch& l, int64_t work, int sms) {
  if (work <= 0) return 0;
  if (l.rows) return unsigned(work);  // at most 2^31 - 1 rows: the caller runs more eagerly
  // A grid-stride loop: enough blocks to fill every multiprocessor (2048 threads each), no more.
  const int64_t per_block = int64_t(l.block) * l.vector;
  const int64_t blocks = (work + per_block - 1) / per_block;
  return unsigned(std::min<int64_t>(blocks, int64_t(sms) * (2048 / l.block)));
}

}  // namespace ember::compiler
