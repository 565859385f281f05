// Op cases: views (and the slice_backward op that their grads use).
#include "support/op_cases.h"

namespace ember::test {

namespace {
OpCase view_case(std::string name, OpId op, std::vector<Shapes> shapes,
                 std::function<Tensor(const Tensor&)> f,
                 std::function<Ref(const Ref&)> ref) {
  OpCase c;
  c.name = std::move(name);
  c.covers = {op};
  c.shapes = std::move(shapes);
  c.dtypes = {DType::Float32, DType::Float64, DType::Float16, DType::Int64};
  c.run = [f](const Inputs& in) { return Inputs{f(in[0]).contiguous()}; };
  c.reference = [ref](const std::vector<Ref>& r) { return std::vector<Ref>{ref(r[0])}; };
  c.gradcheck = true;
  return c;
}

Ref ref_slice(const Ref& a, int64_t dim, int64_t start, int64_t end, int64_t step) {
  Shape s = a.shape;
  s[dim] = std::max<int64_t>(0, (end - start + step - 1) / step);
  Ref out(s, 0.0);
  for (int64_t i = 0; i < out.numel(); ++i) {
    auto idx = out.index(i);
    idx[dim] = start + idx[dim] * step;
    out.v[i] = a.at(idx);
  }
  return out;
}
}  // namespace

EMBER_OP_CASES(views) {
  std::vector<OpCase> cases;
  cases.push_back(view_case("view", OpId::view, {{{2, 3, 4}}, {{0, 4}}, {{6}}},
                            [](const Tensor& t) { return t.reshape({-1}); },
                            [](const Ref& r) { return Ref({r.numel()}, r.v); }));
  cases.push_back(view_case("unsqueeze_squeeze_flatten", OpId::view, {{{2, 3, 4}}, {{3, 1, 5}}},
                            [](const Tensor& t) { return t.unsqueeze(1).squeeze(1).flatten(1); },
                            [](const Ref& r) { return Ref({r.shape[0], r.numel() / r.shape[0]}, r.v); }));
  cases.push_back(view_case("permute", OpId::permute, {{{2, 3, 4}}, {{0, 2, 3}}},
                            [](const Tensor& t) { return t.permute({2, 0, 1}); },
                            [](const Ref& r) { return ref_permute(r, {2, 0, 1}); }));
  cases.push_back(view_case("transpose", OpId::permute, {{{5, 7}}, {{1, 3}}},
                            [](const Tensor& t) { return t.t(); },
                            [](const Ref& r) { return ref_permute(r, {1, 0}); }));
  cases.push_back(view_case("expand", OpId::expand, {{{3, 1}}, {{1}}, {{0, 1}}},
                            [](const Tensor& t) { return t.expand({2, t.size(0), 4}); },
                            [](const Ref& r) { return ref_expand(r, {2, r.shape[0], 4}); }));
  cases.push_back(view_case("slice", OpId::slice, {{{6, 5}}, {{9, 2}}, {{0, 3}}},
                            [](const Tensor& t) { return t.slice(0, 1, 100, 2); },
                            [](const Ref& r) { return ref_slice(r, 0, std::min<int64_t>(1, r.shape[0]), r.shape[0], 2); }));
  cases.push_back(view_case("slice_last_dim", OpId::slice_backward, {{{4, 6}}, {{3, 9}}},
                            [](const Tensor& t) { return t.narrow(1, 1, 3); },
                            [](const Ref& r) { return ref_slice(r, 1, 1, 4, 1); }));
  cases.push_back(view_case("select", OpId::select, {{{4, 3}}, {{5, 2, 2}}},
                            [](const Tensor& t) { return t.select(0, -2); },
                            [](const Ref& r) {
                              Ref s = ref_slice(r, 0, r.shape[0] - 2, r.shape[0] - 1, 1);
                              Shape sh(r.shape.begin() + 1, r.shape.end());
                              return Ref(sh, s.v);
                            }));
  OpCase as_strided = view_case("as_strided", OpId::as_strided, {{{4, 4}}},
                                [](const Tensor& t) {
                                  Tensor c = t.contiguous();
                                  return c.as_strided({3, 2}, {4, 1}, 1);
                                },
                                [](const Ref& r) {
                                  Ref out({3, 2}, 0.0);
                                  for (int64_t i = 0; i < 3; ++i)
                                    for (int64_t j = 0; j < 2; ++j) out.v[i * 2 + j] = r.v[1 + i * 4 + j];
                                  return out;
                                });
  as_strided.gradcheck = false;
  cases.push_back(as_strided);
  return cases;
}

}  // namespace ember::test
