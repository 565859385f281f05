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

// clang-format off
enum class Op : uint8_t {
  Unary, Binary, AddScalar, MulScalar, Where,                              // pointwise
  Transpose, Permute, Reshape, Unsqueeze, Slice, Expand, Cast,             // views and casts
  Sum, Mean, Amax, Softmax,                                                // reductions
  Narrow,           // x.narrow(dim, start, end - start), often the whole dim
  Matmul,           // matmul(x, y), y transposed when `flag` (a product with x's own rows)
  LayerNorm,        // layer_norm over the last dim, eps `scalar`, args: x[, weight[, bias]]
  Composite,        // fn 0: rms_norm over the last dim (eps `scalar`); 1: cumsum along dim;
                    // 2: roll by `start` along dim
  ReduceBroadcast,  // x op reduce(x, dim, keepdim), reduce(x) op x when `flag`: the reduction
                    // broadcast against its input (fn: 0 sum, 1 mean, 2 amax; fn2: BinaryFn)
  Layer,            // a network layer's op (fn: LayerFn), drawn only from kLayerSeeds on
  kCount
};
// The forms of Op::Layer, over image-like values ([N, C, H, W]; [N, C, L] for conv1d) and their
// parameters (conv weights, per-channel vectors), which are program inputs.
enum class LayerFn : uint8_t {
  Conv1d, Conv2d,           // args: x, weight[, bias]; groups 1 or x's channels (depthwise)
  MaxPool2d, AvgPool2d,     // kernel {kH, kW}, stride (0: the kernel), padding; avg: count_include_pad
                            // when `flag`
  AdaptiveAvgPool2d,        // output size `shape` {Ho, Wo}
  BatchNorm,                // eval: args x, running mean, running var (as |var| + 0.5)[, weight[, bias]]
  BatchNormTrain,           // batch statistics, no running stats: args x[, weight[, bias]]
  GroupNorm,                // `groups` groups: args x[, weight[, bias]]
  Swiglu,                   // silu(x) * y, broadcast: args x, y
  Nearest, Bilinear,        // interpolate to `shape` {Ho, Wo}; bilinear: align_corners when `flag`
  CausalMask,               // x.masked_fill(col > row + start over x's last two dims, scalar)
  MaskWhere,                // where(m > scalar, x, 0): args x, m, a mask that broadcasts up to x
  Sort, Argsort,            // along dim, descending when `flag`
  kCount
};
// clang-format on
// Unary and binary functions; the unsafe ones are wrapped so values stay finite and moderate.
enum class UnaryFn : uint8_t { Neg, Exp, Log, Sqrt, Tanh, Sigmoid, Relu, Gelu, Silu, Abs, kCount };
enum class BinaryFn : uint8_t { Add, Sub, Mul, Div, Maximum, Minimum, kCount };

// One step. Values are numbered: the inputs first, then one value per step in order.
struct Step {
  Op op = Op::Unary;
  int fn = 0;                 // UnaryFn / BinaryFn
  std::vector<int> args;      // operand value numbers
  Shape shape;                // Permute dims, Reshape / Expand sizes, Sum / Mean dims if any
  int64_t dim = 0, dim2 = 0;  // Transpose dims; Unsqueeze, Slice, reduction, Softmax dim
  int64_t start = 0, end = 0, step = 1;  // Slice
  double scalar = 0;          // AddScalar / MulScalar operand, Where threshold
  bool keepdim = false;
  bool flag = false;  // Matmul: y transposed; ReduceBroadcast: operands swapped; Softmax: log
  int fn2 = 0;                   // ReduceBroadcast: the BinaryFn
  DType dtype = DType::Float32;  // Cast target
  double bound = 1;              // a bound on |value| of the result (scales the tolerance)
  // Attrs that follow sizes, so that a program stays valid when its inputs' sizes vary:
  bool from_end = false;  // Slice / Narrow: `end` counts back from the dim's size
  std::vector<int> copy;  // Reshape (when not empty): per entry of `shape`, the operand dim
                          // whose size it takes, or -1 for the entry itself
  // Layer: a pooling window's kernel {kH, kW}; stride, padding and dilation of a window;
  // groups of a convolution or a group_norm.
  std::vector<int64_t> kernel;
  int64_t stride = 1, padding = 0, dilation = 1, groups = 1;
};

