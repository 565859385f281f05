// The compiler's decomposition table: composite ops and the primitives it lowers them to.
//
// Row ops (an op over the last dim of a float tensor) decompose into per-row reductions (max,
// sum) and elementwise math, which codegen turns into one row kernel with the op's pointwise
// producers and consumers fused in. The other composites are decomposed before the compiler
// sees them, by their front ends, into table ops that fusion handles:
//   linear(x, w, b)            -> permute(w), matmul, add          (a gemm group)
//   scaled_dot_product_attention -> matmul, mul, add(mask), softmax, matmul  (an attention group)
//   gelu, silu, sigmoid, tanh  -> one pointwise functor each (kernels/functors.h)
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "graph/graph.h"

namespace ember::compiler {

// One step of a row decomposition. Expressions are C++ with placeholders: $x (the row op's
// input at column j), $kept (the row buffer at j, after a step that keeps its value), $T (the
// element type), $n (the row length), and the names of earlier steps.
struct RowStep {
  enum Kind { Max, Sum, Let } kind = Let;
  std::string name;   // the row statistic's name in the generated code
  std::string expr;   // Max/Sum: the value reduced at column j; Let: a row scalar
  bool keep = false;  // Max/Sum: the value is also stored in the row buffer, read later as $kept
};

struct RowDecomposition {
  std::vector<RowStep> steps;
  std::string out;  // the op's first output at column j (a row scalar for reductions)
  // Further outputs of the op that are per-row statistics: output index -> step name.
  std::vector<std::pair<size_t, std::string>> stat_outputs;
  // Group-input placeholders the expressions read at column j: name -> node input index
  // (layer_norm's $w and $b).
  std::vector<std::pair<std::string, size_t>> row_vectors;
};

// The decomposition of a row op node (softmax, log_softmax, layer_norm, and sum or mean over
// the last dim), or nothing for other nodes. Shapes and dtypes are checked by can_fuse_row (pointwise_fusion.h).
std::optional<RowDecomposition> row_decomposition(const graph::Node& n);

}  // namespace ember::compiler
