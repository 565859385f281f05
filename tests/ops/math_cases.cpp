// Op cases: pow (tensor and constant exponents), abs, sign, maximum / minimum, clamp.
#include "support/op_cases.h"

namespace ember::test {

namespace {
const std::vector<Shapes> kBinaryShapes = {
    {{}, {}},   {{5}, {5}},     {{3, 4}, {3, 4}}, {{3, 4}, {4}},    {{2, 1, 4}, {3, 1}},
    {{0, 4}, {4}}, {{2, 3}, {}}, {{}, {2, 3}},    {{67, 33}, {67, 33}}};
const std::vector<Shapes> kUnaryShapes = {{{}}, {{7}}, {{3, 5}}, {{0, 3}}, {{2, 3, 4}}};
const std::vector<DType> kFloats = {DType::Float32, DType::Float64, DType::Float16,
                                    DType::BFloat16};
const std::vector<DType> kInts = {DType::Int32, DType::Int64};

// Integer power as integer kernels define it: exact for e >= 0; for e < 0, 1/base^|e|
// truncated toward zero (so 0 unless base is +-1).
double int_pow_ref(double b, double e) {
  if (e < 0) {
    if (b == 1) return 1;
    if (b == -1) return std::fmod(-e, 2) == 1 ? -1 : 1;
    return 0;
  }
  double r = 1;
  for (int i = 0; i < int(e); ++i) r *= b;
  return r;
}

OpCase binary(std::string name, OpId op, std::function<Tensor(const Tensor&, const Tensor&)> f,
              std::function<double(double, double)> ref) {
  OpCase c;
  c.name = std::move(name);
  c.covers = {op};
  c.shapes = kBinaryShapes;
  c.run = [f](const Inputs& in) { return Inputs{f(in[0], in[1])}; };
  c.reference = [ref](const std::vector<Ref>& r) {
    return std::vector<Ref>{ref_zip(r[0], r[1], ref)};
  };
  c.gradcheck = true;
  return c;
}

OpCase unary(std::string name, OpId op, std::function<Tensor(const Tensor&)> f,
             std::function<double(double)> ref) {
  OpCase c;
  c.name = std::move(name);
  c.covers = {op};
  c.shapes = kUnaryShapes;
  c.run = [f](const Inputs& in) { return Inputs{f(in[0])}; };
  c.reference = [ref](const std::vector<Ref>& r) { return std::vector<Ref>{ref_map(r[0], ref)}; };
  c.gradcheck = true;
  return c;
}

// Small integers of both signs, zeros included, in the case's dtype.
std::function<Inputs(const Shapes&, DType)> small_ints(int64_t lo, int64_t hi) {
  return [lo, hi](const Shapes& s, DType t) {
    Inputs in;
    for (const Shape& sh : s) in.push_back(random_int_tensor(sh, lo, hi).to(t));
    return in;
  };
}

double nan_max(double a, double b) { return std::isnan(a) || std::isnan(b) ? NAN : std::max(a, b); }
double nan_min(double a, double b) { return std::isnan(a) || std::isnan(b) ? NAN : std::min(a, b); }
}  // namespace

EMBER_OP_CASES(math) {
  std::vector<OpCase> cases;

  // ---- pow ----
  OpCase pow = binary("pow", OpId::pow, [](const Tensor& a, const Tensor& b) { return a.pow(b); },
                      [](double a, double b) { return std::pow(a, b); });
  pow.make_inputs = [](const Shapes& s, DType t) {
    return Inputs{positive_tensor(s[0], t), random_tensor(s[1], t)};
  };
  cases.push_back(pow);

  OpCase pow_int = binary("pow_int", OpId::pow,
                          [](const Tensor& a, const Tensor& b) { return a.pow(b); }, int_pow_ref);
  pow_int.dtypes = kInts;
  pow_int.make_inputs = [](const Shapes& s, DType t) {
    return Inputs{random_int_tensor(s[0], -5, 6, t), random_int_tensor(s[1], -3, 8, t)};
  };
  pow_int.gradcheck = false;
  pow_int.shapes.push_back({{300, 120}, {120}});
  cases.push_back(pow_int);

  // Constant exponents: the specialized ones (1, 2, 0.5, -1) and generic ones; integral
  // exponents on bases of both signs, fractional ones on positive bases.
  for (double e : {2.0, 3.0, 1.0, 0.0, -1.0, -2.0, 0.5, -1.5, 1.7}) {
    bool integral = std::nearbyint(e) == e;
    OpCase c = unary("pow_scalar_" + std::to_string(e), OpId::pow_scalar,
                     [e](const Tensor& t) { return t.pow(e); },
                     [e](double x) { return std::pow(x, e); });
    c.make_inputs = [integral, e](const Shapes& s, DType t) {
      if (integral && e >= 0) return Inputs{random_tensor(s[0], t)};
      Tensor mag = positive_tensor(s[0], t);
      if (!integral) return Inputs{mag};
      // Negative integral exponents: both signs, kept away from 0.
      Tensor sign = random_int_tensor(s[0], 0, 2).to(t) * 2.0 - 1.0;
      return Inputs{(mag * sign).to(t)};
    };
    cases.push_back(c);
  }
  OpCase pow_scalar_int = unary("pow_scalar_int", OpId::pow_scalar,
                                [](const Tensor& t) { return t.pow(3.0); },
                                [](double x) { return x * x * x; });
  pow_scalar_int.dtypes = kInts;
  pow_scalar_int.make_inputs = small_ints(-20, 20);
  pow_scalar_int.run = [](const Inputs& in) {
    Inputs out{in[0].pow(3.0), in[0].pow(2.0), in[0].pow(0.0), in[0].pow(1.0)};
    for (const Tensor& o : out) EMBER_CHECK(o.dtype() == in[0].dtype(), "pow kept no int dtype");
    return out;
  };
  pow_scalar_int.reference = [](const std::vector<Ref>& r) {
    return std::vector<Ref>{ref_map(r[0], [](double x) { return x * x * x; }),
                            ref_map(r[0], [](double x) { return x * x; }),
                            ref_map(r[0], [](double) { return 1.0; }), r[0]};
  };
  pow_scalar_int.gradcheck = false;
  cases.push_back(pow_scalar_int);
  // A fractional exponent promotes integers to float.
  OpCase pow_int_frac = unary("pow_scalar_int_fractional", OpId::pow_scalar,
                              [](const Tensor& t) { return t.pow(0.5); },
                              [](double x) { return std::sqrt(x); });
  pow_int_frac.dtypes = {DType::Float32};
  pow_int_frac.make_inputs = [](const Shapes& s, DType) {
    return Inputs{random_int_tensor(s[0], 0, 50, DType::Int64)};
  };
  pow_int_frac.gradcheck = false;
  cases.push_back(pow_int_frac);

  // ---- abs, sign ----
  cases.push_back(unary("abs", OpId::abs, [](const Tensor& t) { return t.abs(); },
                        [](double x) { return std::fabs(x); }));
  OpCase abs_int = unary("abs_int", OpId::abs, [](const Tensor& t) { return t.abs(); },
                         [](double x) { return std::fabs(x); });
  abs_int.dtypes = kInts;
  abs_int.make_inputs = small_ints(-1000, 1000);
  abs_int.gradcheck = false;
  cases.push_back(abs_int);
  OpCase sign = unary("sign", OpId::sign, [](const Tensor& t) { return t.sign(); },
                      [](double x) { return double((x > 0) - (x < 0)); });
  sign.dtypes = {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16, DType::Int32,
                 DType::Int64};
  sign.make_inputs = small_ints(-3, 4);  // zeros included
  sign.gradcheck = false;
  cases.push_back(sign);

  // ---- maximum, minimum ----
  cases.push_back(binary("maximum", OpId::maximum,
                         [](const Tensor& a, const Tensor& b) { return a.maximum(b); }, nan_max));
  cases.push_back(binary("minimum", OpId::minimum,
                         [](const Tensor& a, const Tensor& b) { return a.minimum(b); }, nan_min));
  OpCase maxmin_int = binary(
      "maximum_minimum_int", OpId::maximum,
      [](const Tensor& a, const Tensor& b) { return a.maximum(b); }, nan_max);
  maxmin_int.covers = {OpId::maximum, OpId::minimum};
  maxmin_int.dtypes = {DType::Int32, DType::Int64, DType::Bool};
  maxmin_int.make_inputs = [](const Shapes& s, DType t) {
    int64_t lo = t == DType::Bool ? 0 : -50, hi = t == DType::Bool ? 2 : 50;
    return Inputs{random_int_tensor(s[0], lo, hi).to(t), random_int_tensor(s[1], lo, hi).to(t)};
  };
  maxmin_int.run = [](const Inputs& in) {
    return Inputs{in[0].maximum(in[1]), in[0].minimum(in[1])};
  };
  maxmin_int.reference = [](const std::vector<Ref>& r) {
    return std::vector<Ref>{ref_zip(r[0], r[1], nan_max), ref_zip(r[0], r[1], nan_min)};
  };
  maxmin_int.shapes.push_back({{300, 120}, {120}});  // past the parallel grain
  maxmin_int.gradcheck = false;
  cases.push_back(maxmin_int);

  // ---- clamp ----
  struct Bounds {
    const char* name;
    std::optional<double> lo, hi;
  };
  for (Bounds b : {Bounds{"both", -0.7, 1.2}, Bounds{"min", -0.3, std::nullopt},
                   Bounds{"max", std::nullopt, 0.4}, Bounds{"crossed", 1.0, -1.0}}) {
    auto ref = [b](double x) {
      double lo = b.lo.value_or(-INFINITY), hi = b.hi.value_or(INFINITY);
      return std::min(std::max(x, lo), hi);
    };
    OpCase c = unary(std::string("clamp_") + b.name, OpId::clamp,
                     [b](const Tensor& t) { return t.clamp(b.lo, b.hi); }, ref);
    cases.push_back(c);
  }
  OpCase clamp_int = unary("clamp_int", OpId::clamp, [](const Tensor& t) { return t.clamp(-7, 9); },
                           [](double x) { return std::min(std::max(x, -7.0), 9.0); });
  clamp_int.dtypes = kInts;
  clamp_int.make_inputs = small_ints(-20, 20);
  clamp_int.run = [](const Inputs& in) {
    return Inputs{in[0].clamp(-7, 9), in[0].clamp(std::nullopt, 3),
                  in[0].clamp(std::ldexp(1.0, 70), std::nullopt)};
  };
  clamp_int.reference = [](const std::vector<Ref>& r) {
    return std::vector<Ref>{
        ref_map(r[0], [](double x) { return std::min(std::max(x, -7.0), 9.0); }),
        ref_map(r[0], [](double x) { return std::min(x, 3.0); }),
        ref_map(r[0], [](double) { return std::ldexp(1.0, 70); })};
  };
  // A bound no integer of the dtype can hold (2^70) promotes the tensor to float instead of
  // saturating to a wrong answer.
  clamp_int.gradcheck = false;
  clamp_int.shapes.push_back({{300, 120}});
  cases.push_back(clamp_int);
  return cases;
}

}  // namespace ember::test
