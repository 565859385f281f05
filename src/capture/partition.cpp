// Splitting a joint graph into the forward graph (outputs + saved values) and the backward graph
// (saved values + output grads -> input grads), deciding which forward values to recompute.
//
// The rule (a greedy heuristic, not a min-cut): the backward needs some forward values. Going
// through the forward nodes from last to first, a needed value is recomputed in the backward
// instead of saved when
//   - its node is cheap: a view, or a fusable pointwise or factory op that draws no random
//     numbers (recomputing it is a few flops per element, fused with its consumers) and is not
//     marked kCostly in the op table (gelu, tanh, sigmoid, silu: their polynomials and
//     divisions cost several times the memory traffic of reading the saved value back), and
//   - recomputing keeps less memory alive: the bytes of its inputs that would be saved only for
//     this (inputs already saved, already recomputed, or forward inputs count nothing) are fewer
//     than its own bytes, or none. On a tie the value stays saved: recomputing would cost a pass
//     over memory and save nothing.
// Sizes count the memory a value keeps alive: a view counts the tensor it views. Forward inputs
// count nothing: the caller holds them anyway. Whatever the backward then reads of the forward
// is saved. So `relu(h)` read by a matmul's grad is recomputed from `h`, which relu's grad saves
// anyway, while `gelu(h)` is saved next to `h`; views and scalar constants are always
// recomputed; softmax, layer_norm and matmul outputs are saved.
#include <functional>

#include "capture/joint.h"
#include "core/shape.h"
#include "graph/graph_util.h"

