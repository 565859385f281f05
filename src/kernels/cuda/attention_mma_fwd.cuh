// The tensor-core attention forward (FlashAttention-2's loop on mma.sync; attention_mma.cuh
// says how tiles and fragments are laid out) for float16 and bfloat16 heads of up to 64. A
// block takes one batch entry and a tile of 64 query rows, the last tiles first; Q stays in
// shared memory, each warp reading its 16 rows' A fragments as each product uses them (128
// registers: four blocks a multiprocessor). K and V stream through shared memory 64
// keys at a time, double-buffered: the next tile's asynchronous copies run while the current
// one is used (tiles the causal mask hides entirely are skipped). Per key tile a warp
// computes its 16 x 64 scores in registers, masks them and keeps the online softmax in the
// base-2 domain (scores times scale * log2(e)): the running max of its two rows per lane (shared
// by the quad), the rescale factor, and its lane's part of the running sum. The probabilities
// (times the dropout factor, whose flags a thread loads as one word a tile, drawn before by
// attention_mma_keep.cuh) become, rounded to 16 bits, the A operand of P V without leaving
// registers. At the end out = acc / l and lse = (m + log2(l)) ln 2; a row that saw no key gets
// out 0 and lse -inf, as the float kernel (attention_fwd.cuh).
// Shared memory: a Q tile, two K and two V tiles (64 x 72 each): 45 KiB.
#pragma once
#include "kernels/cuda/attention_launch.cuh"
#include "kernels/cuda/attention_mma.cuh"
#include "kernels/cuda/attention_mma_keep.cuh"

namespace ember::cuda::attn::mma {

// Q, then two K and two V tiles (the next tile loads while the current one is used).
struct ForwardSmem {
  static constexpr int q = 0, k = q + kTile, v = k + 2 * kTile, end = v + 2 * kTile;
  template <class T>
  static constexpr size_t bytes = size_t(end) * sizeof(T);
};

template <class T>
EMBER_ATTN_MMA_KERNEL void attention_forward_kernel(ForwardArgs<T, float> a) {
  T* smem = reinterpret_cast<T*>(shared_memory());
  T *qs = smem + ForwardSmem::q, *ks = smem + ForwardSmem::k, *vs = smem + ForwardSmem::v;
  const Problem<float> p = a.p.drawn();
  const int tid = thread_index(), warp = tid / 32, lane = tid % 32, g = lane / 4, q = lane % 4;
  const Tile at = tile_of(p.batch, p.L);
  const int64_t b = at.b, r0 = at.r0;
  const int rows = at.rows;
  const float scale2 = p.scale * kLog2e;

  const int64_t c_end = p.causal ? (p.S < r0 + rows ? p.S : r0 + rows) : p.S;
  // K and V tile j + 1 load while tile j is used.
  auto load_kv = [&](int64_t c0, int buf) {
    const int cols = min_rows(p.S - c0, kRows);
    load_tile(ks + buf * kTile, a.k.rows_of(b, c0), a.k.row_stride, cols, p.E);
    load_tile(vs + buf * kTile, a.v.rows_of(b, c0), a.v.row_stride, cols, p.F);
  };
  load_tile(qs, a.q.rows_of(b, r0), a.q.row_stride, rows, p.E);
  if (c_end > 0) load_kv(0, 0);
  async_commit();

  float acc[kHead / 8][4] = {};
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0, 0};
  for (int64_t c0 = 0, j = 0; c0 < c_end; c0 += kRows, ++j) {
    const int cols = min_rows(p.S - c0, kRows);
    const T *kb = ks + (j % 2) * kTile, *vb = vs + (j % 2) * kTile;
    async_wait();
    sync_block();  // tile j is in, and every warp is done with tile j - 1 (and its buffer)
    if (c0 + kRows < c_end) load_kv(c0 + kRows, int(1 - j % 2));
    async_commit();
    const uint32_t keep = p.dropout ? keep_word(a.keep_bits, p, b, r0 / kRows, j) : 0u;

    // A whole tile every row of which sees every key needs no mask.
    const bool full = cols == kRows && !(p.causal && c0 + kRows - 1 > r0);
    float s[8][4] = {};
    mma_abt<T>(s, qs, kb, warp, lane);
    EMBER_UNROLL
    for (int h = 0; h < 2; ++h) {
      const int r = warp * 16 + g + 8 * h;
      float tile_max = -INFINITY;
      EMBER_UNROLL
      for (int n = 0; n < 8; ++n) {
        EMBER_UNROLL
        for (int e = 0; e < 2; ++e) {
          const int c = n * 8 + 2 * q + e;
          const bool masked = !full && (c >= cols || p.hidden(r0 + r, c0 + c));
          float& x = s[n][2 * h + e];
          x = masked ? -INFINITY : x * scale2;
          tile_max = max_of(tile_max, x);
        }
      }
      const float m_new = max_of(m[h], quad_max(tile_max));
      // m_new = -inf: the row has seen no key yet (nothing to rescale, every p is 0).
      const bool none = m_new == -INFINITY;
      const float alpha = none ? 1.f : exp2_of(m[h] - m_new);
      m[h] = m_new;
      float sum = 0;
      EMBER_UNROLL
      for (int n = 0; n < 8; ++n) {
        EMBER_UNROLL
        for (int e = 0; e < 2; ++e) {
          float& x = s[n][2 * h + e];
          const float pr = none ? 0.f : exp2_of(x - m_new);
          sum += pr;
          x = p.dropout ? (kept(keep, n, h, e) ? pr * p.inv_keep : 0.f) : pr;
        }
      }
      l[h] = l[h] * alpha + sum;
      EMBER_UNROLL
      for (int dn = 0; dn < kHead / 8; ++dn) {
        acc[dn][2 * h] *= alpha;
        acc[dn][2 * h + 1] *= alpha;
      }
    }
    mma_pv<T>(acc, s, vb, lane);
  }
  async_wait();  // a block that sees no key tile never waited for its Q copies

