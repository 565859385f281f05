// The tensor-core attention backward for float16 and bfloat16 heads of up to 64 (the float
// kernels' split, attention_bwd.cuh, on mma.sync; attention_mma.cuh says how tiles and fragments
// are laid out). With P = exp(scale q k^T - lse), Z the dropout factors and D = rowsum(dO O)
// (attention_bwd.cuh's row_dot kernel):
//   dV = (P Z)^T dO,  dS = P (dO V^T Z - D),  dK = scale dS^T Q,  dQ = scale dS K.
// - dkdv: a block a (batch entry, tile of 64 keys), each warp 16 keys whose K and V rows stay
//   in shared memory (their A fragments read as each product uses them, so that the dK and dV
//   accumulators and the two score blocks fit in registers). Q, dO, lse and D stream through
//   shared memory 64 queries at a time (from the first tile the causal mask does not hide
//   entirely). A warp computes S^T = K Q^T and dP^T = V dO^T in registers, turns them into
//   (P Z)^T and dS^T, and uses those, rounded to 16 bits, as the A operands of its dV and dK
//   products.
// - dq: a block a (batch entry, tile of 64 queries), each warp 16 queries whose Q and dO rows
//   stay in shared memory (fragments read as each product uses them). K and V stream; a warp
//   computes S and dP, turns them into dS and adds dS K.
// Under dropout a thread loads a word of keep flags a tile, drawn before both kernels by
// attention_mma_keep.cuh's (key-major for dkdv, query-major for dq).
// Shared memory: the streamed pair's four 64 x 72 tiles (double-buffered), dkdv's lse and D of
// 64 rows (twice), then the resident pair's two tiles: 55 KiB.
#pragma once
#include "kernels/cuda/attention_launch.cuh"
#include "kernels/cuda/attention_mma.cuh"
#include "kernels/cuda/attention_mma_keep.cuh"

