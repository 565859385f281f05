// Building blocks of the tensor-core attention kernels (attention_mma_fwd.cuh,
// attention_mma_bwd.cuh), which take float16 and bfloat16 heads of up to 64 elements.
//
// A block is 4 warps (128 threads) over tiles of 64 rows; each warp owns 16 rows of its tile.
// Tiles live in shared memory as the 16-bit inputs, 64 rows of kLd = 72 elements (16-byte
// aligned rows 144 bytes apart, so the 8 rows an ldmatrix phase reads start on different banks).
// Products are mma.sync m16n8k16 with float accumulators: the A operand (16 x 16) comes from a
// tile through ldmatrix or from the accumulators of an earlier product, the B operand (16 x 8)
// from a tile through ldmatrix (plain for a tile stored [n][k], transposed for one stored [k][n]).
//
// Fragments, with lane = 4 g + q: an accumulator tile of 8 columns holds (row g, cols 2q, 2q+1)
// in d[0..1] and (row g + 8, same cols) in d[2..3]; an A fragment holds (row g, k 2q..2q+1),
// (row g + 8, same k), (row g, k 2q+8..2q+9), (row g + 8, same k) in its four words, so two
// accumulator tiles of adjacent columns, rounded to 16 bits, are one A fragment (a_from_acc).
//
// The warp-wide primitives (ldsm_x4, ldsm_x4_t, mma_16816) and exp2_of and the asynchronous
// copies (copy16_async, async_commit, async_wait, async_wait_pending) are CUDA's here; with
// EMBER_CUDA_EMULATION the includer supplies host versions (tests/cuda/emulated_kernels.h).
#pragma once
#include "kernels/cuda/attention_tiles.cuh"

