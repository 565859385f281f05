// Running a captured graph's steps, for the compiled graphs of every device (graph_run.h).
#include "compiler/graph_run.h"

#include "core/make_tensor.h"
#include "dispatch/dispatcher.h"
#include "ember/autograd.h"
#include "ember/ops.h"
#include "graph/graph_util.h"

namespace ember::compiler {

bool records_grad(const std::vector<Tensor>& inputs) {
  if (!is_grad_enabled()) return false;
  for (const Tensor& t : inputs)
    if (t.defined() && t.requires_grad()) return true;
  return false;
}

void dispatch_node(const graph::Node& n, std::vector<Tensor>& env, const RandomRange* draws) {
  std::vector<Tensor> ins;
  for (const graph::Value* v : n.inputs) ins.push_back(env[size_t(v->id)]);
  std::vector<Tensor> outs;
  if (draws && graph::is_random(n.op)) {
    Attrs a = n.attrs;
    a.seed = draws->seed;
    a.offset = draws->offset;
    outs = dispatch(n.op, std::move(ins), a);
  } else {
    outs = dispatch(n.op, std::move(ins), n.attrs);
  }
  for (size_t j = 0; j < outs.size(); ++j) env[size_t(n.outputs[j]->id)] = std::move(outs[j]);
}

std::vector<Tensor> bind_inputs(const graph::Graph& g, const std::vector<Tensor>& inputs) {
  const auto& gin = g.inputs();
  EMBER_CHECK(inputs.size() == gin.size(), "compiler: expected ", gin.size(),
              " input tensors, got ", inputs.size());
  std::vector<Tensor> env(g.values().size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    const graph::Value& v = *gin[i];
    EMBER_CHECK(inputs[i].defined() && inputs[i].sizes() == v.meta.sizes &&
                    inputs[i].dtype() == v.meta.dtype,
                "compiler: input ", i, " does not match the captured ", value_type_str(v),
                "; capture again for these inputs");
    env[size_t(v.id)] = inputs[i];
  }
  return env;
}

bool run_captured_view(const graph::Node& n, std::vector<Tensor>& env) {
  if (op_info(n.op).kind != OpKind::View || n.inputs.size() != 1) return false;
  const graph::Value& in = *n.inputs[0];
  const Tensor& t = env[size_t(in.id)];
  if (!t.defined() || t.is_symbolic() || t.sizes() != in.meta.sizes ||
      t.strides() != in.meta.strides || t.storage_offset() != in.meta.offset ||
      t.dtype() != in.meta.dtype)
    return false;
  for (const graph::Value* o : n.outputs)
    env[size_t(o->id)] = make_view(t, o->meta.sizes, o->meta.strides, o->meta.offset);
  return true;
}

std::vector<Tensor> finish_run(const graph::Graph& g, const std::vector<Tensor>& inputs,
                               const std::vector<Tensor>& env) {
  std::vector<Tensor> results;
  for (const graph::Value* v : g.outputs())
    results.push_back(env[size_t(v->id)]);  // outputs are never released
  // Write-backs into the inputs, after everything has read them (those written in place are
  // already there).
  for (const graph::Mutation& m : g.mutations()) {
    if (m.value == m.target) continue;
    const Tensor& target = inputs[size_t(m.target->input_index)];
    const Tensor& value = env[size_t(m.value->id)];
    if (value.impl() != target.impl()) Tensor(target).copy_(value);
  }
  return results;
}

std::vector<int> made_once(const graph::Graph& g) {
  std::vector<int> once;
  if (g.dynamic_sizes()) return once;
  const auto& nodes = g.nodes();
  for (size_t i = 0; i < nodes.size(); ++i) {
    const graph::Node& n = *nodes[i];
    if (n.op != OpId::arange || !n.inputs.empty() || n.outputs.size() != 1) continue;
    const graph::Value* v = n.outputs[0];
    bool out = false;
    for (const graph::Value* o : g.outputs()) out |= graph::view_root(o) == v;
    for (const graph::Mutation& m : g.mutations())
      out |= graph::view_root(m.target) == v || graph::view_root(m.value) == v;
    if (!out) once.push_back(int(i));
  }
  return once;
}

}  // namespace ember::compiler
