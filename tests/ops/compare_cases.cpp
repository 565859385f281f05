// Op cases: comparisons, logical ops, where and masked_fill.
#include "support/op_cases.h"

namespace ember::test {

namespace {
// The last shape is past the parallel grain, so the OpenMP split runs as well.
const std::vector<Shapes> kBinaryShapes = {
    {{}, {}},      {{5}, {5}},   {{3, 4}, {3, 4}}, {{3, 4}, {4}},       {{2, 1, 4}, {3, 1}},
    {{0, 4}, {4}}, {{2, 3}, {}}, {{}, {2, 3}},     {{67, 33}, {67, 33}}, {{300, 120}, {120}}};
const std::vector<DType> kAllDTypes = {DType::Float32, DType::Float64, DType::Float16,
                                       DType::BFloat16, DType::Int32,  DType::Int64, DType::Bool};

// Small integers (many ties and zeros) in the case's dtype; bools are 0/1.
Inputs small_values(const Shapes& s, DType t) {
  Inputs in;
  for (const Shape& sh : s)
    in.push_back(random_int_tensor(sh, t == DType::Bool ? 0 : -3, t == DType::Bool ? 2 : 4).to(t));
  return in;
}

double truth(double x) { return x != 0 ? 1.0 : 0.0; }

OpCase comparison(std::string name, OpId op, Tensor (Tensor::*f)(const Tensor&) const,
                  Tensor (Tensor::*fs)(double) const, std::function<bool(double, double)> ref) {
  OpCase c;
  c.name = std::move(name);
  c.covers = {op};
  c.shapes = kBinaryShapes;
  c.dtypes = kAllDTypes;
  c.make_inputs = small_values;
  // Tensor form, and the scalar form against 1 (and a fractional 0.5, which promotes ints).
  c.run = [f, fs](const Inputs& in) {
    return Inputs{(in[0].*f)(in[1]), (in[0].*fs)(1.0), (in[0].*fs)(0.5)};
  };
  c.reference = [ref](const std::vector<Ref>& r) {
    auto as_double = [ref](double a, double b) { return ref(a, b) ? 1.0 : 0.0; };
    return std::vector<Ref>{ref_zip(r[0], r[1], as_double),
                            ref_map(r[0], [as_double](double a) { return as_double(a, 1.0); }),
                            ref_map(r[0], [as_double](double a) { return as_double(a, 0.5); })};
  };
  return c;
}

OpCase logical(std::string name, OpId op, Tensor (Tensor::*f)(const Tensor&) const,
               std::function<bool(bool, bool)> ref) {
  OpCase c;
  c.name = std::move(name);
  c.covers = {op};
  c.shapes = kBinaryShapes;
  c.dtypes = kAllDTypes;
  c.make_inputs = small_values;
  // Same dtypes, and mixed: the second operand as int64 and as bool.
  c.run = [f](const Inputs& in) {
    return Inputs{(in[0].*f)(in[1]), (in[0].*f)(in[1].to(DType::Int64)),
                  (in[0].*f)(in[1].to(DType::Bool))};
  };
  c.reference = [ref](const std::vector<Ref>& r) {
    Ref out =
        ref_zip(r[0], r[1], [ref](double a, double b) { return ref(a != 0, b != 0) ? 1.0 : 0.0; });
    return std::vector<Ref>{out, out, out};
  };
  return c;
}
}  // namespace

EMBER_OP_CASES(compare) {
  std::vector<OpCase> cases;
  cases.push_back(comparison("eq", OpId::eq, &Tensor::eq, &Tensor::eq,
                             [](double a, double b) { return a == b; }));
  cases.push_back(comparison("ne", OpId::ne, &Tensor::ne, &Tensor::ne,
                             [](double a, double b) { return a != b; }));
  cases.push_back(comparison("lt", OpId::lt, &Tensor::lt, &Tensor::lt,
                             [](double a, double b) { return a < b; }));
  cases.push_back(comparison("le", OpId::le, &Tensor::le, &Tensor::le,
                             [](double a, double b) { return a <= b; }));
  cases.push_back(comparison("gt", OpId::gt, &Tensor::gt, &Tensor::gt,
                             [](double a, double b) { return a > b; }));
  cases.push_back(comparison("ge", OpId::ge, &Tensor::ge, &Tensor::ge,
                             [](double a, double b) { return a >= b; }));
  // Continuous values too (few ties; checks the float compare, not just small integers).
  OpCase lt_float = comparison("lt_random_floats", OpId::lt, &Tensor::lt, &Tensor::lt,
                               [](double a, double b) { return a < b; });
  lt_float.dtypes = {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16};
  lt_float.make_inputs = nullptr;
  cases.push_back(lt_float);
  // Mixed dtypes compare after promotion: int64 against float32, float16 against float64.
  OpCase mixed = comparison("compare_mixed_dtypes", OpId::le, &Tensor::le, &Tensor::le,
                            [](double a, double b) { return a <= b; });
  mixed.dtypes = {DType::Float32};
  mixed.make_inputs = [](const Shapes& s, DType) {
    return Inputs{random_int_tensor(s[0], -3, 4),
                  random_int_tensor(s[1], -3, 4).to(DType::Float32)};
  };
  cases.push_back(mixed);

  cases.push_back(logical("logical_and", OpId::logical_and, &Tensor::logical_and,
                          [](bool a, bool b) { return a && b; }));
  cases.push_back(logical("logical_or", OpId::logical_or, &Tensor::logical_or,
                          [](bool a, bool b) { return a || b; }));
  cases.push_back(logical("logical_xor", OpId::logical_xor, &Tensor::logical_xor,
                          [](bool a, bool b) { return a != b; }));
  OpCase lnot;
  lnot.name = "logical_not";
  lnot.covers = {OpId::logical_not};
  lnot.shapes = {{{}}, {{7}}, {{3, 5}}, {{0, 3}}, {{2, 3, 4}}};
  lnot.dtypes = kAllDTypes;
  lnot.make_inputs = small_values;
  lnot.run = [](const Inputs& in) { return Inputs{in[0].logical_not()}; };
  lnot.reference = [](const std::vector<Ref>& r) {
    return std::vector<Ref>{ref_map(r[0], [](double x) { return 1 - truth(x); })};
  };
  cases.push_back(lnot);

  // ---- where ----
  OpCase where_case;
  where_case.name = "where";
  where_case.covers = {OpId::where};
  where_case.shapes = {{{3, 4}, {3, 4}, {3, 4}}, {{3, 1}, {1, 4}, {4}}, {{}, {2, 3}, {}},
                       {{0, 3}, {3}, {1}},       {{2, 3}, {}, {}},      {{}, {}, {}},
                       {{5}, {2, 1}, {5}}};
  where_case.dtypes = kAllDTypes;
  where_case.make_inputs = [](const Shapes& s, DType t) {
    Inputs in{random_bool_tensor(s[0])};
    if (is_floating(t)) {
      in.push_back(random_tensor(s[1], t));
      in.push_back(random_tensor(s[2], t));
    } else {
      Inputs v = small_values({s[1], s[2]}, t);
      in.insert(in.end(), v.begin(), v.end());
    }
    return in;
  };
  where_case.run = [](const Inputs& in) {
    return Inputs{where(in[0], in[1], in[2]), in[1].where(in[0], in[2])};
  };
  where_case.reference = [](const std::vector<Ref>& r) {
    Ref out =
        ref_zip3(r[0], r[1], r[2], [](double c, double a, double b) { return c != 0 ? a : b; });
    return std::vector<Ref>{out, out};
  };
  where_case.gradcheck = true;
  where_case.grad_inputs = {1, 2};
  cases.push_back(where_case);
  // Branches of different dtypes are promoted (int64 and float32 -> float32).
  OpCase where_mixed = where_case;
  where_mixed.name = "where_promotes_branches";
  where_mixed.dtypes = {DType::Float32};
  where_mixed.make_inputs = [](const Shapes& s, DType) {
    return Inputs{random_bool_tensor(s[0]), random_int_tensor(s[1], -5, 5),
                  random_tensor(s[2], DType::Float32)};
  };
  where_mixed.shapes.push_back({{300, 1}, {300, 120}, {120}});
  where_mixed.gradcheck = false;
  cases.push_back(where_mixed);

  // ---- masked_fill: a float value, an integer value, and true for bools ----
  struct Fill {
    const char* name;
    double value;
    std::vector<DType> dtypes;
  };
  for (const Fill& f : {Fill{"masked_fill", 1.5, {DType::Float32, DType::Float64, DType::Float16,
                                                   DType::BFloat16}},
                        Fill{"masked_fill_int", -7, {DType::Int32, DType::Int64}},
                        Fill{"masked_fill_bool", 1, {DType::Bool}}}) {
    OpCase mf;
    mf.name = f.name;
    mf.covers = {OpId::masked_fill};
    mf.shapes = {{{3, 4}, {3, 4}}, {{3, 4}, {4}}, {{2, 3, 4}, {3, 1}}, {{}, {}},
                 {{0, 3}, {3}},    {{3, 4}, {}},  {{67, 33}, {67, 33}}};
    mf.dtypes = f.dtypes;
    mf.make_inputs = [](const Shapes& s, DType t) {
      Tensor x = is_floating(t) ? random_tensor(s[0], t) : small_values({s[0]}, t)[0];
      return Inputs{x, random_bool_tensor(s[1])};
    };
    const double v = f.value;
    mf.run = [v](const Inputs& in) {
      Tensor r = in[0].masked_fill(in[1], v);
      EMBER_CHECK(r.dtype() == in[0].dtype(), "masked_fill changed the dtype");
      return Inputs{r};
    };
    mf.reference = [v](const std::vector<Ref>& r) {
      return std::vector<Ref>{
          ref_zip(r[0], r[1], [v](double x, double m) { return m != 0 ? v : x; })};
    };
    mf.gradcheck = is_floating(f.dtypes[0]);
    if (!mf.gradcheck) mf.shapes.push_back({{300, 120}, {120}});
    mf.grad_inputs = {0};
    cases.push_back(mf);
  }
  return cases;
}

}  // namespace ember::test
