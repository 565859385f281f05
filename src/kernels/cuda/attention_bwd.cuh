// The fused attention backward kernels (FlashAttention-2's split, on CUDA cores) and their
// launch. With P = exp(scale * q k^T - lse) recomputed from the forward's saved lse, Z the
// dropout factors (0 or 1/(1-p)) and D = rowsum(dO * O):
//   dV = (P Z)^T dO,  dS = P (dO V^T Z - D),  dK = scale dS^T Q,  dQ = scale dS K.
// Three kernels, no atomics:
// - row_dot: D, 8 lanes a row (32 rows a block).
// - dkdv: a block a (batch entry, tile of R keys), first tiles first (under the causal mask they
//   see the most queries). K and V stay in shared memory; Q, dO, lse and D stream through it a
//   tile of R queries at a time, from the first tile the causal mask does not hide entirely.
//   Each thread computes its V x V block of S^T and dP^T (keys tr + 16 i, queries tc + 16 j),
//   writes P Z and dS there (transposed: key-major), and adds its V key rows of (P Z)^T dO and
//   dS^T Q to the dV and dK accumulators it holds.
// - dq: a block a (batch entry, tile of R queries), last tiles first. Q, dO, lse and D stay; K
//   and V stream; each thread computes its block of S and dP, writes dS, and adds its V query
//   rows of dS K.
// Shared memory (float, kD = 128 / 64): dkdv 170.5 / 106.5 KiB, dq 153.5 / 89.5 KiB.
#pragma once
#include <span>

#include "core/make_tensor.h"
#include "kernels/cuda/attention_launch.cuh"
#include "kernels/cuda/attention_mma_bwd.cuh"