  T* out = a.out.at(b, r0);
  EMBER_UNROLL
  for (int h = 0; h < 2; ++h) {
    const float total = quad_sum(l[h]);
    const int r = warp * 16 + g + 8 * h;
    const float inv = total > 0 ? 1.f / total : 0.f;
    EMBER_UNROLL
    for (int dn = 0; dn < kHead / 8; ++dn) {
      acc[dn][2 * h] *= inv;
      acc[dn][2 * h + 1] *= inv;
    }
    if (q == 0 && r < rows)
      a.lse[b * p.L + r0 + r] = m[h] == -INFINITY ? -INFINITY : (m[h] + log2f(total)) * kLn2;
  }
  store_rows(out, acc, warp, lane, rows, p.F, 1.f, a.out.row_stride);
}

// Launches the forward on `run` (under dropout the keep flags' kernel first, into
// args.keep_bits: keep_tiles(p) * kKeepWords words, unless they were drawn ahead) when the
// kernels take the problem (takes_type, heads of at most kHead, 16-byte loadable operands);
// false when they do not.
template <class T>
bool takes(const ForwardArgs<T, float>& a) {
  const Problem<float>& p = a.p;
  return takes_type<T> && p.E <= kHead && p.F <= kHead && vec_loadable(a.q, p.E) &&
         vec_loadable(a.k, p.E) && vec_loadable(a.v, p.F);
}
template <class T, class Runner>
bool forward(const ForwardArgs<T, float>& args, Runner&& run, const char* op) {
  const Problem<float>& p = args.p;
  if (!takes(args)) return false;
  if constexpr (takes_type<T>) {
    const int64_t blocks = grid_blocks(p.batch, (p.L + kRows - 1) / kRows, op);
    if (p.dropout && p.S > 0 && !args.keep_drawn)
      run(&attention_keep_bits_kernel<T>, grid_blocks(1, keep_tiles(p), op), kKeepBitsSmem,
          KeepBitsArgs{p, args.keep_bits, nullptr}, kKeepBitsThreads);
    run(&attention_forward_kernel<T>, blocks, ForwardSmem::bytes<T>, args, kThreads);
  }
  return true;
}

}  // namespace ember::cuda::attn::mma
