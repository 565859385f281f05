// The fused attention forward kernel (FlashAttention-2's loop on CUDA cores) and its launch.
// A block takes one batch entry and one tile of R query rows (R = 64 for float compute, 32 for
// double), the last tiles first (under the causal mask they see the most keys). Q stays in
// shared memory; K and V stream through it a tile of R keys at a time, skipping the tiles the
// causal mask hides entirely. Per key tile each thread computes its V x V block of scores
// (rows tr + 16 i, keys tc + 16 j), masks and scales them, and keeps an online softmax per row:
// the running max m (shared by the 16 threads of a row through shuffles), the rescale factor
// exp(m_old - m_new) of its accumulators and its part of the running sum l. The probabilities
// (times the dropout factor) go to shared memory, and each thread adds its V rows x (kD / 16)
// columns of P V. At the end out = acc / l and lse = m + log(l) are written once; a row with no
// visible key gets out 0 and lse -inf.
// Shared memory: Q, K, V tiles (R x (kD + V) each), P (R x (R + V)) and the R x R dropout bytes:
// 120 KiB for float at kD = 128, 72 KiB at kD = 64 (107 KiB for double at kD = 128).
#pragma once
#include <span>

#include "kernels/cuda/attention_launch.cuh"
#include "kernels/cuda/attention_mma_fwd.cuh"

