// Fused attention on the CPU, row by row: the scores of one query row against its visible keys,
// their max and logsumexp, then the output row as the probability-weighted sum of value rows
// (with dropout: only the kept probabilities, scaled by 1/(1-p), while the logsumexp is that of
// all of them). The backward recomputes each probability from the saved logsumexp. Arithmetic
// in double for float64 and in float otherwise; 16-bit inputs are widened once up front. These
// loops are the reference of the CUDA kernels (kernels/cuda/attention_*.cu), which compute the
// same formulas tile by tile.
#include "kernels/cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/philox.h"
#include "core/shape.h"
#include "kernels/attention_keep.h"
#include "kernels/attention_layout.h"
#include "kernels/cpu/reduce_loops.h"
#include "kernels/cpu/rowwise_buffers.h"

namespace ember::cpu {

namespace {

// Sizes of q [..., L, E], k [..., S, E], v [..., S, F], and the attrs, as the loops use them.
struct Dims {
  int64_t L, S, E, F, batch = 0;
  bool causal;
  double scale;
  // Dropout: element n of the [batch, L, S] draw is kept where its Philox word is below
  // `threshold` (core/philox.h, as the bernoulli op decides it); kept values scale by inv_keep.
  bool dropout;
  uint64_t seed, offset, threshold;
  double inv_keep;

  Dims(const Tensor& q, const Tensor& k, const Tensor& v, const Attrs& a)
      : L(q.size(-2)),
        S(k.size(-2)),
        E(q.size(-1)),
        F(v.size(-1)),
        causal(a.flag),
        scale(a.value2),
        dropout(a.value > 0),
        seed(a.seed),
        offset(a.offset),
        threshold(philox::bernoulli_threshold(1 - a.value)),
        inv_keep(1 / (1 - a.value)) {
    batch = shape_numel(Shape(q.sizes().begin(), q.sizes().end() - 2));
  }
  // With the draws' range from an rng_state tensor (the op's optional last input).
  Dims(const Tensor& q, const Tensor& k, const Tensor& v, const Attrs& a, const Tensor* rng)
      : Dims(q, k, v, a) {
    if (!rng) return;
    const int64_t* r = static_cast<const int64_t*>(rng->impl()->data());
    seed = uint64_t(r[0]);
    offset = uint64_t(r[1]);
  }
  // cached_attention's rows: query row i is at position cached_pos + i.
  bool cached = false;
  int64_t cached_pos = 0;
  // Keys query row i sees: 0..i when causal (top-left aligned), 0..cached_pos + i (those that
  // exist) for a cached attention, all of them otherwise.
  int64_t visible(int64_t i) const {
    if (cached) return std::clamp<int64_t>(cached_pos + i + 1, 0, S);
    return causal ? std::min(S, i + 1) : S;
  }
  // The factor of probability (b, i, j): 1 without dropout, else inv_keep or 0.
  template <class C>
  C keep_factor(int64_t b, int64_t i, int64_t j) const {
    if (!dropout) return C(1);
    const uint64_t n = uint64_t((b * L + i) * S + j);
    return philox::bernoulli(philox::draw(seed, offset + n), threshold) ? C(inv_keep) : C(0);
  }
};

template <class C>
const C* data_of(const Tensor& t) {
  return static_cast<const C*>(t.impl()->data());
}
template <class C>
C* data_of(Tensor& t) {
  return static_cast<C*>(t.impl()->data());
}

template <class C>
C dot(const C* a, const C* b, int64_t n) {
  C s = 0;
  for (int64_t e = 0; e < n; ++e) s += a[e] * b[e];
  return s;
}

// One query row: out_row and the row's logsumexp. `s` is scratch of S scores.
template <class C>
C forward_row(const Dims& d, int64_t b, int64_t i, const C* q, const C* k, const C* v, C* out_row,
              std::vector<C>& s) {
  const int64_t n = d.visible(i);
  C m = -INFINITY;
  for (int64_t j = 0; j < n; ++j) {
    s[j] = dot(q + i * d.E, k + j * d.E, d.E) * C(d.scale);
    m = std::max(m, s[j]);
  }
  std::fill(out_row, out_row + d.F, C(0));
  // No key, or every score -inf: nothing to attend to (out 0, lse -inf) rather than 0/0.
  if (n == 0 || m == -INFINITY) return C(-INFINITY);
  C l = 0;
  for (int64_t j = 0; j < n; ++j) l += (s[j] = std::exp(s[j] - m));
  const C inv_l = C(1) / l;
  for (int64_t j = 0; j < n; ++j) {
    const C p = s[j] * inv_l * d.keep_factor<C>(b, i, j);
    if (p == 0) continue;
    const C* vj = v + j * d.F;
    for (int64_t f = 0; f < d.F; ++f) out_row[f] += p * vj[f];
  }
  return m + std::log(l);
}

}  // namespace

void attention(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  if (attention_layout::heads_inner(a))
    return attention_layout::forward(in, out, a, attention, /*writes_strided=*/false);
  const Tensor q = compute_contiguous(in[0]), k = compute_contiguous(in[1]),
               v = compute_contiguous(in[2]);
  const Dims d(in[0], in[1], in[2], a, in.size() > 3 ? &in[3] : nullptr);
  Tensor o = compute_buffer(out[0]);
  Tensor lse = out[1];  // already in the compute dtype, contiguous
  visit_compute(q.dtype(), [&]<class C>() {
    const C *qp = data_of<C>(q), *kp = data_of<C>(k), *vp = data_of<C>(v);
    C* op = data_of<C>(o);
    C* lp = data_of<C>(lse);
    const int64_t rows = d.batch * d.L;
#pragma omp parallel if (use_threads(rows * d.S * (d.E + d.F)) && rows > 1)
    {
      std::vector<C> s(size_t(d.S));
#pragma omp for schedule(static)
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t b = r / d.L, i = r % d.L;
        lp[r] = forward_row(d, b, i, qp + b * d.L * d.E, kp + b * d.S * d.E, vp + b * d.S * d.F,
                            op + r * d.F, s);
      }
    }
  });
  store_buffer(o, out[0]);
}

