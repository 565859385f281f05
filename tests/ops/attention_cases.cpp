// Op cases: scaled_dot_product_attention (a composite of table ops), with and without the
// causal mask, against a float64 loop implementation.
#include "support/op_cases.h"

namespace ember::test {

namespace {
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
  return cases;
}

}  // namespace ember::test