namespace ember::cuda::attn {

// Offsets (in elements of C) of the forward's shared arrays, then its dropout bytes.
template <class C, int kD>
struct ForwardSmem {
  static constexpr int V = Tiles<C>::kVec, R = Tiles<C>::kRows;
  static constexpr int ld = kD + V, ldp = R + V;
  static constexpr int q = 0, k = q + R * ld, v = k + R * ld, p = v + R * ld, end = p + R * ldp;
  static constexpr size_t bytes = size_t(end) * sizeof(C) + size_t(R * R);
};

template <class T, class C, int kD, bool kVecLoad>
EMBER_ATTN_KERNEL void attention_forward_kernel(ForwardArgs<T, C> a) {
  using Sm = ForwardSmem<C, kD>;
  static_assert(Sm::bytes <= kMaxSharedBytes,
                "attention forward: shared memory past the opt-in limit");
  constexpr int V = Sm::V, R = Sm::R, ld = Sm::ld, ldp = Sm::ldp;
  constexpr int kPasses = kD / (kSide * V);
  C* smem = reinterpret_cast<C*>(shared_memory());
  C *qs = smem + Sm::q, *ks = smem + Sm::k, *vs = smem + Sm::v, *ps = smem + Sm::p;
  unsigned char* keep = shared_memory() + size_t(Sm::end) * sizeof(C);
  const Problem<C> p = a.p.drawn();
  const QueryTile at = query_tile(p);
  const int tr = at.tr, tc = at.tc, rows = at.rows;
  const int64_t b = at.b, r0 = at.r0;

  load_tile<T, C, kD, kVecLoad>(qs, a.q.rows_of(b, r0), a.q.row_stride, rows, p.E);
  C acc[V][kPasses * V] = {};
  C m[V], l[V];
  EMBER_UNROLL
  for (int i = 0; i < V; ++i) {
    m[i] = C(-INFINITY);
    l[i] = C(0);
  }
  const int ke = round_up(p.E, V), f_passes = passes_for<C>(p.F);
  // Keys any row of the tile sees: up to its last row when causal.
  const int64_t c_end = p.causal ? (p.S < r0 + rows ? p.S : r0 + rows) : p.S;
  for (int64_t c0 = 0; c0 < c_end; c0 += R) {
    const int cols = min_rows(p.S - c0, R);
    sync_block();  // the previous tile's K, V and P are read
    load_tile<T, C, kD, kVecLoad>(ks, a.k.rows_of(b, c0), a.k.row_stride, cols, p.E);
    load_tile<T, C, kD, kVecLoad>(vs, a.v.rows_of(b, c0), a.v.row_stride, cols, p.F);
    if (p.dropout) keep_tile(keep, p, b, r0, rows, c0, cols);
    sync_block();

    C s[V][V] = {};
    mma_nt(s, qs, ks, ld, ke, tr, tc);
    EMBER_UNROLL
    for (int i = 0; i < V; ++i) {
      const int r = tr + kSide * i;
      C tile_max = C(-INFINITY);
      EMBER_UNROLL
      for (int j = 0; j < V; ++j) {
        const int c = tc + kSide * j;
        const bool masked = r >= rows || c >= cols || p.hidden(r0 + r, c0 + c);
        s[i][j] = masked ? C(-INFINITY) : s[i][j] * p.scale;
        tile_max = max_of(tile_max, s[i][j]);
      }
      const C m_new = max_of(m[i], max16(tile_max));
      // m_new = -inf: the row has seen no key yet (nothing to rescale, every p is 0).
      const bool none = m_new == C(-INFINITY);
      const C alpha = none ? C(1) : exp_of(m[i] - m_new);
      m[i] = m_new;
      C sum = 0;
      EMBER_UNROLL
      for (int j = 0; j < V; ++j) {
        const int c = tc + kSide * j;
        const C e = none ? C(0) : exp_of(s[i][j] - m_new);
        sum += e;
        ps[r * ldp + c] = p.dropout ? (keep[r * R + c] ? e * p.inv_keep : C(0)) : e;
      }
      l[i] = l[i] * alpha + sum;
      EMBER_UNROLL
      for (int x = 0; x < kPasses * V; ++x) acc[i][x] *= alpha;
    }
    sync_block();
    mma_nn<C, kPasses>(acc, ps, ldp, vs, ld, round_up(cols, V), f_passes, tr, tc);
  }

  EMBER_UNROLL
  for (int i = 0; i < V; ++i) {
    const C total = sum16(l[i]);
    const int r = tr + kSide * i;
    if (r >= rows) continue;
    const int64_t row = b * p.L + r0 + r;
    const C inv = total > 0 ? C(1) / total : C(0);
    T* out = a.out.at(b, r0 + r);
    EMBER_UNROLL
    for (int pass = 0; pass < kPasses; ++pass) {
      EMBER_UNROLL
      for (int x = 0; x < V; ++x) {
        const int f = (kSide * pass + tc) * V + x;
        if (f < p.F) out[f] = narrow<T>(acc[i][pass * V + x] * inv);
      }
    }
    if (tc == 0) a.lse[row] = m[i] == C(-INFINITY) ? C(-INFINITY) : m[i] + log_of(total);
  }
}

// attention(q, k, v) -> out, lse (ops/defs/reduction.def) through `run`.
template <class Runner>
void forward(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a, Runner&& run) {
  const char* op = "attention";
  const int kd = head_tile(in[0].size(-1), in[2].size(-1), op);
  visit_dtype(in[0].dtype(), op, [&]<class T, class C>() {
    const Readable<T> q = readable<T>(in[0]), k = readable<T>(in[1]), v = readable<T>(in[2]);
    ForwardArgs<T, C> args;
    args.q = q.operand;
    args.k = k.operand;
    args.v = v.operand;
    const std::optional<OutRows<T>> rows_out = out_rows<T>(out[0]);
    EMBER_CHECK(rows_out, op, ": the output must be dense or a 4-dim view with unit stride along "
                "its last dim, got strides of ", out[0].shape_str());
    args.out = *rows_out;
    args.lse = static_cast<C*>(out[1].impl()->data());
    args.p = problem_of<C>(in[0], in[1], in[2], a, in.size() > 3 ? &in[3] : nullptr, op);
    const Problem<C>& p = args.p;
    if (p.batch == 0 || p.L == 0) return;
    if constexpr (std::is_same_v<C, float>) {
      // 16-bit heads of up to 64: tensor cores, reading the dropout flags drawn before them
      // (or ahead, by the attention_keep op whose words are the op's fifth input).
      Tensor bits;
      if (uint32_t* drawn = mma::drawn_words(in, 4, p, op)) {
        ForwardArgs<T, C> ahead = args;
        ahead.keep_bits = drawn;
        ahead.keep_drawn = true;
        if (mma::forward(ahead, run, op)) return;
      } else if (mma::keep_bits_workspace(p, 1, mma::takes(args), out[1].device(), bits,
                                          args.keep_bits) &&
                 mma::forward(args, run, op)) {
        return;
      }
    }
    const bool vec =
        vec_loadable(args.q, p.E) && vec_loadable(args.k, p.E) && vec_loadable(args.v, p.F);
    const int64_t blocks = grid_blocks(p.batch, (p.L + Tiles<C>::kRows - 1) / Tiles<C>::kRows, op);
    auto launch = [&]<int kD, bool kVec>() {
      run(&attention_forward_kernel<T, C, kD, kVec>, blocks, ForwardSmem<C, kD>::bytes, args);
    };
    if (kd == 64)
      vec ? launch.template operator()<64, true>() : launch.template operator()<64, false>();
    else
      vec ? launch.template operator()<128, true>() : launch.template operator()<128, false>();
  });
}

}  // namespace ember::cuda::attn