#ifndef EMBER_CUDA_EMULATION
#define EMBER_ATTN_MMA_KERNEL __global__ __launch_bounds__(128)
namespace ember::cuda::attn {
// Four 8 x 8 matrices of 16-bit elements from shared memory: lane t gives the address of row
// t % 8 of matrix t / 8; r[m] gets (row g, cols 2q, 2q+1) of matrix m.
EMBER_ATTN_DEVICE void ldsm_x4(uint32_t (&r)[4], const void* row) {
  const unsigned a = unsigned(__cvta_generic_to_shared(row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
}
// As ldsm_x4, transposed: r[m] gets (rows 2q, 2q+1, col g) of matrix m.
EMBER_ATTN_DEVICE void ldsm_x4_t(uint32_t (&r)[4], const void* row) {
  const unsigned a = unsigned(__cvta_generic_to_shared(row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
}
// d += A B over a 16 x 16 A and 16 x 8 B of T (half or bfloat16), float accumulators.
template <class T>
EMBER_ATTN_DEVICE void mma_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
        "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, "
        "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}
// 16 bytes from global to shared memory without passing through registers (cp.async): they
// land once the thread has committed them and waited for its committed copies.
EMBER_ATTN_DEVICE void copy16_async(void* dst, const void* src) {
  const unsigned d = unsigned(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(d), "l"(src));
}
EMBER_ATTN_DEVICE void async_commit() {
  asm volatile("cp.async.commit_group;\n" ::);
}
EMBER_ATTN_DEVICE void async_wait() {
  asm volatile("cp.async.wait_all;\n" ::: "memory");
}
// Waits until at most N of this thread's committed groups are still in flight: the older ones
// have landed, for this thread to read (others' copies need a barrier too).
template <int N>
EMBER_ATTN_DEVICE void async_wait_pending() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}
EMBER_ATTN_DEVICE float exp2_of(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}
}  // namespace ember::cuda::attn
#else
#define EMBER_ATTN_MMA_KERNEL
#endif

namespace ember::cuda::attn::mma {

constexpr int kThreads = 128;
constexpr int kRows = 64;  // rows of a query or key tile
constexpr int kHead = 64;  // the largest head size (E and F) the kernels take
constexpr int kLd = kHead + 8;
constexpr int kTile = kRows * kLd;  // elements of a tile
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

// Whether the tensor-core kernels take a problem of storage type T: 16-bit storage, heads of
// at most kHead and 16-byte loadable operands (vec_loadable).
template <class T>
constexpr bool takes_type = std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>;

// The tile of rows of [0, n) a block takes (a block per batch entry and tile): its batch entry,
// first row and rows, the last tiles first (under the causal mask they see the most keys).
struct Tile {
  int64_t b, r0;
  int rows;
};
EMBER_ATTN_DEVICE Tile tile_of(int64_t batch, int64_t n) {
  const int64_t tiles = (n + kRows - 1) / kRows;
  const int64_t r0 = (tiles - 1 - block_index() / batch) * kRows;
  return {block_index() % batch, r0, min_rows(n - r0, kRows)};
}

// Two floats rounded to T, packed as a 32-bit word (lo in the low half).
template <class T>
EMBER_ATTN_DEVICE uint32_t pack2(float lo, float hi) {
  const T l = narrow<T>(lo), h = narrow<T>(hi);
  uint16_t a, b;
  std::memcpy(&a, &l, 2);
  std::memcpy(&b, &h, 2);
  return uint32_t(a) | uint32_t(b) << 16;
}

// 4 bytes to p, which is 4-byte aligned.
EMBER_ATTN_DEVICE void store4(void* p, uint32_t w) {
#ifdef EMBER_CUDA_EMULATION
  std::memcpy(p, &w, 4);
#else
  *static_cast<uint32_t*>(p) = w;
#endif
}

// The A fragment of columns 16 t .. 16 t + 15 of an accumulator row block.
template <class T>
EMBER_ATTN_DEVICE void a_from_acc(uint32_t (&a)[4], const float (&lo)[4], const float (&hi)[4]) {
  a[0] = pack2<T>(lo[0], lo[1]);
  a[1] = pack2<T>(lo[2], lo[3]);
  a[2] = pack2<T>(hi[0], hi[1]);
  a[3] = pack2<T>(hi[2], hi[3]);
}

// Starts dst (kRows x kHead, row stride kLd) = rows [0, rows) and cols [0, cols) of src, zeros
// elsewhere; src rows are 16-byte aligned and cols a multiple of 8 (vec_loadable). The copies
// are asynchronous: the tile is there after async_commit(), async_wait() and a block barrier,
// so a kernel loads the next tile while it computes with the current one.
template <class T>
EMBER_ATTN_DEVICE void load_tile(T* dst, const T* src, int64_t row_stride, int rows, int cols) {
  constexpr int kChunks = kHead / 8;
  for (int t = thread_index(); t < kRows * kChunks; t += kThreads) {
    const int r = t / kChunks, c = (t % kChunks) * 8;
    if (r < rows && c < cols) {
      copy16_async(dst + r * kLd + c, src + r * row_stride + c);
    } else {
      Raw<T> zero;
      std::memset(&zero, 0, sizeof zero);
      store16(dst + r * kLd + c, zero);
    }
  }
}

// acc[n] += A x B^T for A the warp's 16 rows of a_tile and the 64 rows n of `tile`, both in
// shared memory stored [row][k] (k over kHead): n-tiles of 8. Each k step's A fragment is read
// just before its use, so only 4 of its registers are held (the accumulators take the rest).
template <class T>
EMBER_ATTN_DEVICE void mma_abt(float (&acc)[8][4], const T* a_tile, const T* tile, int warp,
                               int lane) {
  EMBER_UNROLL
  for (int kk = 0; kk < kHead / 16; ++kk) {
    uint32_t a[4];
    ldsm_x4(a, a_tile + (warp * 16 + lane % 16) * kLd + kk * 16 + lane / 16 * 8);
    EMBER_UNROLL
    for (int n2 = 0; n2 < 4; ++n2) {
      uint32_t b[4];
      ldsm_x4(b, tile + (n2 * 16 + lane / 16 * 8 + lane % 8) * kLd + kk * 16 + (lane / 8) % 2 * 8);
      mma_16816<T>(acc[2 * n2], a, b[0], b[1]);
      mma_16816<T>(acc[2 * n2 + 1], a, b[2], b[3]);
    }
  }
}

// acc[d] += P x tile for P the warp's 16 x 64 accumulator block (rounded to T) and a tile
// stored [k][d] (k the 64 rows, d over kHead): d-tiles of 8.
template <class T>
EMBER_ATTN_DEVICE void mma_pv(float (&acc)[kHead / 8][4], const float (&p)[8][4], const T* tile,
                              int lane) {
  EMBER_UNROLL
  for (int kk = 0; kk < 4; ++kk) {
    uint32_t a[4];
    a_from_acc<T>(a, p[2 * kk], p[2 * kk + 1]);
    EMBER_UNROLL
    for (int dn = 0; dn < kHead / 16; ++dn) {
      uint32_t b[4];
      ldsm_x4_t(b, tile + (kk * 16 + (lane / 8) % 2 * 8 + lane % 8) * kLd + dn * 16 + lane / 16 * 8);
      mma_16816<T>(acc[2 * dn], a, b[0], b[1]);
      mma_16816<T>(acc[2 * dn + 1], a, b[2], b[3]);
    }
  }
}

// Max and sum over the 4 lanes of a quad (the lanes holding one accumulator row).
EMBER_ATTN_DEVICE float quad_max(float v) {
  v = max_of(v, shfl_xor(v, 1));
  return max_of(v, shfl_xor(v, 2));
}
EMBER_ATTN_DEVICE float quad_sum(float v) {
  v += shfl_xor(v, 1);
  return v + shfl_xor(v, 2);
}

// Stores the warp's 16 x kHead accumulator block, times `scale`, as rows [0, rows) and cols
// [0, cols) (cols a multiple of 8) of dst (contiguous rows of `cols`), rounded to T.
template <class T>
EMBER_ATTN_DEVICE void store_rows(T* dst, const float (&acc)[kHead / 8][4], int warp, int lane,
                                  int rows, int cols, float scale, int64_t ld) {
  const int g = lane / 4, q = lane % 4;
  EMBER_UNROLL
  for (int h = 0; h < 2; ++h) {
    const int r = warp * 16 + g + 8 * h;
    if (r >= rows) continue;
    EMBER_UNROLL
    for (int dn = 0; dn < kHead / 8; ++dn) {
      const int c = dn * 8 + 2 * q;
      if (c >= cols) continue;
      store4(dst + int64_t(r) * ld + c, pack2<T>(acc[dn][2 * h] * scale, acc[dn][2 * h + 1] * scale));
    }
  }
}

}  // namespace ember::cuda::attn::mma