namespace ember::capture {

namespace {

bool cheap(const graph::Node& n) {
  const OpInfo& info = op_info(n.op);
  if (info.kind == OpKind::View) return true;
  return (info.kind == OpKind::Pointwise || info.kind == OpKind::Factory) && info.has(kFusable) &&
         !info.has(kCostly) && n.outputs.size() == 1;
}

// The bytes a saved value keeps alive: a view keeps the tensor it views.
int64_t kept_bytes(const graph::Value* v) {
  v = graph::view_root(v);
  return shape_numel(v->meta.sizes) * int64_t(dtype_size(v->meta.dtype));
}

// Copies a node into another graph, through a value map (source id -> destination value).
graph::Node* copy_node(graph::Graph& dst, const graph::Node& n, std::vector<graph::Value*>& map) {
  std::vector<graph::Value*> ins;
  for (const graph::Value* v : n.inputs) ins.push_back(map[size_t(v->id)]);
  MetaList metas;
  for (const graph::Value* v : n.outputs) metas.push_back(v->meta);
  graph::Node* c = dst.add_node(n.op, std::move(ins), n.attrs, metas, n.loc);
  c->no_grad = n.no_grad;
  c->skipped_draws = n.skipped_draws;
  for (size_t j = 0; j < metas.size(); ++j) map[size_t(n.outputs[j]->id)] = c->outputs[j];
  return c;
}

graph::Value* add_input_like(graph::Graph& dst, const graph::Value* v, graph::InputKind kind,
                             std::string name) {
  return dst.add_input(v->meta, v->device, kind, std::move(name));
}

}  // namespace

Partition partition_joint(const JointGraph& j, bool reorder_products) {
  const graph::Graph& J = *j.g;
  const auto& nodes = J.nodes();
  const size_t nf = j.num_forward_nodes;
  const size_t nvals = J.values().size();
  auto is_primal = [&](const graph::Value* v) {
    return !v->producer && v->input_index >= 0 && size_t(v->input_index) < j.num_primals;
  };
  auto is_forward = [&](const graph::Value* v) {
    return is_primal(v) || (v->producer && size_t(v->producer->id) < nf);
  };

  // What the backward reads of the forward.
  std::vector<char> saved(nvals, 0), recompute_node(nodes.size(), 0), recomputed_val(nvals, 0);
  for (size_t k = nf; k < nodes.size(); ++k)
    for (const graph::Value* v : nodes[k]->inputs)
      if (is_forward(v)) saved[size_t(v->id)] = 1;
  for (size_t k = j.num_forward_outputs; k < J.outputs().size(); ++k)
    if (is_forward(J.outputs()[k])) saved[size_t(J.outputs()[k]->id)] = 1;

  for (size_t k = nf; k-- > 0;) {
    const graph::Node& n = *nodes[k];
    if (!cheap(n) || !saved[size_t(n.outputs[0]->id)]) continue;
    int64_t extra = 0;
    for (const graph::Value* in : n.inputs)
      if (!is_primal(in) && !saved[size_t(in->id)] && !recomputed_val[size_t(in->id)])
        extra += kept_bytes(in);
    // A tie keeps the value saved: recomputing it would cost a pass over memory for nothing
    // (a bias add recomputed from the matmul output it was made from, say).
    if (extra > 0 && extra >= kept_bytes(n.outputs[0])) continue;
    recompute_node[k] = 1;
    saved[size_t(n.outputs[0]->id)] = 0;
    recomputed_val[size_t(n.outputs[0]->id)] = 1;
    for (const graph::Value* in : n.inputs)
      if (!recomputed_val[size_t(in->id)]) saved[size_t(in->id)] = 1;
  }

  Partition p;
  p.num_outputs = j.num_forward_outputs;
  p.diff_outputs = j.diff_outputs;
  p.grad_inputs = j.grad_inputs;
  // Draws of removed random nodes after the last kept one: reserved after the forward ran.
  p.trailing_draws = j.trailing_draws;

  // Random nodes that take no inputs are hoisted into their own graph, in order, with the draws
  // of removed ones, so the forward graph draws nothing (the compiler fuses only such graphs)
  // and the generator moves as it would have. Not done when a random node reads a value.
  bool hoist = true;
  for (size_t k = 0; k < nf; ++k)
    if (graph::is_random(nodes[k]->op) && !nodes[k]->inputs.empty()) hoist = false;
  std::vector<graph::Value*> fmap(nvals, nullptr);
  auto fwd = std::make_shared<graph::Graph>();
  fwd->set_dynamic_sizes(J.dynamic_sizes());
  fwd->set_static_dims(J.static_dims());  // the primals come first, in order
  for (size_t i = 0; i < j.num_primals; ++i)
    fmap[size_t(J.inputs()[i]->id)] =
        add_input_like(*fwd, J.inputs()[i], J.input_kinds()[i], J.input_names()[i]);
  if (hoist) {
    auto rng = std::make_shared<graph::Graph>();
    rng->set_dynamic_sizes(J.dynamic_sizes());
    std::vector<graph::Value*> rmap(nvals, nullptr), routs;
    for (size_t k = 0; k < nf; ++k) {
      if (!graph::is_random(nodes[k]->op)) continue;
      graph::Node* c = copy_node(*rng, *nodes[k], rmap);
      routs.push_back(c->outputs[0]);
      fmap[size_t(nodes[k]->outputs[0]->id)] =
          add_input_like(*fwd, nodes[k]->outputs[0], graph::InputKind::Captured,
                         "random" + std::to_string(routs.size() - 1));
    }
    if (!routs.empty()) {
      rng->set_outputs(std::move(routs));
      p.rng = std::move(rng);
    }
  }
  for (size_t k = 0; k < nf; ++k)
    if (!(hoist && graph::is_random(nodes[k]->op))) copy_node(*fwd, *nodes[k], fmap);
  std::vector<graph::Value*> fouts;
  for (size_t k = 0; k < j.num_forward_outputs; ++k)
    fouts.push_back(fmap[size_t(J.outputs()[k]->id)]);
  std::vector<const graph::Value*> saved_values;
  for (size_t id = 0; id < nvals; ++id) {
    const graph::Value* v = J.values()[id].get();
    if (!saved[id]) continue;
    if (is_primal(v)) {
      p.saved_primals.push_back(v->input_index);
    } else {
      saved_values.push_back(v);
      fouts.push_back(fmap[id]);
      p.saved_bytes += kept_bytes(v);
    }
  }
  p.num_saved_values = saved_values.size();
  fwd->set_outputs(std::move(fouts));
  for (const graph::Mutation& m : J.mutations())
    fwd->add_mutation(fmap[size_t(m.target->id)], fmap[size_t(m.value->id)]);

  // The backward: saved values, saved primals, tangents in; recomputed nodes, then the
  // backward nodes.
  auto bwd = std::make_shared<graph::Graph>();
  bwd->set_dynamic_sizes(J.dynamic_sizes());
  std::vector<graph::Value*> bmap(nvals, nullptr);
  for (size_t s = 0; s < saved_values.size(); ++s)
    bmap[size_t(saved_values[s]->id)] = add_input_like(
        *bwd, saved_values[s], graph::InputKind::Argument, "saved" + std::to_string(s));
  for (int i : p.saved_primals)
    bmap[size_t(J.inputs()[size_t(i)]->id)] = add_input_like(
        *bwd, J.inputs()[size_t(i)], graph::InputKind::Argument, J.input_names()[size_t(i)]);
  for (size_t i = j.num_primals; i < J.inputs().size(); ++i)
    bmap[size_t(J.inputs()[i]->id)] =
        add_input_like(*bwd, J.inputs()[i], graph::InputKind::Argument, J.input_names()[i]);
  // A recomputed node goes just before its first reader, so recomputed values live only while
  // they are needed (recomputing them all up front would hold every one through the backward).
  std::function<void(const graph::Value*)> materialize = [&](const graph::Value* v) {
    if (bmap[size_t(v->id)] || !v->producer) return;
    const graph::Node& n = *v->producer;
    EMBER_CHECK(recompute_node[size_t(n.id)], "internal: the backward reads %", v->id,
                ", which is neither saved nor recomputed");
    for (const graph::Value* in : n.inputs) materialize(in);
    copy_node(*bwd, n, bmap);
    ++p.recomputed;
  };
  for (size_t k = nf; k < nodes.size(); ++k) {
    for (const graph::Value* in : nodes[k]->inputs) materialize(in);
    copy_node(*bwd, *nodes[k], bmap);
  }
  for (size_t k = j.num_forward_outputs; k < J.outputs().size(); ++k)
    materialize(J.outputs()[k]);
  std::vector<graph::Value*> bouts;
  for (size_t k = j.num_forward_outputs; k < J.outputs().size(); ++k)
    bouts.push_back(bmap[size_t(J.outputs()[k]->id)]);
  bwd->set_outputs(std::move(bouts));
  bwd->eliminate_dead_code();
  bwd->eliminate_common_subexpressions();
  // Weight grads come out of the joint graph as transposed products; computed the other way
  // round they are contiguous, so the grad is taken as it is rather than copied.
  if (reorder_products) bwd->transpose_matmul_products();
  fwd->validate();
  bwd->validate();
  p.forward = std::move(fwd);
  p.backward = std::move(bwd);
  return p;
}

}  // namespace ember::capture
