// The compiler's decomposition table: composite ops and the primitives it lowers them to.
//
// Row ops (an op over the last dim of a float tensor) decompose into per-row reductions (max,
// sum) and elementwise math, as the steps of a row kernel in the kernel IR (kernel_ir.h,
// RowProgram), which lowering completes with the op's pointwise producers and consumers. The
// other composites are decomposed before the compiler sees them, by their front ends, into
// table ops that fusion handles:
//   linear(x, w, b)            -> permute(w), matmul, add          (a gemm group)
//   scaled_dot_product_attention -> matmul, mul, add(mask), softmax, matmul  (an attention group)
//   gelu, silu, sigmoid, tanh  -> one pointwise functor each (kernels/functors.h)
#pragma once
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "compiler/kernel_ir.h"
#include "graph/graph.h"

namespace ember::compiler {

struct RowDecomposition {
  std::vector<kir::RowStep> steps;
  // Defines the op's first output (named var(n.outputs[0])) at column j, or once per row for
  // an op that reduces each row to one value.
  std::vector<kir::Stmt> out;
  // Further outputs of the op that are per-row statistics: output index -> statistic.
  std::vector<std::pair<size_t, std::string>> stat_outputs;
};

// Whether n is a row op the table decomposes (softmax, log_softmax, layer_norm, and sum or
// mean over the last dim). Shapes and dtypes are checked by can_fuse_row (pointwise_fusion.h).
bool has_row_decomposition(const graph::Node& n);

// The decomposition of row op `n`, its input at column j being the value named `x`; the
// op's other tensor inputs (layer_norm's weight and bias) are read from the buffers
// `buffer_of_input(input index)` at column j.
std::optional<RowDecomposition> row_decomposition(
    const graph::Node& n, const std::string& x,
    const std::function<int(size_t input)>& buffer_of_input);

}  // namespace ember::compiler
