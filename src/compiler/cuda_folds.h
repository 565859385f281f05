// What a graph compiled for a GPU runs differently from its fusion plan's groups, one launch
// where the plan has several: the casts of float32 parameters to a 16-bit float (and of their
// 16-bit grads back), batched into one multi-tensor launch each; and layer_norm_backward with
// the cast of its incoming grad and the residual add of its dx folded into its kernel
// (kernels/layer_norm_grad.h). compiled_graph_cuda.cpp schedules and runs them.
#pragma once
#include <vector>

#include "compiler/pointwise_fusion.h"
#include "graph/graph.h"

namespace ember::compiler {

// Whether grp only casts a float32 graph input (a parameter), laid out contiguously, to a
// 16-bit float.
bool parameter_cast(const FusionGroup& grp);
// Whether grp only casts a 16-bit value to a float32 result that the graph hands out and
// nothing else reads (a parameter's grad), both laid out contiguously.
bool grad_cast(const FusionGroup& grp, const graph::Graph& g);

// A layer_norm_backward node (the graph's node `node`) with its neighbours folded in: the
// group `cast_group` that casts `grad` to the node's incoming grad (else -1, and `grad` is that
// grad), and the group `add_group` that adds `residual` to the node's dx giving `sum` (else -1).
struct LayerNormFold {
  int node = -1;
  int cast_group = -1;
  const graph::Value* grad = nullptr;
  int add_group = -1;
  const graph::Value* residual = nullptr;
  const graph::Value* sum = nullptr;
};
// The layer_norm_backward nodes of g (float32, with a weight) that have a neighbour to fold.
std::vector<LayerNormFold> layer_norm_folds(const graph::Graph& g, const FusionPlan& plan);

}  // namespace ember::compiler
