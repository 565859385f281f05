// Op cases: arithmetic, casts and copies.
#include "support/op_cases.h"

namespace ember::test {

namespace {
const std::vector<Shapes> kBinaryShapes = {
    {{}, {}},          {{5}, {5}},       {{3, 4}, {3, 4}}, {{3, 4}, {4}},
    {{2, 1, 4}, {3, 1}}, {{0, 4}, {4}},  {{2, 3}, {}},     {{67, 33}, {67, 33}}};
const std::vector<Shapes> kUnaryShapes = {{{}}, {{7}}, {{3, 5}}, {{0, 3}}, {{2, 3, 4}}};

OpCase binary_case(std::string name, OpId op, std::function<Tensor(Tensor, Tensor)> f,
                   std::function<double(double, double)> ref) {
  OpCase c;
  c.name = std::move(name);
  c.covers = {op};
  c.shapes = kBinaryShapes;
  c.run = [f](const Inputs& in) { return Inputs{f(in[0], in[1])}; };
  c.reference = [ref](const std::vector<Ref>& r) { return std::vector<Ref>{ref_zip(r[0], r[1], ref)}; };
  c.gradcheck = true;
  return c;
}
}  // namespace

EMBER_OP_CASES(arith) {
  std::vector<OpCase> cases;
  cases.push_back(binary_case("add", OpId::add, [](Tensor a, Tensor b) { return a + b; },
                              [](double a, double b) { return a + b; }));
  cases.push_back(binary_case("sub", OpId::sub, [](Tensor a, Tensor b) { return a - b; },
                              [](double a, double b) { return a - b; }));
  cases.push_back(binary_case("mul", OpId::mul, [](Tensor a, Tensor b) { return a * b; },
                              [](double a, double b) { return a * b; }));
  OpCase div = binary_case("div", OpId::div, [](Tensor a, Tensor b) { return a / b; },
                           [](double a, double b) { return a / b; });
  div.make_inputs = [](const Shapes& s, DType t) {
    return Inputs{random_tensor(s[0], t), positive_tensor(s[1], t)};
  };
  cases.push_back(div);
  for (DType t : {DType::Int32, DType::Int64}) {
    OpCase ints = binary_case(std::string("add_mul_int_") + std::string(dtype_name(t)), OpId::add,
                              [](Tensor a, Tensor b) { return a * b + a; },
                              [](double a, double b) { return a * b + a; });
    ints.dtypes = {t};
    ints.gradcheck = false;
    ints.make_inputs = [t](const Shapes& s, DType) {
      return Inputs{random_int_tensor(s[0], -50, 50, t), random_int_tensor(s[1], -50, 50, t)};
    };
    cases.push_back(ints);
  }

  OpCase neg;
  neg.name = "neg";
  neg.covers = {OpId::neg};
  neg.shapes = kUnaryShapes;
  neg.run = [](const Inputs& in) { return Inputs{-in[0]}; };
  neg.reference = [](const std::vector<Ref>& r) {
    return std::vector<Ref>{ref_map(r[0], [](double x) { return -x; })};
  };
  neg.gradcheck = true;
  cases.push_back(neg);

  // Casts: every pair of dtypes, on values every dtype holds exactly.
  for (DType from : {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16, DType::Int32,
                     DType::Int64, DType::Bool}) {
    OpCase c;
    c.name = std::string("cast_from_") + std::string(dtype_name(from));
    c.covers = {OpId::cast};
    c.shapes = kUnaryShapes;
    c.dtypes = {from};
    c.make_inputs = [from](const Shapes& s, DType) {
      return Inputs{random_int_tensor(s[0], from == DType::Bool ? 0 : -100,
                                      from == DType::Bool ? 2 : 100)
                        .to(from)};
    };
    c.run = [](const Inputs& in) {
      Inputs out;
      for (DType to : {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16,
                       DType::Int32, DType::Int64, DType::Bool})
        out.push_back(in[0].to(to).to(DType::Float64));
      return out;
    };
    c.reference = [](const std::vector<Ref>& r) {
      std::vector<Ref> out(6, r[0]);
      out.push_back(ref_map(r[0], [](double x) { return x != 0 ? 1.0 : 0.0; }));
      return out;
    };
    cases.push_back(c);
  }
  OpCase cast_grad;
  cast_grad.name = "cast_grad";
  cast_grad.covers = {OpId::cast};
  cast_grad.shapes = kUnaryShapes;
  cast_grad.dtypes = {DType::Float64};
  cast_grad.run = [](const Inputs& in) { return Inputs{in[0].to(DType::Float32).to(DType::Float64)}; };
  cast_grad.reference = [](const std::vector<Ref>& r) { return std::vector<Ref>{r[0]}; };
  cast_grad.tol_scale = 1e5;  // the round trip through float32 rounds
  cast_grad.gradcheck = false;
  cases.push_back(cast_grad);

  OpCase clone;
  clone.name = "clone_contiguous";
  clone.covers = {OpId::clone};
  clone.shapes = kUnaryShapes;
  clone.dtypes = {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16, DType::Int64};
  clone.run = [](const Inputs& in) {
    Tensor t = in[0].dim() >= 2 ? in[0].transpose(0, 1).contiguous().transpose(0, 1) : in[0].clone();
    return Inputs{t};
  };
  clone.reference = [](const std::vector<Ref>& r) { return std::vector<Ref>{r[0]}; };
  clone.gradcheck = true;
  cases.push_back(clone);
  return cases;
}

}  // namespace ember::test
