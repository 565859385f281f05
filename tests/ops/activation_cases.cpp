// Op cases: activations (tanh, sigmoid, relu, silu, gelu in both forms, gelu_backward).
#include "dispatch/dispatcher.h"
#include "support/op_cases.h"

namespace ember::test {

namespace {
const std::vector<Shapes> kShapes = {{{}}, {{7}}, {{3, 5}}, {{0, 3}}, {{2, 3, 40}}};
// Past the parallel grain, so the OpenMP split runs too (no gradcheck: too many elements).
const std::vector<Shapes> kLargeShapes = {{{70, 500}}};

// Double-precision definitions, written out from the textbook formulas.
double ref_sigmoid(double x) { return 1 / (1 + std::exp(-x)); }
double ref_gelu(double x) { return x * 0.5 * std::erfc(-x / std::sqrt(2.0)); }
double ref_gelu_tanh(double x) {
  const double k = std::sqrt(2 / M_PI);
  return 0.5 * x * (1 + std::tanh(k * (x + 0.044715 * x * x * x)));
}
// gelu'(x) = Phi(x) + x phi(x)
double ref_gelu_grad(double x) {
  return 0.5 * std::erfc(-x / std::sqrt(2.0)) + x * std::exp(-x * x / 2) / std::sqrt(2 * M_PI);
}
// derivative of the tanh form via sech^2 = 1 / cosh^2
double ref_gelu_tanh_grad(double x) {
  const double k = std::sqrt(2 / M_PI), c = 0.044715;
  double u = k * (x + c * x * x * x);
  double ch = std::cosh(u);
  return 0.5 * (1 + std::tanh(u)) + 0.5 * x * k * (1 + 3 * c * x * x) / (ch * ch);
}

OpCase unary_case(std::string name, std::vector<OpId> covers,
                  std::function<Tensor(const Tensor&)> f, std::function<double(double)> ref) {
  OpCase c;
  c.name = std::move(name);
  c.covers = std::move(covers);
  c.shapes = kShapes;
  c.run = [f](const Inputs& in) { return Inputs{f(in[0])}; };
  c.reference = [ref](const std::vector<Ref>& r) { return std::vector<Ref>{ref_map(r[0], ref)}; };
  c.gradcheck = true;
  return c;
}

OpCase large(OpCase c) {
  c.name += "_large";
  c.shapes = kLargeShapes;
  c.gradcheck = false;
  return c;
}
}  // namespace

EMBER_OP_CASES(activation) {
  std::vector<OpCase> cases;
  cases.push_back(unary_case("tanh", {OpId::tanh}, [](const Tensor& t) { return t.tanh(); },
                             [](double x) { return std::tanh(x); }));
  cases.push_back(unary_case(
      "sigmoid", {OpId::sigmoid}, [](const Tensor& t) { return t.sigmoid(); }, ref_sigmoid));
  cases.push_back(unary_case("silu", {OpId::silu}, [](const Tensor& t) { return t.silu(); },
                             [](double x) { return x * ref_sigmoid(x); }));
  cases.push_back(unary_case("relu", {OpId::relu}, [](const Tensor& t) { return t.relu(); },
                             [](double x) { return x > 0 ? x : 0; }));
  // The gradchecks of gelu run gelu_backward, its grad op.
  cases.push_back(unary_case("gelu", {OpId::gelu, OpId::gelu_backward},
                             [](const Tensor& t) { return t.gelu(); }, ref_gelu));
  cases.push_back(unary_case("gelu_tanh", {OpId::gelu, OpId::gelu_backward},
                             [](const Tensor& t) { return gelu(t, true); }, ref_gelu_tanh));
  for (size_t i = 0, n = cases.size(); i < n; ++i) cases.push_back(large(cases[i]));

  // Saturation: far tails give exact 0 / 1 / x, never NaN.
  OpCase tails = unary_case("activation_tails", {OpId::sigmoid, OpId::silu, OpId::tanh},
                            [](const Tensor& t) { return t.sigmoid(); }, ref_sigmoid);
  tails.dtypes = {DType::Float32, DType::Float64};
  tails.make_inputs = [](const Shapes& s, DType t) {
    return Inputs{random_tensor(s[0], t, -120, 120)};
  };
  tails.run = [](const Inputs& in) {
    return Inputs{in[0].sigmoid(), in[0].silu(), in[0].tanh(), in[0].gelu(), in[0].gelu(true)};
  };
  tails.reference = [](const std::vector<Ref>& r) {
    return std::vector<Ref>{ref_map(r[0], ref_sigmoid),
                            ref_map(r[0], [](double x) { return x * ref_sigmoid(x); }),
                            ref_map(r[0], [](double x) { return std::tanh(x); }),
                            ref_map(r[0], ref_gelu), ref_map(r[0], ref_gelu_tanh)};
  };
  tails.gradcheck = false;
  cases.push_back(tails);

  // gelu_backward on its own: grad * gelu'(x), broadcasting grad against x.
  for (bool tanh_form : {false, true}) {
    OpCase c;
    c.name = tanh_form ? "gelu_backward_tanh" : "gelu_backward";
    c.covers = {OpId::gelu_backward};
    c.shapes = {{{}, {}}, {{7}, {7}}, {{3, 5}, {3, 5}}, {{0, 3}, {0, 3}}, {{2, 40}, {2, 40}},
                {{3, 5}, {5}}};
    c.run = [tanh_form](const Inputs& in) {
      Attrs a;
      a.flag = tanh_form;
      return Inputs{dispatch1(OpId::gelu_backward, {in[0], in[1]}, a)};
    };
    c.reference = [tanh_form](const std::vector<Ref>& r) {
      return std::vector<Ref>{ref_zip(r[0], r[1], [tanh_form](double g, double x) {
        return g * (tanh_form ? ref_gelu_tanh_grad(x) : ref_gelu_grad(x));
      })};
    };
    cases.push_back(c);
  }

  // relu keeps integer dtypes.
  OpCase relu_int = unary_case("relu_int", {OpId::relu}, [](const Tensor& t) { return t.relu(); },
                               [](double x) { return x > 0 ? x : 0; });
  relu_int.dtypes = {DType::Int32, DType::Int64};
  relu_int.make_inputs = [](const Shapes& s, DType t) {
    return Inputs{random_int_tensor(s[0], -100, 100, t)};
  };
  relu_int.gradcheck = false;
  cases.push_back(relu_int);

  // Integer inputs of float-only activations are promoted to the default float dtype (the case
  // runs under the float32 tolerance; its inputs are integers of both widths).
  OpCase promoted;
  promoted.name = "activation_int_inputs_promote";
  promoted.covers = {OpId::tanh, OpId::sigmoid, OpId::silu, OpId::gelu};
  promoted.shapes = kShapes;
  promoted.dtypes = {DType::Float32};
  promoted.make_inputs = [](const Shapes& s, DType) {
    return Inputs{random_int_tensor(s[0], -4, 5, DType::Int32),
                  random_int_tensor(s[0], -4, 5, DType::Int64)};
  };
  promoted.run = [](const Inputs& in) {
    Inputs out;
    for (const Tensor& t : in) {
      for (Tensor r : {t.tanh(), t.sigmoid(), t.silu(), t.gelu(), t.gelu(true)}) {
        EMBER_CHECK(r.dtype() == DType::Float32, "expected a float32 result");
        out.push_back(r);
      }
    }
    return out;
  };
  promoted.reference = [](const std::vector<Ref>& r) {
    std::vector<Ref> out;
    for (const Ref& x : r) {
      out.push_back(ref_map(x, [](double v) { return std::tanh(v); }));
      out.push_back(ref_map(x, ref_sigmoid));
      out.push_back(ref_map(x, [](double v) { return v * ref_sigmoid(v); }));
      out.push_back(ref_map(x, ref_gelu));
      out.push_back(ref_map(x, ref_gelu_tanh));
    }
    return out;
  };
  cases.push_back(promoted);
  return cases;
}

}  // namespace ember::test
