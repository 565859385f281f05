// Op cases: composites of table ops from the model families (rms_norm, roll, pad, one_hot,
// einsum) against float64 loop references; gradchecked where differentiable.
#include <map>

#include "support/op_cases.h"

namespace ember::test {

namespace {

Ref ref_rms_norm(const Ref& x, const Ref* w, double eps) {
  const int64_t n = x.shape.back(), rows = n ? x.numel() / n : 0;
  Ref out = x;
  for (int64_t r = 0; r < rows; ++r) {
    double ms = 0;
    for (int64_t i = 0; i < n; ++i) ms += x.v[r * n + i] * x.v[r * n + i] / double(n);
    for (int64_t i = 0; i < n; ++i)
      out.v[r * n + i] = x.v[r * n + i] / std::sqrt(ms + eps) * (w ? w->v[i] : 1.0);
  }
  return out;
}

// out[p] = x[p with coordinate d moved back by shift (circularly)].
Ref ref_roll(const Ref& x, int64_t shift, int64_t d) {
  Ref out = x;
  const int64_t n = x.shape[size_t(d)];
  for (int64_t f = 0; f < x.numel(); ++f) {
    std::vector<int64_t> idx = x.index(f);
    idx[size_t(d)] = ((idx[size_t(d)] - shift) % n + n) % n;
    out.v[size_t(f)] = x.at(idx);
  }
  return out;
}

// Pads the last dim by (left, right) (negative crops) with value.
Ref ref_pad_last(const Ref& x, int64_t left, int64_t right, double value) {
  Shape s = x.shape;
  const int64_t n = s.back(), m = n + left + right;
  s.back() = m;
  Ref out(s, value);
  for (int64_t f = 0; f < out.numel(); ++f) {
    std::vector<int64_t> idx = out.index(f);
    const int64_t src = idx.back() - left;
    if (src < 0 || src >= n) continue;
    idx.back() = src;
    out.v[size_t(f)] = x.at(idx);
  }
  return out;
}

// einsum by brute force over every assignment of the letters.
Ref ref_einsum(const std::vector<std::string>& ins, const std::string& out,
               const std::vector<Ref>& r) {
  std::map<char, int64_t> size;
  for (size_t k = 0; k < ins.size(); ++k)
    for (size_t i = 0; i < ins[k].size(); ++i) size[ins[k][i]] = r[k].shape[i];
  std::string letters;
  for (auto& [c, n] : size) letters += c;
  Shape os;
  for (char c : out) os.push_back(size[c]);
  Ref result(os, 0.0);
  std::map<char, int64_t> at;
  for (char c : letters) at[c] = 0;
  int64_t total = 1;
  for (char c : letters) total *= size[c];
  for (int64_t f = 0; f < total; ++f) {
    int64_t rest = f;
    for (size_t i = letters.size(); i-- > 0;) {
      at[letters[i]] = rest % size[letters[i]];
      rest /= size[letters[i]];
    }
    double prod = 1;
    for (size_t k = 0; k < ins.size(); ++k) {
      std::vector<int64_t> idx;
      for (char c : ins[k]) idx.push_back(at[c]);
      prod *= r[k].at(idx);
    }
    std::vector<int64_t> oi;
    for (char c : out) oi.push_back(at[c]);
    result.at(oi) += prod;
  }
  return result;
}

}  // namespace

EMBER_OP_CASES(composites) {
  std::vector<OpCase> cases;
  for (bool weighted : {false, true}) {
    OpCase c;
    c.name = weighted ? "rms_norm_weighted" : "rms_norm";
    c.shapes = {{{4, 10}, {10}}, {{2, 3, 8}, {8}}, {{0, 5}, {5}}};
    c.run = [weighted](const Inputs& in) {
      return Inputs{rms_norm(in[0], in[1].sizes(), weighted ? in[1] : Tensor(), 1e-5)};
    };
    c.reference = [weighted](const std::vector<Ref>& r) {
      return std::vector<Ref>{ref_rms_norm(r[0], weighted ? &r[1] : nullptr, 1e-5)};
    };
    if (!weighted) c.grad_inputs = {0};
    c.gradcheck = true;
    c.tol_scale = 2;
    cases.push_back(std::move(c));
  }
  for (int64_t shift : {1, -3, 7}) {
    OpCase c;
    c.name = "roll_" + std::to_string(shift);
    c.shapes = {{{5}}, {{3, 4}}, {{2, 3, 6}}};
    c.run = [shift](const Inputs& in) { return Inputs{roll(in[0], {shift}, {-1})}; };
    c.reference = [shift](const std::vector<Ref>& r) {
      return std::vector<Ref>{ref_roll(r[0], shift, r[0].dim() - 1)};
    };
    c.gradcheck = true;
    cases.push_back(std::move(c));
  }
  const int64_t pads[3][2] = {{2, 1}, {0, 3}, {-1, 2}};
  for (const auto& lr : pads) {
    const int64_t left = lr[0], right = lr[1];
    OpCase c;
    c.name = "pad_" + std::to_string(left) + "_" + std::to_string(right);
    c.shapes = {{{5}}, {{3, 4}}};
    c.run = [left, right](const Inputs& in) { return Inputs{pad(in[0], {left, right}, 0.5)}; };
    c.reference = [left, right](const std::vector<Ref>& r) {
      return std::vector<Ref>{ref_pad_last(r[0], left, right, 0.5)};
    };
    c.gradcheck = true;
    cases.push_back(std::move(c));
  }
  {
    OpCase c;
    c.name = "one_hot";
    c.shapes = {{{6}}, {{2, 3}}};
    c.dtypes = {DType::Int64};
    c.make_inputs = [](const Shapes& s, DType t) { return Inputs{random_int_tensor(s[0], 0, 5, t)}; };
    c.run = [](const Inputs& in) { return Inputs{one_hot(in[0], 5)}; };
    c.reference = [](const std::vector<Ref>& r) {
      Shape s = r[0].shape;
      s.push_back(5);
      Ref out(s, 0.0);
      for (int64_t f = 0; f < r[0].numel(); ++f) out.v[size_t(f * 5 + int64_t(r[0].v[size_t(f)]))] = 1;
      return std::vector<Ref>{out};
    };
    cases.push_back(std::move(c));
  }
  struct Eq {
    std::string eq;
    std::vector<std::string> ins;
    std::string out;
    Shapes shapes;
  };
  const std::vector<Eq> eqs = {
      {"ij,jk->ik", {"ij", "jk"}, "ik", {{3, 4}, {4, 5}}},
      {"bij,bjk->bik", {"bij", "bjk"}, "bik", {{2, 3, 4}, {2, 4, 5}}},
      {"bhqd,bhkd->bhqk", {"bhqd", "bhkd"}, "bhqk", {{2, 2, 3, 4}, {2, 2, 5, 4}}},
      {"i,j->ij", {"i", "j"}, "ij", {{3}, {4}}},
      {"ijk,jl->li", {"ijk", "jl"}, "li", {{2, 3, 4}, {3, 5}}},
      {"ij,jk", {"ij", "jk"}, "ik", {{3, 4}, {4, 2}}},
      {"ij->ji", {"ij"}, "ji", {{3, 4}}},
      {"ijk->j", {"ijk"}, "j", {{2, 3, 4}}},
  };
  for (const Eq& q : eqs) {
    OpCase c;
    c.name = "einsum_" + q.eq;
    c.shapes = {q.shapes};
    c.run = [q](const Inputs& in) { return Inputs{einsum(q.eq, in)}; };
    c.reference = [q](const std::vector<Ref>& r) {
      return std::vector<Ref>{ref_einsum(q.ins, q.out, r)};
    };
    c.gradcheck = true;
    c.tol_scale = 2;
    cases.push_back(std::move(c));
  }
  return cases;
}

}  // namespace ember::test
