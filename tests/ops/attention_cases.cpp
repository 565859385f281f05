// Op cases: scaled_dot_product_attention (a composite of table ops on the CPU, the fused op on
// CUDA), with and without the causal mask, and the fused attention op called directly (its
// out and lse, its grad through attention_backward, and its dropout mask), and cached_attention
// over caches whose later slots a row must not see, against float64 loop implementations. The
// dropout reference decides each element from the Philox stream as dropout of the [..., L, S]
// probabilities would (core/philox.h, ops/defs/factory.def).
#include "core/philox.h"
#include "core/generator.h"
#include "dispatch/dispatcher.h"
#include "ops/attention.h"
#include "support/op_cases.h"

namespace ember::test {

namespace {
// An rng_state on q's device holding the draws of dropout over the [..., L, S] scores of q and
// k, reserved after manual_seed(kDropoutSeed) (so at offset 0 of that seed).
Tensor dropout_rng_state(const Tensor& q, const Tensor& k);
// The attention op's attrs for causal attention with dropout 0.3 from an rng_state input.
Attrs dropout_attrs(const Tensor& q) {
  Attrs a;
  a.flag = true;
  a.value = 0.3;
  a.value2 = 1 / std::sqrt(double(q.size(-1)));
  return a;
}

// q [B, L, E], k [B, S, E], v [B, S, F] -> [B, L, F]
Ref ref_attention(const Ref& q, const Ref& k, const Ref& v, bool causal) {
  int64_t B = q.shape[0], L = q.shape[1], E = q.shape[2], S = k.shape[1], F = v.shape[2];
  Ref out({B, L, F}, 0.0);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < L; ++i) {
      std::vector<double> w(size_t(S), -INFINITY);
      double mx = -INFINITY;
      for (int64_t j = 0; j < S; ++j) {
        if (causal && j > i) continue;
        double d = 0;
        for (int64_t e = 0; e < E; ++e) d += q.at({b, i, e}) * k.at({b, j, e});
        w[j] = d / std::sqrt(double(E));
        mx = std::max(mx, w[j]);
      }
      double z = 0;
      for (double& x : w) z += (x = std::exp(x - mx));
      for (int64_t f = 0; f < F; ++f) {
        double acc = 0;
        for (int64_t j = 0; j < S; ++j) acc += w[j] / z * v.at({b, j, f});
        out.at({b, i, f}) = acc;
      }
    }
  return out;
}
// The fused op's out and lse on q [..., L, E], k [..., S, E], v [..., S, F] (any batch dims),
// with dropout p drawn from (seed, offset 0): element n = (b * L + i) * S + j is kept where
// draw n is below (1 - p) * 2^32, and kept probabilities are scaled by 1 / (1 - p).
std::vector<Ref> ref_fused(const Ref& q, const Ref& k, const Ref& v, bool causal, double p,
                           uint64_t seed) {
  const int64_t L = q.shape.end()[-2], E = q.shape.back(), S = k.shape.end()[-2],
                F = v.shape.back();
  const int64_t batch = L * E > 0 ? q.numel() / (L * E) : 0;
  Shape out_shape = q.shape, lse_shape(q.shape.begin(), q.shape.end() - 1);
  out_shape.back() = F;
  Ref out(out_shape, 0.0), lse(lse_shape, -INFINITY);
  const uint64_t threshold = uint64_t((1 - p) * 4294967296.0);
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t i = 0; i < L; ++i) {
      const int64_t n = causal ? std::min(S, i + 1) : S;
      if (n == 0) continue;
      std::vector<double> w(static_cast<size_t>(n));
      double mx = -INFINITY;
      for (int64_t j = 0; j < n; ++j) {
        double d = 0;
        for (int64_t e = 0; e < E; ++e) d += q.v[(b * L + i) * E + e] * k.v[(b * S + j) * E + e];
        w[j] = d / std::sqrt(double(E));
        mx = std::max(mx, w[j]);
      }
      double z = 0;
      for (double& x : w) z += (x = std::exp(x - mx));
      lse.v[b * L + i] = mx + std::log(z);
      for (int64_t j = 0; j < n; ++j) {
        double keep = 1;
        if (p > 0) {
          const uint64_t draw = philox::draw(seed, uint64_t((b * L + i) * S + j));
          keep = uint64_t(draw) < threshold ? 1 / (1 - p) : 0;
        }
        for (int64_t f = 0; f < F; ++f)
          out.v[(b * L + i) * F + f] += w[j] / z * keep * v.v[(b * S + j) * F + f];
      }
    }
  return {out, lse};
}

