// What a graph compiled for a GPU runs differently from its fusion plan's groups, one launch
// where the plan has several: the casts of float32 parameters to a 16-bit float (and of their
// 16-bit grads back), batched into one multi-tensor launch each; and layer_norm_backward with
// the cast of its incoming grad and the residual add of its dx folded into its kernel
// (kernels/layer_norm_grad.h); and a matmul with the bias add after it in its gemm's epilogue
// (kernels/gemm_bias.h); and cross_entropy's grad over 16-bit logits, one kernel of the plan,
// run by a hand-written one (kernels/cross_entropy_grad.h); and a decode step's cache writes
// with its attention, and two embedding lookups with their add. compiled_graph_cuda.cpp
// schedules and runs them.
#pragma once
#include <vector>

#include "compiler/pointwise_fusion.h"
#include "graph/graph.h"

namespace ember::compiler {

// When grp only casts a float32 graph input (a parameter) to a 16-bit float, both laid out
// contiguously: that input (the cast may read it through views that leave its layout as it
// is, which have not run when the graph starts). Else null.
const graph::Value* parameter_cast(const FusionGroup& grp);
// Whether grp only casts a contiguous 16-bit value to a contiguous float32 result that the graph
// hands out, directly or through views that only it reads (a parameter's grad); those views'
// nodes are appended to `views`.
bool grad_cast(const FusionGroup& grp, const graph::Graph& g,
               std::vector<const graph::Node*>* views);

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

// A matmul (the graph's node `node`) whose 16-bit product only an add group `add_group` reads,
// adding `bias`, a contiguous vector of the product's last dim and dtype, and then perhaps a
// `residual` of the product's shape (the group's second add: x + linear(y)), giving `sum`: one
// gemm with the bias in its epilogue and the residual as its C operand. The bias and residual
// are made before the matmul runs: by an earlier node, or by one of the groups `at_start` (the
// batched casts, run when the graph starts). Or the group's second node is the exact gelu of
// the biased product (an MLP's first linear layer), where the gemm of a few rows takes it
// (gemm_bias::rounds_product_first: the sum it takes the gelu of is the fused group's).
// A matmul without a bias add (a GPT's logits) is a fold only where its layer_norm joins the
// gemv (ln_node below): add_group -1, bias null, sum the product.
struct BiasFold {
  int node = -1;
  int add_group = -1;
  const graph::Value* bias = nullptr;  // null: no bias add (then no residual, no gelu)
  const graph::Value* sum = nullptr;
  const graph::Value* residual = nullptr;  // null: the bias alone
  bool gelu = false;  // the group's second node is the exact gelu of the biased product
  // The layer_norm node whose result is the matmul's left operand (16-bit rows of 513 to 4096,
  // a few of them, with weight and bias, nothing else reading its result or statistics), done
  // in the gemv's blocks (gemm_bias::LayerNormIn): its input is ln_x. Else -1.
  int ln_node = -1;
  const graph::Value* ln_x = nullptr;
};
std::vector<BiasFold> bias_folds(const graph::Graph& g, const FusionPlan& plan,
                                 const std::vector<int>& at_start);

// A pointwise group that is cross_entropy's grad over 16-bit logits as the autograd formula
// writes it, ((exp(float(logits) - lse) - float(targets == arange)) * scale) cast back to the
// logits' dtype, with its inputs: logits [N, C], lse, targets and scale [N, 1].
struct CrossEntropyGradFold {
  int group = -1;
  const graph::Value* logits = nullptr;
  const graph::Value* lse = nullptr;
  const graph::Value* targets = nullptr;
  const graph::Value* scale = nullptr;
};
std::vector<CrossEntropyGradFold> cross_entropy_grad_folds(const FusionPlan& plan);

// A cached_attention node (the graph's node `node`) whose key and value caches are the results
// of the groups `k_group` and `v_group`, each where(put, new, cache) written into its cache
// (a graph input) storing only the changed slots (store_only_changes.h): a decode step's cache
// writes. The attention kernel writes those slots itself (kernels/cached_attention_append.h), so
// the two groups launch nothing. put is a bool per slot ([.., S, 1], sizes of 1 elsewhere), new is
// the cache's shape with one slot; nothing but the node reads the groups' results (the caches'
// write-backs aside). `write_into` and `changes_only` are per plan group, as the compiled
// graph decided them.
struct AppendFold {
  int node = -1;
  int k_group = -1, v_group = -1;
  const graph::Value* put = nullptr;
  const graph::Value* k_new = nullptr;
  const graph::Value* v_new = nullptr;
  const graph::Value* k_cache = nullptr;  // the graph inputs written
  const graph::Value* v_cache = nullptr;
};
std::vector<AppendFold> append_folds(const graph::Graph& g, const FusionPlan& plan,
                                     const std::vector<int>& write_into,
                                     const std::vector<char>& changes_only);
// A lone add group (`group`) of two embedding lookups, index_select(weight, 0, index) each
// (through a view, or not), as a GPT's token and position embeddings are summed: one kernel
// gathers both rows and adds them (kernels/embedding_add.h), so the two index_selects and the
// views between them and the add (`nodes`, graph node indices) launch nothing. Weights are
// 2-D [*, C] of the add's dtype, indices 1-D integers; `a` gives a row for each of the sum's
// rows, `b` one for each or one for all (broadcast).
struct EmbeddingFold {
  int group = -1;
  const graph::Value* a_weight = nullptr;
  const graph::Value* a_index = nullptr;
  const graph::Value* b_weight = nullptr;
  const graph::Value* b_index = nullptr;
  std::vector<int> nodes;
};
std::vector<EmbeddingFold> embedding_folds(const graph::Graph& g, const FusionPlan& plan);

}  // namespace ember::compiler