namespace ember::cuda::attn {

template <class T, class C>
struct RowDotArgs {
  Operand<T> o, go;
  C* d = nullptr;  // [batch, L]
  int64_t batch = 0, L = 0;
  int F = 0;
  bool vec = false;  // o's and go's rows load as 16-byte vectors (vec_loadable)
};

constexpr int kRowDotLanes = 8;                        // lanes a row
constexpr int kRowDotRows = kThreads / kRowDotLanes;   // rows a block

// D = rowsum(o * go): kRowDotLanes lanes a row, each over every kRowDotLanes-th 16-byte vector
// of both rows (element where the rows are not aligned for vectors); the lanes' sums then added
// by a butterfly. A head of 64 16-bit elements is one vector a lane: a block's 32 rows arrive
// in one round of loads, where a warp a row took 64 bytes a load.
template <class T, class C>
EMBER_ATTN_KERNEL void attention_row_dot_kernel(RowDotArgs<T, C> a) {
  constexpr int V = int(16 / sizeof(T));
  const int lane = thread_index() % kRowDotLanes;
  const int64_t row = block_index() * kRowDotRows + thread_index() / kRowDotLanes;
  const bool inside = row < a.batch * a.L;
  C acc = 0;
  if (inside) {
    const int64_t b = row / a.L, i = row % a.L;
    const T* o = a.o.rows_of(b, i);
    const T* go = a.go.rows_of(b, i);
    if (a.vec) {
      for (int f = lane * V; f < a.F; f += kRowDotLanes * V) {
        const Raw<T> ov = load16<Raw<T>>(o + f), gv = load16<Raw<T>>(go + f);
        for (int e = 0; e < V; ++e) acc += widen<C>(ov.v[e]) * widen<C>(gv.v[e]);
      }
    } else {
      for (int f = lane; f < a.F; f += kRowDotLanes) acc += widen<C>(o[f]) * widen<C>(go[f]);
    }
  }
  EMBER_UNROLL
  for (int s = kRowDotLanes / 2; s > 0; s >>= 1) acc += shfl_xor(acc, s);
  if (inside && lane == 0) a.d[row] = acc;
}

// Shared arrays (offsets in elements of C): two resident tiles x, y, two streamed tiles z, w,
// one or two R x (R + V) score tiles, lse and D of R query rows; then the dropout bytes.
template <class C, int kD, int kScoreTiles>
struct BackwardSmem {
  static constexpr int V = Tiles<C>::kVec, R = Tiles<C>::kRows;
  static constexpr int ld = kD + V, ldp = R + V;
  static constexpr int x = 0, y = x + R * ld, z = y + R * ld, w = z + R * ld, s0 = w + R * ld;
  static constexpr int s1 = s0 + R * ldp, lse = s0 + kScoreTiles * R * ldp, d = lse + R,
                       end = d + R;
  static constexpr size_t bytes = size_t(end) * sizeof(C) + size_t(R * R);
};

// lse and D of query rows [r0, r0 + rows) into shared memory (0 past the rows: never used).
template <class C>
EMBER_ATTN_DEVICE void load_row_stats(C* lse_s, C* d_s, const C* lse, const C* d, int64_t first,
                                      int rows) {
  for (int t = thread_index(); t < Tiles<C>::kRows; t += kThreads) {
    lse_s[t] = t < rows ? lse[first + t] : C(0);
    d_s[t] = t < rows ? d[first + t] : C(0);
  }
}

// P Z and dS of one (query, key) pair from its score s and dP entry dp.
template <class C>
struct ProbGrad {
  C pz, ds;
};
template <class C>
EMBER_ATTN_DEVICE ProbGrad<C> prob_grad(const Problem<C>& p, bool masked, C s, C dp, C lse, C d,
                                        bool kept) {
  // lse = -inf: a row that saw no key in the forward (its probabilities are all 0).
  const C pr = masked || lse == C(-INFINITY) ? C(0) : exp_of(s * p.scale - lse);
  const C z = p.dropout ? (kept ? p.inv_keep : C(0)) : C(1);
  return {pr * z, pr * (dp * z - d)};
}

template <class T, class C, int kD, bool kVecLoad>
EMBER_ATTN_KERNEL void attention_dkdv_kernel(BackwardArgs<T, C> a) {
  using Sm = BackwardSmem<C, kD, 2>;
  static_assert(Sm::bytes <= kMaxSharedBytes,
                "attention dkdv: shared memory past the opt-in limit");
  constexpr int V = Sm::V, R = Sm::R, ld = Sm::ld, ldp = Sm::ldp;
  constexpr int kPasses = kD / (kSide * V);
  C* smem = reinterpret_cast<C*>(shared_memory());
  C *ks = smem + Sm::x, *vs = smem + Sm::y, *qs = smem + Sm::z, *gos = smem + Sm::w;
  C *pz_s = smem + Sm::s0, *ds_s = smem + Sm::s1, *lse_s = smem + Sm::lse, *d_s = smem + Sm::d;
  unsigned char* keep = shared_memory() + size_t(Sm::end) * sizeof(C);
  const Problem<C> p = a.p.drawn();
  const int tid = thread_index(), tr = tid / kSide, tc = tid % kSide;
  const int64_t b = block_index() % p.batch;
  const int64_t c0 = block_index() / p.batch * R;
  const int cols = min_rows(p.S - c0, R);

  load_tile<T, C, kD, kVecLoad>(ks, a.k.rows_of(b, c0), a.k.row_stride, cols, p.E);
  load_tile<T, C, kD, kVecLoad>(vs, a.v.rows_of(b, c0), a.v.row_stride, cols, p.F);
  C dk[V][kPasses * V] = {}, dv[V][kPasses * V] = {};
  const int ke = round_up(p.E, V), kf = round_up(p.F, V);
  const int e_passes = passes_for<C>(p.E), f_passes = passes_for<C>(p.F);
  // Causal: query tiles before the one holding query c0 see none of these keys.
  for (int64_t r0 = p.causal ? c0 / R * R : 0; r0 < p.L; r0 += R) {
    const int rows = min_rows(p.L - r0, R);
    sync_block();  // the previous query tile and score tiles are read
    load_tile<T, C, kD, kVecLoad>(qs, a.q.rows_of(b, r0), a.q.row_stride, rows, p.E);
    load_tile<T, C, kD, kVecLoad>(gos, a.go.rows_of(b, r0), a.go.row_stride, rows, p.F);
    load_row_stats(lse_s, d_s, a.lse, a.d, b * p.L + r0, rows);
    if (p.dropout) keep_tile(keep, p, b, r0, rows, c0, cols);
    sync_block();

    C st[V][V] = {}, dpt[V][V] = {};
    mma_nt(st, ks, qs, ld, ke, tr, tc);
    mma_nt(dpt, vs, gos, ld, kf, tr, tc);
    EMBER_UNROLL
    for (int i = 0; i < V; ++i) {
      EMBER_UNROLL
      for (int j = 0; j < V; ++j) {
        const int key = tr + kSide * i, qr = tc + kSide * j;
        const bool masked = key >= cols || qr >= rows || p.hidden(r0 + qr, c0 + key);
        const ProbGrad<C> g = prob_grad(p, masked, st[i][j], dpt[i][j], lse_s[qr], d_s[qr],
                                        p.dropout && keep[qr * R + key]);
        pz_s[key * ldp + qr] = g.pz;
        ds_s[key * ldp + qr] = g.ds;
      }
    }
    sync_block();
    const int kr = round_up(rows, V);
    mma_nn<C, kPasses>(dv, pz_s, ldp, gos, ld, kr, f_passes, tr, tc);
    mma_nn<C, kPasses>(dk, ds_s, ldp, qs, ld, kr, e_passes, tr, tc);
  }

  EMBER_UNROLL
  for (int i = 0; i < V; ++i) {
    const int key = tr + kSide * i;
    if (key >= cols) continue;
    T* dk_row = a.dk.at(b, c0 + key);
    T* dv_row = a.dv.at(b, c0 + key);
    EMBER_UNROLL
    for (int pass = 0; pass < kPasses; ++pass) {
      EMBER_UNROLL
      for (int x = 0; x < V; ++x) {
        const int col = (kSide * pass + tc) * V + x;
        if (col < p.E) dk_row[col] = narrow<T>(dk[i][pass * V + x] * p.scale);
        if (col < p.F) dv_row[col] = narrow<T>(dv[i][pass * V + x]);
      }
    }
  }
}

template <class T, class C, int kD, bool kVecLoad>
EMBER_ATTN_KERNEL void attention_dq_kernel(BackwardArgs<T, C> a) {
  using Sm = BackwardSmem<C, kD, 1>;
  static_assert(Sm::bytes <= kMaxSharedBytes, "attention dq: shared memory past the opt-in limit");
  constexpr int V = Sm::V, R = Sm::R, ld = Sm::ld, ldp = Sm::ldp;
  constexpr int kPasses = kD / (kSide * V);
  C* smem = reinterpret_cast<C*>(shared_memory());
  C *qs = smem + Sm::x, *gos = smem + Sm::y, *ks = smem + Sm::z, *vs = smem + Sm::w;
  C *ds_s = smem + Sm::s0, *lse_s = smem + Sm::lse, *d_s = smem + Sm::d;
  unsigned char* keep = shared_memory() + size_t(Sm::end) * sizeof(C);
  const Problem<C> p = a.p.drawn();
  const QueryTile at = query_tile(p);
  const int tr = at.tr, tc = at.tc, rows = at.rows;
  const int64_t b = at.b, r0 = at.r0;

  load_tile<T, C, kD, kVecLoad>(qs, a.q.rows_of(b, r0), a.q.row_stride, rows, p.E);
  load_tile<T, C, kD, kVecLoad>(gos, a.go.rows_of(b, r0), a.go.row_stride, rows, p.F);
  load_row_stats(lse_s, d_s, a.lse, a.d, b * p.L + r0, rows);
  C dq[V][kPasses * V] = {};
  const int ke = round_up(p.E, V), kf = round_up(p.F, V), e_passes = passes_for<C>(p.E);
  const int64_t c_end = p.causal ? (p.S < r0 + rows ? p.S : r0 + rows) : p.S;
  for (int64_t c0 = 0; c0 < c_end; c0 += R) {
    const int cols = min_rows(p.S - c0, R);
    sync_block();  // the previous key tile and dS are read
    load_tile<T, C, kD, kVecLoad>(ks, a.k.rows_of(b, c0), a.k.row_stride, cols, p.E);
    load_tile<T, C, kD, kVecLoad>(vs, a.v.rows_of(b, c0), a.v.row_stride, cols, p.F);
    if (p.dropout) keep_tile(keep, p, b, r0, rows, c0, cols);
    sync_block();

    C s[V][V] = {}, dp[V][V] = {};
    mma_nt(s, qs, ks, ld, ke, tr, tc);
    mma_nt(dp, gos, vs, ld, kf, tr, tc);
    EMBER_UNROLL
    for (int i = 0; i < V; ++i) {
      EMBER_UNROLL
      for (int j = 0; j < V; ++j) {
        const int qr = tr + kSide * i, key = tc + kSide * j;
        const bool masked = qr >= rows || key >= cols || p.hidden(r0 + qr, c0 + key);
        const ProbGrad<C> g = prob_grad(p, masked, s[i][j], dp[i][j], lse_s[qr], d_s[qr],
                                        p.dropout && keep[qr * R + key]);
        ds_s[qr * ldp + key] = g.ds;
      }
    }
    sync_block();
    mma_nn<C, kPasses>(dq, ds_s, ldp, ks, ld, round_up(cols, V), e_passes, tr, tc);
  }

  EMBER_UNROLL
  for (int i = 0; i < V; ++i) {
    const int qr = tr + kSide * i;
    if (qr >= rows) continue;
    T* out = a.dq.at(b, r0 + qr);
    EMBER_UNROLL
    for (int pass = 0; pass < kPasses; ++pass) {
      EMBER_UNROLL
      for (int x = 0; x < V; ++x) {
        const int e = (kSide * pass + tc) * V + x;
        if (e < p.E) out[e] = narrow<T>(dq[i][pass * V + x] * p.scale);
      }
    }
  }
}

// attention_backward(q, k, v, out, lse, grad_out) -> dq, dk, dv (ops/defs/reduction.def).
template <class Runner>
void backward(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a, Runner&& run) {
  const char* op = "attention_backward";
  const int kd = head_tile(in[0].size(-1), in[2].size(-1), op);
  visit_dtype(in[0].dtype(), op, [&]<class T, class C>() {
    const Readable<T> q = readable<T>(in[0]), k = readable<T>(in[1]), v = readable<T>(in[2]),
                      o = readable<T>(in[3]), go = readable<T>(in[5]);
    const Tensor lse = in[4].contiguous();
    BackwardArgs<T, C> args;
    args.q = q.operand;
    args.k = k.operand;
    args.v = v.operand;
    args.go = go.operand;
    args.p = problem_of<C>(in[0], in[1], in[2], a, in.size() > 6 ? &in[6] : nullptr, op);
    const Problem<C>& p = args.p;
    if (p.batch == 0) return;
    args.lse = static_cast<const C*>(lse.impl()->data());
    OutRows<T>* grads[3] = {&args.dq, &args.dk, &args.dv};
    for (int i = 0; i < 3; ++i) {
      const std::optional<OutRows<T>> r = out_rows<T>(out[size_t(i)]);
      EMBER_CHECK(r, op, ": the grads must be dense or 4-dim views with unit stride along their "
                  "last dim, got ", out[size_t(i)].shape_str());
      *grads[i] = *r;
    }
    const Tensor d = make_tensor({p.batch * p.L}, lse.dtype(), lse.device());
    args.d = static_cast<const C*>(d.impl()->data());
    constexpr int R = Tiles<C>::kRows;
    if (p.L > 0) {
      RowDotArgs<T, C> dot{o.operand, go.operand, static_cast<C*>(d.impl()->data()),
                           p.batch,   p.L,        p.F,
                           vec_loadable(o.operand, p.F) && vec_loadable(go.operand, p.F)};
      run(&attention_row_dot_kernel<T, C>,
          grid_blocks(1, (p.batch * p.L + kRowDotRows - 1) / kRowDotRows, op), size_t(0), dot);
    }
    if constexpr (std::is_same_v<C, float>) {
      // 16-bit heads of up to 64: tensor cores, reading the dropout flags drawn before them
      // (or ahead, by the attention_keep op whose words are the op's eighth input).
      Tensor bits;
      if (uint32_t* drawn = mma::drawn_words(in, 7, p, op)) {
        BackwardArgs<T, C> ahead = args;
        ahead.keep_bits = drawn;
        ahead.keep_drawn = true;
        if (mma::backward(ahead, run, op)) return;
      } else if (mma::keep_bits_workspace(p, 2, mma::takes(args), lse.device(), bits,
                                          args.keep_bits) &&
                 mma::backward(args, run, op)) {
        return;
      }
    }
    const bool vec = vec_loadable(args.q, p.E) && vec_loadable(args.k, p.E) &&
                     vec_loadable(args.v, p.F) && vec_loadable(args.go, p.F);
    const int64_t key_blocks = grid_blocks(p.batch, (p.S + R - 1) / R, op);
    const int64_t query_blocks = grid_blocks(p.batch, (p.L + R - 1) / R, op);
    auto launch = [&]<int kD, bool kVec>() {
      if (key_blocks > 0)
        run(&attention_dkdv_kernel<T, C, kD, kVec>, key_blocks, BackwardSmem<C, kD, 2>::bytes,
            args);
      if (query_blocks > 0)
        run(&attention_dq_kernel<T, C, kD, kVec>, query_blocks, BackwardSmem<C, kD, 1>::bytes,
            args);
    };
    if (kd == 64)
      vec ? launch.template operator()<64, true>() : launch.template operator()<64, false>();
    else
      vec ? launch.template operator()<128, true>() : launch.template operator()<128, false>();
  });
}

}  // namespace ember::cuda::attn
