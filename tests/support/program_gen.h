// Random ember programs as data: generated from a seed, run, printed as C++ and shrunk, so the
// compile backends can be checked against eager execution on many op chains.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "ember/ops.h"
#include "ember/tensor.h"

namespace ember::testgen {

enum class Op : uint8_t {
  Unary, Binary, AddScalar, MulScalar, Where,                              // pointwise
  Transpose, Permute, Reshape, Unsqueeze, Slice, Expand, Cast,             // views and casts
  Sum, Mean, Amax, Softmax                                                 // reductions
};
// Unary and binary functions; the unsafe ones are wrapped so values stay finite and moderate.
enum class UnaryFn : uint8_t { Neg, Exp, Log, Sqrt, Tanh, Sigmoid, Relu, Gelu, Silu, Abs, kCount };
enum class BinaryFn : uint8_t { Add, Sub, Mul, Div, Maximum, Minimum, kCount };

// One step. Values are numbered: the inputs first, then one value per step in order.
struct Step {
  Op op = Op::Unary;
  int fn = 0;                 // UnaryFn / BinaryFn
  std::vector<int> args;      // operand value numbers
  Shape shape;                // Permute dims, Reshape / Expand sizes
  int64_t dim = 0, dim2 = 0;  // Transpose dims; Unsqueeze, Slice, reduction, Softmax dim
  int64_t start = 0, end = 0, step = 1;  // Slice
  double scalar = 0;          // AddScalar / MulScalar operand, Where threshold
  bool keepdim = false;
  DType dtype = DType::Float32;  // Cast target
  double bound = 1;              // a bound on |value| of the result (scales the tolerance)
};

struct InputSpec {
  Shape shape;
  DType dtype = DType::Float32;
  bool strided = false;  // passed as a non-contiguous view (every other element of a bigger tensor)
};

struct Program {
  uint64_t seed = 0;
  std::vector<InputSpec> inputs;
  std::vector<Step> steps;
  std::vector<int> outputs;  // value numbers the program returns
};

// A program of 3-10 steps over 1-3 inputs (0-D to 3-D, float32/float64/int64).
Program generate_program(uint64_t seed);
// Fresh input data: floats uniform in [-2, 2], integers in [-4, 4]; strided inputs are views.
std::vector<Tensor> make_inputs(const Program& p, uint64_t data_seed);
// Runs one step on the values computed so far.
Tensor apply_step(const Step& s, const std::vector<Tensor>& values);
// Every value (inputs, then each step's result).
std::vector<Tensor> run_all(const Program& p, const std::vector<Tensor>& inputs);
// The program's outputs.
std::vector<Tensor> run_program(const Program& p, const std::vector<Tensor>& inputs);
// Bound on |value| of a value number.
double value_bound(const Program& p, int v);
// The program as C++-like text.
std::string to_string(const Program& p);
// Drops outputs, steps and inputs while `fails` still holds; returns the smallest failing program.
Program shrink(Program p, const std::function<bool(const Program&)>& fails);

}  // namespace ember::testgen