// With P = exp(scores - lse), Z the dropout factors and D_i = dO_i . O_i:
//   dV += (P Z)^T dO,  dS = P (dO V^T Z - D),  dQ = dS K * scale,  dK = dS^T Q * scale.
// Batches run in parallel (dK and dV sum over the rows of one batch).
void attention_backward(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  if (attention_layout::heads_inner(a))
    return attention_layout::backward(in, out, a, attention_backward, /*writes_strided=*/false);
  const Tensor q = compute_contiguous(in[0]), k = compute_contiguous(in[1]),
               v = compute_contiguous(in[2]), o = compute_contiguous(in[3]),
               lse = compute_contiguous(in[4]), go = compute_contiguous(in[5]);
  const Dims d(in[0], in[1], in[2], a, in.size() > 6 ? &in[6] : nullptr);
  Tensor dq = compute_buffer(out[0]), dk = compute_buffer(out[1]), dv = compute_buffer(out[2]);
  visit_compute(q.dtype(), [&]<class C>() {
    const C *qp = data_of<C>(q), *kp = data_of<C>(k), *vp = data_of<C>(v), *op = data_of<C>(o),
            *lp = data_of<C>(lse), *gp = data_of<C>(go);
    C *dqp = data_of<C>(dq), *dkp = data_of<C>(dk), *dvp = data_of<C>(dv);
    std::fill(dqp, dqp + dq.numel(), C(0));
    std::fill(dkp, dkp + dk.numel(), C(0));
    std::fill(dvp, dvp + dv.numel(), C(0));
    const C scale = C(d.scale);
#pragma omp parallel for schedule(static) if (use_threads(d.batch * d.L * d.S * (d.E + d.F)) && \
                                              d.batch > 1)
    for (int64_t b = 0; b < d.batch; ++b) {
      const C *qb = qp + b * d.L * d.E, *kb = kp + b * d.S * d.E, *vb = vp + b * d.S * d.F;
      C *dqb = dqp + b * d.L * d.E, *dkb = dkp + b * d.S * d.E, *dvb = dvp + b * d.S * d.F;
      for (int64_t i = 0; i < d.L; ++i) {
        const int64_t r = b * d.L + i;
        const C lse_i = lp[r];
        if (lse_i == -INFINITY) continue;  // a row that saw no key: every probability is 0
        const C* go_i = gp + r * d.F;
        const C D = dot(go_i, op + r * d.F, d.F);
        const C* q_i = qb + i * d.E;
        C* dq_i = dqb + i * d.E;
        for (int64_t j = 0, n = d.visible(i); j < n; ++j) {
          const C* k_j = kb + j * d.E;
          const C* v_j = vb + j * d.F;
          const C p = std::exp(dot(q_i, k_j, d.E) * scale - lse_i);
          const C z = d.keep_factor<C>(b, i, j);
          const C pz = p * z;
          C* dv_j = dvb + j * d.F;
          for (int64_t f = 0; f < d.F; ++f) dv_j[f] += pz * go_i[f];
          const C ds = p * (dot(go_i, v_j, d.F) * z - D) * scale;
          C* dk_j = dkb + j * d.E;
          for (int64_t e = 0; e < d.E; ++e) {
            dq_i[e] += ds * k_j[e];
            dk_j[e] += ds * q_i[e];
          }
        }
      }
    }
  });
  store_buffer(dq, out[0]);
  store_buffer(dk, out[1]);
  store_buffer(dv, out[2]);
}

