// The tensor-core attention forward (FlashAttention-2's loop on mma.sync; attention_mma.cuh
// says how tiles and fragments are laid out) for float16 and bfloat16 heads of up to 64. A
// block takes one batch entry and a tile of 64 query rows, the last tiles first, with one warp
// group of four warps or, where the launch has few blocks (forward_groups), two that take
// alternate key tiles (a block's tiles are a chain of dependent steps, so splitting it halves
// the longest block's time; a GPT's short sequences at small batch have few blocks to hide it
// with). Q stays in shared memory, each warp reading its 16 rows' A fragments as each product
// uses them (128 registers). K and V stream through shared memory 64 keys at a time,
// double-buffered a group: the group's next tile's asynchronous copies run while its current
// one is used (tiles the causal mask hides entirely are skipped). With two groups, group 1
// hands its softmax state and accumulators to group 0 at the end through shared memory, which
// merges them against the larger max and stores. Per key tile a warp
// computes its 16 x 64 scores in registers, masks them and keeps the online softmax in the
// base-2 domain (scores times scale * log2(e)): the running max of its two rows per lane (shared
// by the quad), the rescale factor, and its lane's part of the running sum. The probabilities
// (times the dropout factor, whose flags a thread loads as one word a tile, drawn before by
// attention_mma_keep.cuh) become, rounded to 16 bits, the A operand of P V without leaving
// registers. At the end out = acc / l and lse = (m + log2(l)) ln 2; a row that saw no key gets
// out 0 and lse -inf, as the float kernel (attention_fwd.cuh).
// Shared memory: a Q tile and each group's two K and two V tiles (64 x 72 each): 45 KiB with
// one group, 81 KiB with two.
#pragma once
#include "kernels/cuda/attention_launch.cuh"
#include "kernels/cuda/attention_mma.cuh"
#include "kernels/cuda/attention_mma_keep.cuh"

