// Op cases: cat (every dtype, zero-size parts, any dim) and stack built on it.
#include "support/op_cases.h"

namespace ember::test {

namespace {
Ref ref_cat(const std::vector<Ref>& parts, int64_t d) {
  Shape s = parts[0].shape;
  s[d] = 0;
  for (const Ref& p : parts) s[d] += p.shape[d];
  Ref out(s, 0.0);
  for (int64_t q = 0; q < out.numel(); ++q) {
    auto idx = out.index(q);
    int64_t pos = idx[d];
    for (const Ref& p : parts) {
      if (pos < p.shape[d]) {
        idx[d] = pos;
        out.v[q] = p.at(idx);
        break;
      }
      pos -= p.shape[d];
    }
  }
  return out;
}

OpCase cat_case(std::string name, int64_t d, std::vector<Shapes> shapes) {
  OpCase c;
  c.name = std::move(name);
  c.covers = {OpId::cat};
  c.shapes = std::move(shapes);
  c.dtypes = {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16,
              DType::Int32,   DType::Int64,   DType::Bool};
  c.make_inputs = [](const Shapes& s, DType t) {
    Inputs in;
    for (const Shape& sh : s)
      in.push_back(t == DType::Bool ? random_bool_tensor(sh) : random_tensor(sh, t));
    return in;
  };
  c.run = [d](const Inputs& in) { return Inputs{cat(in, d)}; };
  c.reference = [d](const std::vector<Ref>& r) {
    return std::vector<Ref>{ref_cat(r, d < 0 ? d + r[0].dim() : d)};
  };
  c.gradcheck = true;
  return c;
}
}  // namespace

EMBER_OP_CASES(cat) {
  std::vector<OpCase> cases;
  cases.push_back(
      cat_case("cat_dim0", 0, {{{2, 3}, {4, 3}, {0, 3}}, {{5}, {2}}, {{1, 2, 2}, {3, 2, 2}}}));
  cases.push_back(cat_case("cat_dim1", 1, {{{2, 3}, {2, 1}, {2, 5}}, {{3, 0, 2}, {3, 4, 2}}}));
  cases.push_back(cat_case("cat_last", -1, {{{2, 3, 4}, {2, 3, 1}}, {{4}}}));
  OpCase big_cat = cat_case("cat_parallel", 1, {{{300, 70}, {300, 90}}});
  big_cat.gradcheck = false;
  cases.push_back(big_cat);

  OpCase stk = cat_case("stack", 1, {{{2, 3}, {2, 3}, {2, 3}}, {{4}, {4}}, {{}, {}}});
  stk.run = [](const Inputs& in) { return Inputs{stack(in, 1 - (in[0].dim() == 0))}; };
  stk.reference = [](const std::vector<Ref>& r) {
    // stack(ts, d) = cat of each unsqueezed at d.
    const int64_t d = r[0].dim() == 0 ? 0 : 1;
    std::vector<Ref> parts;
    for (Ref p : r) {
      p.shape.insert(p.shape.begin() + d, 1);
      parts.push_back(p);
    }
    return std::vector<Ref>{ref_cat(parts, d)};
  };
  cases.push_back(stk);
  return cases;
}

}  // namespace ember::test