// Each query row over the cache slots it sees, as the attention op's rows (no dropout; a row
// that sees no slot gives 0).
void cached_attention(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  const Tensor q = compute_contiguous(in[0]), k = compute_contiguous(in[1]),
               v = compute_contiguous(in[2]);
  Attrs plain;
  plain.value2 = a.value2;
  Dims d(q, k, v, plain);
  d.cached = true;
  d.cached_pos = *static_cast<const int64_t*>(in[3].impl()->data());
  Tensor o = compute_buffer(out[0]);
  visit_compute(q.dtype(), [&]<class C>() {
    const C *qp = data_of<C>(q), *kp = data_of<C>(k), *vp = data_of<C>(v);
    C* op = data_of<C>(o);
    const int64_t rows = d.batch * d.L;
#pragma omp parallel if (use_threads(rows * d.S * (d.E + d.F)) && rows > 1)
    {
      std::vector<C> s(static_cast<size_t>(d.S));
#pragma omp for schedule(static)
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t b = r / d.L, i = r % d.L;
        forward_row(d, b, i, qp + b * d.L * d.E, kp + b * d.S * d.E, vp + b * d.S * d.F,
                    op + r * d.F, s);
      }
    }
  });
  store_buffer(o, out[0]);
}

// The flags tile by tile, word by word, as kernels/attention_keep.h lays them out.
void attention_keep(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  namespace ak = ::ember::attention_keep;
  const int64_t batch = a.shape[0], L = a.shape[1], S = a.shape[2];
  const Tensor rng = in[0].contiguous();
  const int64_t* r = static_cast<const int64_t*>(rng.impl()->data());
  const uint64_t seed = uint64_t(r[0]), offset = uint64_t(r[1]);
  const uint64_t threshold = philox::bernoulli_threshold(1 - a.value);
  const bool causal = a.flag;
  uint32_t* words = static_cast<uint32_t*>(out[0].impl()->data());
  const int64_t qt = (L + ak::kTileRows - 1) / ak::kTileRows;
  const int64_t kt = (S + ak::kTileRows - 1) / ak::kTileRows;
  const int64_t tiles = ak::tiles(batch, L, S);
  // Whether query row i keeps key col j (0 past the edges and under the causal mask).
  auto keep = [&](int64_t b, int64_t i, int64_t j) -> uint32_t {
    if (i >= L || j >= S || (causal && j > i)) return 0;
    const uint64_t n = uint64_t((b * L + i) * S + j);
    return philox::bernoulli(philox::draw(seed, offset + n), threshold) ? 1u : 0u;
  };
#pragma omp parallel for schedule(static) if (use_threads(tiles * ak::kTileRows * ak::kTileRows))
  for (int64_t t = 0; t < tiles; ++t) {
    const int64_t b = t / (qt * kt), qi = t / kt % qt, kj = t % kt;
    const int64_t r0 = qi * ak::kTileRows, c0 = kj * ak::kTileRows;
    for (int64_t w = 0; w < ak::kTileWords; ++w) {
      const int64_t warp = w / 32, g = w % 32 / 4, q = w % 4;
      uint32_t by_query = 0, by_key = 0;
      for (int n = 0; n < 8; ++n)
        for (int h = 0; h < 2; ++h)
          for (int e = 0; e < 2; ++e) {
            const int64_t row = 16 * warp + g + 8 * h, col = 8 * n + 2 * q + e;
            by_query |= keep(b, r0 + row, c0 + col) << ak::bit(n, h, e);
            by_key |= keep(b, r0 + col, c0 + row) << ak::bit(n, h, e);
          }
      words[t * ak::kTileWords + w] = by_query;
      words[(tiles + t) * ak::kTileWords + w] = by_key;
    }
  }
}

}  // namespace ember::cpu
