// Training compile (docs/compiling.md, "Training"): a captured forward graph whose inputs require
// grad becomes a joint forward/backward graph (the backward traced through the ops' grad
// formulas), which is partitioned into a forward graph and a backward graph, both compiled by
// the callable's backend and tied to the eager tape by one autograd node.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "capture/capture.h"

namespace ember::capture {

// Which values of g carry autograd history when g runs with grad mode on and inputs whose
// requires_grad flags are `input_rg`: the per-op decision of the dispatcher, made ahead.
std::vector<char> values_requiring_grad(const graph::Graph& g, const std::vector<bool>& input_rg);

// The forward and the backward of one graph in a single graph.
//   inputs:  the forward graph's inputs ("primals"), then one grad per differentiable output
//            ("tangents", in diff_outputs order)
//   nodes:   the forward nodes (first num_forward_nodes, as in the forward graph), then the
//            backward nodes
//   outputs: the forward graph's outputs, then the grads of the inputs in grad_inputs order
// Mutations are the forward graph's.
struct JointGraph {
  std::shared_ptr<graph::Graph> g;
  size_t num_primals = 0;
  size_t num_forward_nodes = 0;
  size_t num_forward_outputs = 0;
  std::vector<int> diff_outputs;  // forward output positions that carry a gradient
  std::vector<int> grad_inputs;   // forward input positions that receive one
  uint64_t trailing_draws = 0;    // the forward graph's removed random draws after its last node
};

// Builds the joint graph, or returns false with `why` when the graph has to run with per-op
// autograd instead (a write-back of a value that needs grad, an op without a traceable grad).
bool build_joint(const graph::Graph& fwd, const std::vector<bool>& input_rg, JointGraph* out,
                 std::string* why);

// A joint graph split in two (partition.cpp).
//   rng:      the forward's random nodes (which take no inputs), hoisted so the forward graph is
//             free of them; outputs one value per node. Null when there are none.
//   forward:  inputs = primals, then rng's outputs; outputs = the forward outputs, then
//             the values saved for the backward (saved_values of them)
//   backward: inputs = the saved values, then the saved primals (primal positions in
//             saved_primals), then the tangents; outputs = the grads (grad_inputs order)
struct Partition {
  std::shared_ptr<graph::Graph> rng;
  uint64_t trailing_draws = 0;  // reserved after the forward ran (as JointGraph)
  std::shared_ptr<graph::Graph> forward;
  std::shared_ptr<graph::Graph> backward;
  size_t num_outputs = 0;          // forward outputs of the original graph
  size_t num_saved_values = 0;     // forward outputs after those, read by the backward
  std::vector<int> saved_primals;  // primal positions the backward reads
  std::vector<int> diff_outputs;   // as JointGraph
  std::vector<int> grad_inputs;    // as JointGraph
  int recomputed = 0;              // forward nodes copied into the backward
  int64_t saved_bytes = 0;         // bytes of the saved values (primals not counted)
};

// Splits `j`; forward values that are cheap to recompute are recomputed in the backward rather
// than saved (the rule is documented in partition.cpp). With `reorder_products`, transposed
// matmul products in the backward are computed in the transposed order (Graph::
// transpose_matmul_products), which sums in another order than eager.
Partition partition_joint(const JointGraph& j, bool reorder_products = false);

// The training form of g for inputs whose requires_grad flags are `input_rg`: forward and
// backward compiled with `be`. Null (with `why`) when g must run with per-op autograd.
std::shared_ptr<const Runnable> compile_training(Backend& be, std::shared_ptr<const graph::Graph> g,
                                                 const std::vector<bool>& input_rg,
                                                 std::string* why);

}  // namespace ember::capture