struct InputSpec {
  Shape shape;
  DType dtype = DType::Float32;
  bool strided = false;  // passed as a non-contiguous view (every other element of a bigger tensor)
  double range = 2;      // floats uniform in [-range, range] (a matmul's weight: smaller)
  std::vector<int> sym;  // per dim, the size symbol it is (-1: a fixed size); empty: all fixed
};

// The sizes a program is called at: per call, the value of each size symbol.
using SizeSchedule = std::vector<std::vector<int64_t>>;

struct Program {
  uint64_t seed = 0;
  std::vector<InputSpec> inputs;
  std::vector<Step> steps;
  std::vector<int> outputs;  // value numbers the program returns
  // A training program: besides its outputs it returns a scalar loss, the sum of each float
  // output times random weights (extra inputs), whose grads w.r.t. the float inputs are checked.
  bool backward = false;
  // Sizes that vary: the program is run once per row, its inputs' symbolic dims (InputSpec::sym)
  // taking that row's values. `inputs` holds the shapes of row 0; empty for a fixed program.
  SizeSchedule sizes;
};

// Seeds from here on name programs over an image-like input ([N, C, H, W], or [N, C, L]
// in one in three) and network-layer parameters (conv weights, per-channel vectors), which draw
// Op::Layer steps among the others. Seeds below draw no layers, as they did before layers existed.
constexpr uint64_t kLayerSeeds = 2000001;

// A program of 3-10 steps over 1-3 inputs (0-D to 3-D, float32/float64/int64), sometimes with a
// matmul weight as one more input; about one in four a training program. Seeds from
// kLayerSeeds on: layer programs (above).
Program generate_program(uint64_t seed);
// Six calls' sizes for one or two size symbols, each in [1, 12]: symbol 0 takes a new value at
// every call, sometimes 1 at one of the later calls; symbol 1, where there is one, takes one
// value for the first three calls and another for the last three.
SizeSchedule size_schedule(uint64_t seed);
// A program like generate_program's whose inputs carry one or two of the schedule's symbols
// (dims that broadcast, multiply or reduce against each other share a symbol), valid at every
// row of the schedule: each step is drawn at row 0 and kept only if it applies at every row.
// Sizes that feed attrs follow the operand (a slice's end counted from the end, a reshape that
// copies the varying dims or infers one with -1); other ops keep varying dims as they are.
Program generate_symbolic_program(uint64_t seed, const SizeSchedule& sizes);
// Input i's shape at call `call` of p's schedule.
Shape input_shape(const Program& p, size_t i, size_t call = 0);
// Fresh input data at call `call`'s sizes: floats uniform in [-range, range], integers in
// [-4, 4]; strided inputs are views.
std::vector<Tensor> make_inputs(const Program& p, uint64_t data_seed, size_t call = 0);

// A training program's arguments: `leaves` are fresh buffers of make_inputs' data, the float
// ones requiring grad, and `args` what the program gets (a strided input as a view of its
// leaf), then the loss weights, one per float output (loss_weights).
struct TrainingArgs {
  std::vector<Tensor> leaves, args;
};
TrainingArgs training_args(const Program& p, uint64_t data_seed,
                           const std::vector<Tensor>& weights, size_t call = 0);
// Random weights (uniform in [-1, 1]) for each float output of p, as the outputs `outs` are.
std::vector<Tensor> loss_weights(const std::vector<Tensor>& outs, uint64_t data_seed);
// The program over args = its inputs then its loss weights: its outputs, then the loss
// sum((out * w).sum()) over the float outputs, in float64.
std::vector<Tensor> run_training(const Program& p, const std::vector<Tensor>& args);
// The grads of the leaves (undefined for those without a grad) after a backward.
std::vector<Tensor> leaf_grads(const std::vector<Tensor>& leaves);
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