constexpr uint64_t kDropoutSeed = 0xa77e5eedull;

Tensor dropout_rng_state(const Tensor& q, const Tensor& k) {
  manual_seed(kDropoutSeed);
  const uint64_t draws = uint64_t(q.numel() / q.size(-1) * k.size(-2));
  const RandomRange r = reserve_random(draws, "test");
  Attrs s;
  s.shape = {2};
  s.dtype = DType::Int64;
  s.device = q.device();
  s.end = int64_t(draws);
  s.seed = r.seed;
  s.offset = r.offset;
  return dispatch1(OpId::rng_state, {}, s);
}

// The attention_keep op's attrs for attention of q and k under dropout_attrs.
Attrs keep_attrs(const Tensor& q, const Tensor& k) {
  Attrs a;
  a.shape = {q.numel() / (q.size(-2) * q.size(-1)), q.size(-2), k.size(-2)};
  a.value = 0.3;
  a.flag = true;
  return a;
}

// attention_keep's words for scores [batch, L, S] from draws at (seed, offset 0): tile by tile
// (64 x 64), 128 words a tile, all tiles query-major then all key-major; word w = 32 m + 4 g + q
// holds at bit 4 n + 2 h + e the flag of row 16 m + g + 8 h, col 8 n + 2 q + e of the tile
// (query row and key col, or key row and query col), 0 past the edges and under the mask.
Ref ref_keep_words(int64_t batch, int64_t L, int64_t S, bool causal, double p, uint64_t seed) {
  const uint64_t threshold = uint64_t((1 - p) * 4294967296.0);
  const int64_t qt = (L + 63) / 64, kt = (S + 63) / 64, tiles = batch * qt * kt;
  Ref out({2 * tiles * 128}, 0.0);
  auto kept = [&](int64_t b, int64_t i, int64_t j) -> uint32_t {
    if (i >= L || j >= S || (causal && j > i)) return 0;
    return philox::draw(seed, uint64_t((b * L + i) * S + j)) < threshold ? 1 : 0;
  };
  for (int64_t t = 0; t < tiles; ++t) {
    const int64_t b = t / (qt * kt), r0 = t / kt % qt * 64, c0 = t % kt * 64;
    for (int64_t w = 0; w < 128; ++w) {
      uint32_t by_query = 0, by_key = 0;
      for (int n = 0; n < 8; ++n)
        for (int h = 0; h < 2; ++h)
          for (int e = 0; e < 2; ++e) {
            const int64_t row = 16 * (w / 32) + w % 32 / 4 + 8 * h, col = 8 * n + 2 * (w % 4) + e;
            by_query |= kept(b, r0 + row, c0 + col) << (4 * n + 2 * h + e);
            by_key |= kept(b, r0 + col, c0 + row) << (4 * n + 2 * h + e);
          }
      out.v[size_t(t * 128 + w)] = double(int32_t(by_query));
      out.v[size_t((tiles + t) * 128 + w)] = double(int32_t(by_key));
    }
  }
  return out;
}
}  // namespace