namespace ember::cuda::attn::mma {

// The forward's blocks are G warp groups of kThreads (1 or 2): group h takes the key tiles j
// with j % G == h, so a block's chain of tiles (its rows' keys, under the causal mask up to its
// own tile) is split over them, and the groups' online softmaxes are merged at the end. Two
// where the launch has few blocks (a GPT's short sequences at small batch: the longest block
// sets the time, and there are too few others to hide it); one where blocks are many (two
// groups hold a multiprocessor's shared memory for half as many blocks).
template <class Runner>
int forward_groups(const Runner& run, int64_t blocks) {
  return blocks <= 2 * int64_t(run.multiprocessors()) ? 2 : 1;
}

// Q, then each group's two K and two V tiles (the group's next tile loads while its current one
// is used).
template <int G>
struct ForwardSmem {
  static constexpr int q = 0, k = q + kTile, end = k + G * 4 * kTile;
  static constexpr int k_of(int group, int buf) { return k + group * 4 * kTile + buf * kTile; }
  static constexpr int v_of(int group, int buf) { return k_of(group, 2 + buf); }
  template <class T>
  static constexpr size_t bytes = size_t(end) * sizeof(T);
};
// What a thread of group 1 hands to its counterpart in group 0 at the end: its rows' max and
// sum, then its accumulators, as floats (laid over the K and V tiles).
constexpr int kMergeFloats = 4 + (kHead / 8) * 4;

template <class T, int G>
EMBER_ATTN_MMA_FORWARD_KERNEL(G) void attention_forward_kernel(ForwardArgs<T, float> a) {
  using Smem = ForwardSmem<G>;
  T* smem = reinterpret_cast<T*>(shared_memory());
  T* qs = smem + Smem::q;
  const Problem<float> p = a.p.drawn();
  const int tid = thread_index(), lane = tid % 32, g = lane / 4, q = lane % 4;
  const int group = tid / kThreads, gt = tid % kThreads, warp = gt / 32;  // warp of its group
  const Tile at = tile_of(p.batch, p.L);
  const int64_t b = at.b, r0 = at.r0;
  const int rows = at.rows;
  const float scale2 = p.scale * kLog2e;

  const int64_t c_end = p.causal ? (p.S < r0 + rows ? p.S : r0 + rows) : p.S;
  const int64_t tiles = c_end > 0 ? (c_end + kRows - 1) / kRows : 0;
  // The group's tile j into its buffer buf (its own threads' copies).
  auto load_kv = [&](int64_t j, int buf) {
    const int64_t c0 = j * kRows;
    const int cols = min_rows(p.S - c0, kRows);
    load_tile(smem + Smem::k_of(group, buf), a.k.rows_of(b, c0), a.k.row_stride, cols, p.E,
              gt, kThreads);
    load_tile(smem + Smem::v_of(group, buf), a.v.rows_of(b, c0), a.v.row_stride, cols, p.F,
              gt, kThreads);
  };
  load_tile(qs, a.q.rows_of(b, r0), a.q.row_stride, rows, p.E, tid, G * kThreads);
  if (group < tiles) load_kv(group, 0);
  async_commit();

  float acc[kHead / 8][4] = {};
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0, 0};
  // Both groups take every turn (the barriers are the block's); a group past its last tile idles.
  for (int64_t turn = 0; turn * G < tiles; ++turn) {
    const int64_t j = turn * G + group, c0 = j * kRows;
    const int buf = int(turn % 2);
    async_wait();
    sync_block();  // tile j is in, and every warp is done with the group's tile of turn - 1
    if (j + G < tiles) load_kv(j + G, 1 - buf);
    async_commit();
    // A group past its last tile takes group 0's tile of the turn with every score masked, which
    // leaves its state as it was, bit for bit (alpha 1, probabilities 0): the block's warps stay
    // in step (the block emulator runs warp exchanges as block barriers).
    const bool idle = j >= tiles;
    const int cols = idle ? 0 : min_rows(p.S - c0, kRows);
    const int from = idle ? 0 : group;
    const T *kb = smem + Smem::k_of(from, buf), *vb = smem + Smem::v_of(from, buf);
    const uint32_t keep = p.dropout && !idle
                              ? a.keep_bits[keep_tile_index(p, b, r0 / kRows, j) * kKeepWords + gt]
                              : 0u;

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
  // Group 1's softmax state merged into group 0's (each against the larger max), over the K and
  // V tiles, which every warp is done with after the barrier.
  if constexpr (G == 2) {
    float* merge = reinterpret_cast<float*>(smem + Smem::k);  // [kMergeFloats][kThreads]
    sync_block();
    if (group == 1) {
      EMBER_UNROLL
      for (int h = 0; h < 2; ++h) {
        merge[h * kThreads + gt] = m[h];
        merge[(2 + h) * kThreads + gt] = l[h];
      }
      EMBER_UNROLL
      for (int dn = 0; dn < kHead / 8; ++dn)
        EMBER_UNROLL
        for (int x = 0; x < 4; ++x) merge[(4 + dn * 4 + x) * kThreads + gt] = acc[dn][x];
    }
    sync_block();
    EMBER_UNROLL
    for (int h = 0; h < 2 && group == 0; ++h) {
      const float m1 = merge[h * kThreads + gt], l1 = merge[(2 + h) * kThreads + gt];
      const float m_new = max_of(m[h], m1);
      if (m_new == -INFINITY) continue;  // neither group saw a key of these rows
      const float a0 = exp2_of(m[h] - m_new), a1 = exp2_of(m1 - m_new);
      m[h] = m_new;
      l[h] = l[h] * a0 + l1 * a1;
      EMBER_UNROLL
      for (int dn = 0; dn < kHead / 8; ++dn)
        EMBER_UNROLL
        for (int e = 0; e < 2; ++e)
          acc[dn][2 * h + e] =
              acc[dn][2 * h + e] * a0 + merge[(4 + dn * 4 + 2 * h + e) * kThreads + gt] * a1;
    }
  }

  // Group 1 sums along (its quads' exchanges keep the block in step) and stores nothing.
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
    if (group == 0 && q == 0 && r < rows)
      a.lse[b * p.L + r0 + r] = m[h] == -INFINITY ? -INFINITY : (m[h] + log2f(total)) * kLn2;
  }
  if (group == 0) store_rows(out, acc, warp, lane, rows, p.F, 1.f, a.out.row_stride);
}

// Launches the forward on `run` (under dropout the keep flags' kernel first, into
// args.keep_bits: keep_tiles(p) * kKeepWords words) when the kernels take the problem
// (takes_type, heads of at most kHead, 16-byte loadable operands); false when they do not.
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
    if (p.dropout && p.S > 0)
      run(&attention_keep_bits_kernel<T>, grid_blocks(1, keep_tiles(p), op), kKeepBitsSmem,
          KeepBitsArgs{p, args.keep_bits, nullptr}, kKeepBitsThreads);
    if (forward_groups(run, blocks) == 2)
      run(&attention_forward_kernel<T, 2>, blocks, ForwardSmem<2>::bytes<T>, args, 2 * kThreads);
    else
      run(&attention_forward_kernel<T, 1>, blocks, ForwardSmem<1>::bytes<T>, args, kThreads);
  }
  return true;
}

}  // namespace ember::cuda::attn::mma
