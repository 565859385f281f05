// Op cases: nonzero, whose output size depends on the input's values.
#include "support/op_cases.h"

namespace ember::test {

namespace {

// Inputs with many exact zeros, so the result is neither empty nor everything.
Tensor sparse_values(const Shape& s, DType t) {
  Tensor r = random_int_tensor(s, -2, 3, DType::Int64);
  Tensor keep = random_bool_tensor(s);
  return r.masked_fill(keep, 0.0).to(t);
}

Ref ref_nonzero(const Ref& x) {
  std::vector<double> v;
  int64_t n = 0;
  for (int64_t p = 0; p < x.numel(); ++p) {
    if (x.v[size_t(p)] == 0) continue;
    for (int64_t i : x.index(p)) v.push_back(double(i));
    ++n;
  }
  return Ref({n, x.dim()}, std::move(v));
}

}  // namespace

EMBER_OP_CASES(nonzero) {
  OpCase c;
  c.name = "nonzero";
  c.covers = {OpId::nonzero};
  c.shapes = {{{7}}, {{3, 4}}, {{2, 3, 4}}, {{0, 3}}, {{}}};
  c.dtypes = {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16,
              DType::Int32,   DType::Int64,   DType::Bool};
  c.make_inputs = [](const Shapes& s, DType t) { return Inputs{sparse_values(s[0], t)}; };
  c.run = [](const Inputs& in) { return Inputs{nonzero(in[0])}; };
  c.reference = [](const std::vector<Ref>& r) { return std::vector<Ref>{ref_nonzero(r[0])}; };
  return {c};
}

}  // namespace ember::test