EMBER_OP_CASES(attention) {
  std::vector<OpCase> cases;
  for (bool causal : {false, true}) {
    OpCase c;
    c.name = causal ? "sdpa_causal" : "sdpa";
    c.shapes = {{{1, 4, 3}, {1, 4, 3}, {1, 4, 2}}, {{2, 5, 4}, {2, 5, 4}, {2, 5, 3}}};
    if (!causal) c.shapes.push_back({{2, 3, 4}, {2, 6, 4}, {2, 6, 5}});
    c.dtypes = {DType::Float32, DType::Float64, DType::BFloat16};
    c.run = [causal](const Inputs& in) {
      return Inputs{scaled_dot_product_attention(in[0], in[1], in[2], causal)};
    };
    c.reference = [causal](const std::vector<Ref>& r) {
      return std::vector<Ref>{ref_attention(r[0], r[1], r[2], causal)};
    };
    c.gradcheck = true;
    c.tol_scale = 4;
    cases.push_back(c);
  }
  // The fused op, called directly on every device (lse detached: it has no grad). Batch dims
  // [2, 3], L != S, E != F, more queries than keys (causal rows past S see every key), and no
  // keys at all (out 0, lse -inf).
  for (bool causal : {false, true}) {
    OpCase c;
    c.name = causal ? "attention_causal" : "attention";
    c.covers = {OpId::attention, OpId::attention_backward};
    c.shapes = {{{2, 3, 5, 4}, {2, 3, 7, 4}, {2, 3, 7, 6}},
                {{1, 4, 3}, {1, 4, 3}, {1, 4, 2}},
                {{2, 6, 4}, {2, 3, 4}, {2, 3, 5}},
                {{2, 3, 4}, {2, 0, 4}, {2, 0, 5}}};
    c.run = [causal](const Inputs& in) {
      AttentionResult r = fused_attention(in[0], in[1], in[2], causal, 0.0, std::nullopt);
      return Inputs{r.out, r.lse.detach()};
    };
    c.reference = [causal](const std::vector<Ref>& r) {
      return ref_fused(r[0], r[1], r[2], causal, 0.0, 0);
    };
    c.gradcheck = true;
    c.tol_scale = 4;
    cases.push_back(c);
  }
  // With dropout 0.3 from a fixed seed: the kept elements are the reference's. No gradcheck
  // here (tests/ops/attention_test.cpp reseeds for that). Under capture the fused op draws from
  // an rng_state node, which the case covers, so compiled tests, which cannot reseed inside a
  // compiled function, leave it out as they leave out every random op's case.
  for (bool causal : {false, true}) {
    OpCase c;
    c.name = causal ? "attention_dropout_causal" : "attention_dropout";
    c.covers = {OpId::rng_state};
    c.shapes = {{{2, 3, 6, 4}, {2, 3, 9, 4}, {2, 3, 9, 5}}, {{3, 8, 3}, {3, 5, 3}, {3, 5, 2}}};
    c.run = [causal](const Inputs& in) {
      manual_seed(kDropoutSeed);
      AttentionResult r = fused_attention(in[0], in[1], in[2], causal, 0.3, std::nullopt);
      return Inputs{r.out, r.lse};
    };
    c.reference = [causal](const std::vector<Ref>& r) {
      return ref_fused(r[0], r[1], r[2], causal, 0.3, kDropoutSeed);
    };
    c.tol_scale = 4;
    cases.push_back(c);
  }
  // The same draws from an rng_state tensor (what capture passes instead of the attrs): the
  // op with a fourth input keeps the elements the front end's call keeps; and with the flags
  // drawn ahead from it by attention_keep as a fifth, the same (on a GPU, 16-bit heads of 64 run
  // the tensor-core kernels, which then read the words instead of drawing).
  for (bool ahead : {false, true}) {
    OpCase c;
    c.name = ahead ? "attention_dropout_keep_ahead" : "attention_dropout_rng_state";
    c.covers = {OpId::rng_state};
    c.shapes = {{{2, 3, 6, 4}, {2, 3, 9, 4}, {2, 3, 9, 5}}};
    if (ahead) {
      c.covers.push_back(OpId::attention_keep);
      c.shapes.push_back({{2, 3, 70, 64}, {2, 3, 90, 64}, {2, 3, 90, 64}});
    }
    c.run = [ahead](const Inputs& in) {
      const Tensor rng = dropout_rng_state(in[0], in[1]);
      std::vector<Tensor> ins{in[0], in[1], in[2], rng};
      if (ahead) ins.push_back(dispatch1(OpId::attention_keep, {rng}, keep_attrs(in[0], in[1])));
      std::vector<Tensor> outs = dispatch(OpId::attention, std::move(ins), dropout_attrs(in[0]));
      return Inputs{outs[0], outs[1]};
    };
    c.reference = [](const std::vector<Ref>& r) {
      return ref_fused(r[0], r[1], r[2], true, 0.3, kDropoutSeed);
    };
    c.tol_scale = 4;
    c.strided = false;
    cases.push_back(c);
  }
  // attention_keep: the flags drawn ahead, word for word against the layout computed here. It
  // reseeds (rng_state), which compiled tests leave out, as above.
  {
    OpCase c;
    c.name = "attention_keep";
    c.covers = {OpId::attention_keep, OpId::rng_state};
    c.dtypes = {DType::Float32};  // the inputs only carry the shapes and the device
    c.shapes = {{{3, 70, 64}, {3, 150, 64}}, {{2, 2, 130, 8}, {2, 2, 65, 8}}};
    c.run = [](const Inputs& in) {
      return Inputs{dispatch1(OpId::attention_keep, {dropout_rng_state(in[0], in[1])},
                              keep_attrs(in[0], in[1]))};
    };
    c.reference = [](const std::vector<Ref>& r) {
      const int64_t L = r[0].shape.end()[-2], S = r[1].shape.end()[-2];
      return std::vector<Ref>{
          ref_keep_words(r[0].numel() / (L * r[0].shape.back()), L, S, true, 0.3, kDropoutSeed)};
    };
    c.strided = false;
    cases.push_back(c);
  }
  // cached_attention: new positions pos .. pos + L - 1 over caches of S slots, the slots after
  // a row's position holding values it must not see. pos at the caches' end, in their middle,
  // and past it (the rows see every slot); a GPT-2 decode step's shape.
  struct PosRule {
    const char* name;
    int64_t (*pos)(int64_t L, int64_t S);
  };
  for (PosRule rule : {PosRule{"end", [](int64_t L, int64_t S) { return S - L; }},
                       PosRule{"middle", [](int64_t L, int64_t S) { return (S - L) / 2; }},
                       PosRule{"past", [](int64_t, int64_t S) { return S + 2; }}}) {
    OpCase c;
    c.name = std::string("cached_attention_") + rule.name;
    c.covers = {OpId::cached_attention};
    c.shapes = {{{2, 3, 1, 8}, {2, 3, 10, 8}, {2, 3, 10, 6}, {1}},
                {{2, 4, 5}, {2, 9, 5}, {2, 9, 4}, {1}},
                {{3, 4}, {7, 4}, {7, 5}, {1}}};
    if (std::string(rule.name) == "end")
      c.shapes.push_back({{1, 12, 1, 64}, {1, 12, 1024, 64}, {1, 12, 1024, 64}, {1}});
    c.make_inputs = [rule](const Shapes& s, DType t) {
      const int64_t L = s[0].end()[-2], S = s[1].end()[-2];
      return Inputs{random_tensor(s[0], t), random_tensor(s[1], t), random_tensor(s[2], t),
                    full({1}, double(rule.pos(L, S)), TensorOptions(DType::Int64))};
    };
    c.run = [](const Inputs& in) {
      return Inputs{cached_attention(in[0], in[1], in[2], in[3])};
    };
    c.reference = [](const std::vector<Ref>& r) {
      const Ref &q = r[0], &k = r[1], &v = r[2];
      const int64_t L = q.shape.end()[-2], E = q.shape.back(), S = k.shape.end()[-2],
                    F = v.shape.back(), pos = int64_t(r[3].v[0]);
      const int64_t batch = q.numel() / (L * E);
      Shape out_shape = q.shape;
      out_shape.back() = F;
      Ref out(out_shape, 0.0);
      for (int64_t b = 0; b < batch; ++b)
        for (int64_t i = 0; i < L; ++i) {
          const int64_t n = std::clamp<int64_t>(pos + i + 1, 0, S);
          std::vector<double> w(static_cast<size_t>(n));
          double mx = -INFINITY, z = 0;
          for (int64_t j = 0; j < n; ++j) {
            double d = 0;
            for (int64_t e = 0; e < E; ++e)
              d += q.v[(b * L + i) * E + e] * k.v[(b * S + j) * E + e];
            w[size_t(j)] = d / std::sqrt(double(E));
            mx = std::max(mx, w[size_t(j)]);
          }
          for (double& x : w) z += (x = std::exp(x - mx));
          for (int64_t j = 0; j < n; ++j)
            for (int64_t f = 0; f < F; ++f)
              out.v[(b * L + i) * F + f] += w[size_t(j)] / z * v.v[(b * S + j) * F + f];
        }
      return std::vector<Ref>{out};
    };
    c.tol_scale = 4;
    cases.push_back(c);
  }
  return cases;
}

}  // namespace ember::test
