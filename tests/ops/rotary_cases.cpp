// Op cases: rotary_embedding (half tables, transformers' full tables, broadcast tables) and
// swiglu against float64 loop references; gradchecked.
#include "support/op_cases.h"

namespace ember::test {

namespace {

// x [..., T, D]; tables [..., T, D/2] or [..., T, D] (broadcast from the right). Pair i of
// position t: (x[i], x[i + D/2]) -> (x[i] cos - x[i + D/2] sin, x[i + D/2] cos + x[i] sin);
// full tables give out[i] = x[i] cos[i] + rotate_half(x)[i] sin[i].
Ref ref_rotary(const Ref& x, const Ref& cos, const Ref& sin) {
  const int64_t D = x.shape.back(), half = D / 2, last = cos.shape.back();
  Ref out = x;
  auto table = [&](const Ref& t, std::vector<int64_t> idx, int64_t j) {
    idx.back() = j;
    std::vector<int64_t> ti(t.shape.size());
    for (size_t k = 0; k < ti.size(); ++k) {
      const size_t from_x = idx.size() - ti.size() + k;
      ti[k] = t.shape[k] == 1 ? 0 : idx[from_x];
    }
    return t.at(ti);
  };
  for (int64_t f = 0; f < x.numel(); ++f) {
    std::vector<int64_t> idx = x.index(f);
    const int64_t j = idx.back();
    std::vector<int64_t> partner = idx;
    partner.back() = j < half ? j + half : j - half;
    const double xj = x.v[size_t(f)], xp = x.at(partner);
    const int64_t a = last == D ? j : j % half;  // the table column of element j
    const double c = table(cos, idx, a), s = table(sin, idx, a);
    out.v[size_t(f)] = j < half ? xj * c - xp * s : xj * c + xp * s;
  }
  return out;
}

}  // namespace

EMBER_OP_CASES(rotary) {
  std::vector<OpCase> cases;
  struct R {
    std::string name;
    std::vector<Shapes> shapes;  // x, cos, sin
  };
  const std::vector<R> rotaries = {
      {"half_tables", {{{2, 3, 5, 8}, {5, 4}, {5, 4}}, {{4, 6}, {4, 3}, {4, 3}}}},
      {"full_tables", {{{2, 2, 3, 6}, {3, 6}, {3, 6}}}},
      {"broadcast_tables",
       {{{2, 3, 4, 4}, {2, 1, 4, 2}, {2, 1, 4, 2}}, {{2, 3, 4, 4}, {1, 2}, {1, 2}}}},
  };
  for (const R& k : rotaries) {
    OpCase c;
    c.name = "rotary_embedding_" + k.name;
    c.shapes = k.shapes;
    c.run = [](const Inputs& in) { return Inputs{rotary_embedding(in[0], in[1], in[2])}; };
    c.reference = [](const std::vector<Ref>& r) {
      return std::vector<Ref>{ref_rotary(r[0], r[1], r[2])};
    };
    c.gradcheck = true;
    c.tol_scale = 2;
    cases.push_back(std::move(c));
  }
  {
    OpCase c;
    c.name = "swiglu";
    c.shapes = {{{3, 8}, {3, 8}}, {{2, 3, 4}, {4}}, {{0, 5}, {0, 5}}};
    c.run = [](const Inputs& in) { return Inputs{swiglu(in[0], in[1])}; };
    c.reference = [](const std::vector<Ref>& r) {
      return std::vector<Ref>{
          ref_zip(r[0], r[1], [](double a, double b) { return a / (1 + std::exp(-a)) * b; })};
    };
    c.gradcheck = true;
    c.tol_scale = 2;
    cases.push_back(std::move(c));
  }
  return cases;
}

}  // namespace ember::test