namespace ember::cuda::attn::mma {

// Two x and two y tiles (the streamed operands, double-buffered: the next tile loads while the
// current one is used), then (dkdv) two buffers of lse * log2(e) and D of 64 query rows as
// floats, then the resident pair (resident_bytes).
struct BackwardSmem {
  static constexpr int x = 0, y = x + 2 * kTile, end = y + 2 * kTile;
  template <class T>
  static constexpr size_t stats = size_t(end) * sizeof(T);
  template <class T>
  static constexpr size_t bytes = stats<T> + 4 * kRows * sizeof(float);
  // Both kernels keep their resident pair of tiles (dkdv K and V, dq Q and dO) after these,
  // their warps reading the fragments for each streamed tile rather than holding them in
  // registers.
  template <class T>
  static constexpr size_t resident_bytes = bytes<T> + 2 * size_t(kTile) * sizeof(T);
};

// (P Z, dS) of a score s (already times scale * log2(e)) and dP entry dp of a query row with
// lse2 = lse * log2(e) (-inf: the row saw no key, every p is 0) and D entry d.
struct PzDs {
  float pz, ds;
};
EMBER_ATTN_DEVICE PzDs pz_ds(const Problem<float>& p, bool masked, float s, float dp,
                                     float lse2, float d, bool kept) {
  const float pr = masked || lse2 == -INFINITY ? 0.f : exp2_of(s - lse2);
  const float z = p.dropout ? (kept ? p.inv_keep : 0.f) : 1.f;
  return {pr * z, pr * (dp * z - d)};
}

template <class T>
EMBER_ATTN_MMA_KERNEL void attention_dkdv_kernel(BackwardArgs<T, float> a) {
  unsigned char* base = shared_memory();
  T *xs = reinterpret_cast<T*>(base) + BackwardSmem::x, *ys = reinterpret_cast<T*>(base) + BackwardSmem::y;
  float* stats = reinterpret_cast<float*>(base + BackwardSmem::stats<T>);  // [2][lse, D][64]
  const Problem<float> p = a.p.drawn();
  const uint32_t* key_bits = p.dropout ? a.keep_bits + keep_tiles(p) * kKeepWords : nullptr;
  const int tid = thread_index(), warp = tid / 32, lane = tid % 32, g = lane / 4, q = lane % 4;
  const int64_t b = block_index() % p.batch;
  const int64_t c0 = block_index() / p.batch * kRows;
  const int cols = min_rows(p.S - c0, kRows);
  const float scale2 = p.scale * kLog2e;

  // Causal: query tiles before the one holding query c0 see none of these keys.
  const int64_t first = p.causal ? c0 : 0;
  // Query tile i + 1 (Q, dO, lse and D) loads into buffer (i + 1) % 2 while tile i is used.
  auto load_q = [&](int64_t r0, int buf) {
    const int rows = min_rows(p.L - r0, kRows);
    load_tile(xs + buf * kTile, a.q.rows_of(b, r0), a.q.row_stride, rows, p.E);
    load_tile(ys + buf * kTile, a.go.rows_of(b, r0), a.go.row_stride, rows, p.F);
    float* st = stats + buf * 2 * kRows;
    for (int t = tid; t < kRows; t += kThreads) {
      st[t] = t < rows ? a.lse[b * p.L + r0 + t] * kLog2e : 0.f;
      st[kRows + t] = t < rows ? a.d[b * p.L + r0 + t] : 0.f;
    }
  };
  T* ks = reinterpret_cast<T*>(base + BackwardSmem::bytes<T>);  // resident K, then V
  T* vs = ks + kTile;
  load_tile(ks, a.k.rows_of(b, c0), a.k.row_stride, cols, p.E);
  load_tile(vs, a.v.rows_of(b, c0), a.v.row_stride, cols, p.F);
  if (first < p.L) load_q(first, 0);
  async_commit();

  float dk[kHead / 8][4] = {}, dv[kHead / 8][4] = {};
  for (int64_t r0 = first, i = 0; r0 < p.L; r0 += kRows, ++i) {
    const int rows = min_rows(p.L - r0, kRows);
    const int buf = int(i % 2);
    const T *qb = xs + buf * kTile, *gob = ys + buf * kTile;
    const float *lse_s = stats + buf * 2 * kRows, *d_s = lse_s + kRows;
    async_wait();
    sync_block();  // tile i is in (K and V too); every warp is done with tile i - 1
    if (r0 + kRows < p.L) load_q(r0 + kRows, 1 - buf);
    async_commit();
    const uint32_t keep = p.dropout ? keep_word(key_bits, p, b, r0 / kRows, c0 / kRows) : 0u;

    // A whole tile whose every query sees every key of this block needs no mask.
    const bool full = rows == kRows && cols == kRows && !(p.causal && c0 + kRows - 1 > r0);
    float st[8][4] = {}, dpt[8][4] = {};
    mma_abt<T>(st, ks, qb, warp, lane);
    mma_abt<T>(dpt, vs, gob, warp, lane);
    EMBER_UNROLL
    for (int n = 0; n < 8; ++n) {
      EMBER_UNROLL
      for (int e = 0; e < 4; ++e) {
        const int key = warp * 16 + g + 8 * (e / 2), qr = n * 8 + 2 * q + e % 2;
        const bool masked = !full && (key >= cols || qr >= rows || p.hidden(r0 + qr, c0 + key));
        const PzDs pg = pz_ds(p, masked, st[n][e] * scale2, dpt[n][e], lse_s[qr], d_s[qr],
                              kept(keep, n, e / 2, e % 2));
        st[n][e] = pg.pz;
        dpt[n][e] = pg.ds;
      }
    }
    mma_pv<T>(dv, st, gob, lane);
    mma_pv<T>(dk, dpt, qb, lane);
  }
  async_wait();  // a block no query tile sees never waited for its K and V copies

  store_rows(a.dk.at(b, c0), dk, warp, lane, cols, p.E, p.scale, a.dk.row_stride);
  store_rows(a.dv.at(b, c0), dv, warp, lane, cols, p.F, 1.f, a.dv.row_stride);
}

template <class T>
EMBER_ATTN_MMA_KERNEL void attention_dq_kernel(BackwardArgs<T, float> a) {
  unsigned char* base = shared_memory();
  T *xs = reinterpret_cast<T*>(base) + BackwardSmem::x, *ys = reinterpret_cast<T*>(base) + BackwardSmem::y;
  const Problem<float> p = a.p.drawn();
  const int tid = thread_index(), warp = tid / 32, lane = tid % 32, g = lane / 4, q = lane % 4;
  const Tile at = tile_of(p.batch, p.L);
  const int64_t b = at.b, r0 = at.r0;
  const int rows = at.rows;
  const float scale2 = p.scale * kLog2e;

  const int64_t c_end = p.causal ? (p.S < r0 + rows ? p.S : r0 + rows) : p.S;
  // K and V tile j + 1 load into buffer (j + 1) % 2 while tile j is used.
  auto load_kv = [&](int64_t c0, int buf) {
    const int cols = min_rows(p.S - c0, kRows);
    load_tile(xs + buf * kTile, a.k.rows_of(b, c0), a.k.row_stride, cols, p.E);
    load_tile(ys + buf * kTile, a.v.rows_of(b, c0), a.v.row_stride, cols, p.F);
  };
  T* qs = reinterpret_cast<T*>(base + BackwardSmem::bytes<T>);  // resident Q, then dO
  T* gos = qs + kTile;
  load_tile(qs, a.q.rows_of(b, r0), a.q.row_stride, rows, p.E);
  load_tile(gos, a.go.rows_of(b, r0), a.go.row_stride, rows, p.F);
  if (c_end > 0) load_kv(0, 0);
  async_commit();
  float lse2[2], d[2];
  EMBER_UNROLL
  for (int h = 0; h < 2; ++h) {
    const int r = warp * 16 + g + 8 * h;
    lse2[h] = r < rows ? a.lse[b * p.L + r0 + r] * kLog2e : 0.f;
    d[h] = r < rows ? a.d[b * p.L + r0 + r] : 0.f;
  }

  float dq[kHead / 8][4] = {};
  for (int64_t c0 = 0, j = 0; c0 < c_end; c0 += kRows, ++j) {
    const int cols = min_rows(p.S - c0, kRows);
    const int buf = int(j % 2);
    const T *kb = xs + buf * kTile, *vb = ys + buf * kTile;
    async_wait();
    sync_block();  // tile j is in (Q and dO too); every warp is done with tile j - 1
    if (c0 + kRows < c_end) load_kv(c0 + kRows, 1 - buf);
    async_commit();
    const uint32_t keep = p.dropout ? keep_word(a.keep_bits, p, b, r0 / kRows, j) : 0u;

    const bool full = rows == kRows && cols == kRows && !(p.causal && c0 + kRows - 1 > r0);
    float s[8][4] = {}, dp[8][4] = {};
    mma_abt<T>(s, qs, kb, warp, lane);
    mma_abt<T>(dp, gos, vb, warp, lane);
    EMBER_UNROLL
    for (int n = 0; n < 8; ++n) {
      EMBER_UNROLL
      for (int e = 0; e < 4; ++e) {
        const int h = e / 2, r = warp * 16 + g + 8 * h, c = n * 8 + 2 * q + e % 2;
        const bool masked = !full && (c >= cols || r >= rows || p.hidden(r0 + r, c0 + c));
        s[n][e] = pz_ds(p, masked, s[n][e] * scale2, dp[n][e], lse2[h], d[h], kept(keep, n, h, e % 2))
                      .ds;
      }
    }
    mma_pv<T>(dq, s, kb, lane);
  }
  async_wait();  // a block that sees no key tile never waited for its Q and dO copies
  store_rows(a.dq.at(b, r0), dq, warp, lane, rows, p.E, p.scale, a.dq.row_stride);
}

// Launches dkdv and dq on `run` (D already in args.d; under dropout the keep flags' kernel
// first, into args.keep_bits: 2 * keep_tiles(p) * kKeepWords words, unless they were drawn
// ahead) when the kernels take the problem (as forward in attention_mma_fwd.cuh); false when they do not.
template <class T>
bool takes(const BackwardArgs<T, float>& a) {
  const Problem<float>& p = a.p;
  return takes_type<T> && p.E <= kHead && p.F <= kHead && vec_loadable(a.q, p.E) &&
         vec_loadable(a.k, p.E) && vec_loadable(a.v, p.F) && vec_loadable(a.go, p.F);
}
template <class T, class Runner>
bool backward(const BackwardArgs<T, float>& args, Runner&& run, const char* op) {
  const Problem<float>& p = args.p;
  if (!takes(args)) return false;
  if constexpr (takes_type<T>) {
    const int64_t key_blocks = grid_blocks(p.batch, (p.S + kRows - 1) / kRows, op);
    const int64_t query_blocks = grid_blocks(p.batch, (p.L + kRows - 1) / kRows, op);
    if (p.dropout && p.L > 0 && p.S > 0 && !args.keep_drawn)
      run(&attention_keep_bits_kernel<T>, grid_blocks(1, keep_tiles(p), op), kKeepBitsSmem,
          KeepBitsArgs{p, args.keep_bits, args.keep_bits + keep_tiles(p) * kKeepWords},
          kKeepBitsThreads);
    if (key_blocks > 0)
      run(&attention_dkdv_kernel<T>, key_blocks, BackwardSmem::resident_bytes<T>, args, kThreads);
    if (query_blocks > 0)
      run(&attention_dq_kernel<T>, query_blocks, BackwardSmem::resident_bytes<T>, args, kThreads);
  }
  return true;
}

}  // namespace ember::cuda::attn::mma
