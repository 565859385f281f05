// Op cases: float-only unary math.
#include "support/op_cases.h"

namespace ember::test {

namespace {
const std::vector<Shapes> kShapes = {{{}}, {{7}}, {{3, 5}}, {{0, 3}}, {{2, 3, 40}}};

OpCase unary_case(std::string name, OpId op, std::function<Tensor(const Tensor&)> f,
                  std::function<double(double)> ref, bool positive) {
  OpCase c;
  c.name = std::move(name);
  c.covers = {op};
  c.shapes = kShapes;
  if (positive)
    c.make_inputs = [](const Shapes& s, DType t) { return Inputs{positive_tensor(s[0], t)}; };
  c.run = [f](const Inputs& in) { return Inputs{f(in[0])}; };
  c.reference = [ref](const std::vector<Ref>& r) { return std::vector<Ref>{ref_map(r[0], ref)}; };
  c.gradcheck = true;
  return c;
}
}  // namespace

EMBER_OP_CASES(float_math) {
  return {
      unary_case("exp", OpId::exp, [](const Tensor& t) { return t.exp(); },
                 [](double x) { return std::exp(x); }, false),
      unary_case("log", OpId::log, [](const Tensor& t) { return t.log(); },
                 [](double x) { return std::log(x); }, true),
      unary_case("sqrt", OpId::sqrt, [](const Tensor& t) { return t.sqrt(); },
                 [](double x) { return std::sqrt(x); }, true),
      unary_case("rsqrt", OpId::rsqrt, [](const Tensor& t) { return t.rsqrt(); },
                 [](double x) { return 1 / std::sqrt(x); }, true),
  };
}

}  // namespace ember::test
