// The table-driven op test: each family registers OpCases; one driver runs every case over
// dtypes, shapes (broadcast, zero-size), strided inputs, against a float64 reference, and
// gradchecks differentiable ones. Every op in the op table must be covered by some case.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "ops/op.h"
#include "support/reference.h"

namespace ember::test {

using Inputs = std::vector<Tensor>;
using Shapes = std::vector<Shape>;

struct OpCase {
  std::string name;
  std::vector<OpId> covers;           // op-table entries this case exercises
  std::vector<Shapes> shapes;         // input shape sets to try
  std::vector<DType> dtypes = {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16};
  // Inputs for one shape set (default: randn of each shape, in the dtype).
  std::function<Inputs(const Shapes&, DType)> make_inputs;
  std::function<Inputs(const Inputs&)> run;                     // the op under test
  std::function<std::vector<Ref>(const std::vector<Ref>&)> reference;  // float64 truth
  bool gradcheck = false;    // finite differences in float64 on floating inputs
  std::vector<int> grad_inputs;  // inputs to gradcheck (default: every floating input)
  double tol_scale = 1;      // scales the per-dtype tolerances
  bool strided = true;       // also run with non-contiguous copies of the inputs
};

// Registration from family test files: EMBER_OP_CASES(pointwise) { return {...}; }
std::vector<OpCase>& all_op_cases();
struct OpCaseRegistrar {
  explicit OpCaseRegistrar(std::vector<OpCase> (*f)());
};
#define EMBER_OP_CASES(family)                                                   \
  static std::vector<::ember::test::OpCase> family##_op_cases();                 \
  static ::ember::test::OpCaseRegistrar family##_op_cases_registrar(&family##_op_cases); \
  static std::vector<::ember::test::OpCase> family##_op_cases()

// Helpers for building inputs.
Tensor random_tensor(const Shape& s, DType dtype, double lo = -2, double hi = 2);
Tensor positive_tensor(const Shape& s, DType dtype);  // values in [0.5, 2.5]
Tensor random_int_tensor(const Shape& s, int64_t lo, int64_t hi, DType dtype = DType::Int64);
Tensor random_bool_tensor(const Shape& s);
// Same values, non-contiguous layout.
Tensor strided_copy(const Tensor& t);
// Tolerances (absolute and relative) for comparing a dtype's result to float64 truth.
double tolerance(DType dtype);

// Compares a result to the reference; returns an explanation on mismatch, "" on success.
std::string compare(const Tensor& got, const Ref& want, double tol);

// Gradcheck of f at inputs (float64): autograd vs central differences. Returns "" on success.
std::string gradcheck(const std::function<Inputs(const Inputs&)>& f, const Inputs& inputs,
                      const std::vector<int>& which);

}  // namespace ember::test
