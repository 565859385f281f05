// Op cases: factories (full and its wrappers, the in-place fill, arange).
#include "support/op_cases.h"

namespace ember::test {

namespace {
const std::vector<Shapes> kShapes = {{{}}, {{7}}, {{3, 5}}, {{0, 3}}, {{2, 3, 40}}};
const std::vector<DType> kAllTypes = {DType::Float32,  DType::Float64, DType::Float16,
                                      DType::BFloat16, DType::Int32,   DType::Int64,
                                      DType::Bool};

// A value every dtype holds exactly (bool: true).
double sample_value(DType t) {
  if (t == DType::Bool) return 1;
  return is_floating(t) ? -2.5 : -3;
}
}  // namespace

EMBER_OP_CASES(factory) {
  std::vector<OpCase> cases;

  for (DType t : kAllTypes) {
    OpCase c;
    c.name = "full_zeros_ones_" + std::string(dtype_name(t));
    c.covers = {OpId::full};
    c.shapes = kShapes;
    c.dtypes = {t};
    // The input only carries the shape and dtype into run.
    c.make_inputs = [](const Shapes& s, DType d) { return Inputs{zeros(s[0], d)}; };
    const double v = sample_value(t);
    c.run = [v](const Inputs& in) {
      const Shape& s = in[0].sizes();
      DType d = in[0].dtype();
      return Inputs{full(s, v, d),     zeros(s, d),      ones(s, d),
                    zeros_like(in[0]), ones_like(in[0]), full_like(in[0], v)};
    };
    c.reference = [v](const std::vector<Ref>& r) {
      const Shape& s = r[0].shape;
      return std::vector<Ref>{Ref(s, v),   Ref(s, 0.0), Ref(s, 1.0),
                              Ref(s, 0.0), Ref(s, 1.0), Ref(s, v)};
    };
    cases.push_back(c);
  }

  OpCase scalar;
  scalar.name = "scalar_tensor";
  scalar.covers = {OpId::full};
  scalar.shapes = {{}};
  scalar.dtypes = {DType::Float32};
  scalar.run = [](const Inputs&) {
    return Inputs{scalar_tensor(0.1, DType::Float64), scalar_tensor(7, DType::Int32),
                  scalar_tensor(65504, DType::Float16), full({2}, 1e300, DType::Float32)};
  };
  scalar.reference = [](const std::vector<Ref>&) {
    return std::vector<Ref>{Ref({}, 0.1), Ref({}, 7.0), Ref({}, 65504.0),
                            Ref({2}, INFINITY)};  // out of float32 range: inf, as a cast
  };
  cases.push_back(scalar);

  // fill_ writes through strides (full's in-place form): every other element of the last dim.
  OpCase fill;
  fill.name = "fill_strided";
  fill.covers = {OpId::full};
  fill.shapes = kShapes;
  fill.dtypes = {DType::Float32, DType::Float64, DType::Float16, DType::Int64};
  fill.run = [](const Inputs& in) {
    Tensor t = in[0].clone();
    Tensor target = t.dim() == 0 ? t : t.slice(-1, 0, t.size(-1), 2);
    target.fill_(-2);
    return Inputs{t};
  };
  fill.reference = [](const std::vector<Ref>& r) {
    Ref out = r[0];
    for (int64_t i = 0; i < out.numel(); ++i) {
      auto idx = out.index(i);
      if (idx.empty() || idx.back() % 2 == 0) out.v[i] = -2;
    }
    return std::vector<Ref>{out};
  };
  cases.push_back(fill);

  // arange: start + i * step for i < ceil((end - start) / step).
  struct Range {
    double start, end, step;
    DType dtype;
  };
  for (Range rg : {Range{0, 10, 1, DType::Int64}, Range{-3, 3.5, 0.5, DType::Float32},
                   Range{5, -5, -1.5, DType::Float64}, Range{0, 0, 1, DType::Float32},
                   Range{1, 2, 0.25, DType::Float16}, Range{-4, 9, 3, DType::Int32},
                   Range{0, 1, 0.1, DType::Float64}, Range{2, 1, 1, DType::Int64}}) {
    OpCase c;
    c.name = "arange_" + std::to_string(rg.start) + "_" + std::to_string(rg.end) + "_" +
             std::to_string(rg.step) + "_" + std::string(dtype_name(rg.dtype));
    c.covers = {OpId::arange};
    c.shapes = {{}};
    c.dtypes = {rg.dtype};
    c.run = [rg](const Inputs&) { return Inputs{arange(rg.start, rg.end, rg.step, rg.dtype)}; };
    c.reference = [rg](const std::vector<Ref>&) {
      std::vector<double> v;
      for (double x = rg.start; rg.step > 0 ? x < rg.end : x > rg.end;
           x = rg.start + double(v.size()) * rg.step)
        v.push_back(x);
      return std::vector<Ref>{Ref({int64_t(v.size())}, v)};
    };
    cases.push_back(c);
  }
  OpCase count;
  count.name = "arange_count";
  count.covers = {OpId::arange};
  count.shapes = {{}};
  count.dtypes = {DType::Int64};
  count.run = [](const Inputs&) { return Inputs{arange(6), arange(0)}; };
  count.reference = [](const std::vector<Ref>&) {
    return std::vector<Ref>{Ref({6}, {0, 1, 2, 3, 4, 5}), Ref({0}, std::vector<double>{})};
  };
  cases.push_back(count);
  return cases;
}

}  // namespace ember::test
