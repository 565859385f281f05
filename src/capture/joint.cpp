// The joint forward/backward graph: the forward graph copied, then its backward traced by running
// each op's grad formula (src/ops, written with ember ops) on symbolic tensors under a capture
// hook that appends the ops it sees. The walk is the eager engine's, done ahead: nodes in reverse
// order, grads of a value summed in the order the engine would sum them, a grad cast to its
// input's dtype where the formula changed it. So the backward computes what eager autograd
// computes, op for op.
#include "capture/joint.h"

#include <unordered_map>

#include "core/shape.h"
#include "ember/autograd.h"
#include "graph/graph_util.h"

namespace ember::capture {

std::vector<char> values_requiring_grad(const graph::Graph& g, const std::vector<bool>& input_rg) {
  std::vector<char> rg(g.values().size(), 0);
  for (size_t i = 0; i < g.inputs().size(); ++i) rg[size_t(g.inputs()[i]->id)] = input_rg[i];
  for (const auto& n : g.nodes()) {
    if (n->no_grad || !op_info(n->op).has(kDifferentiable)) continue;
    bool any = false;
    for (const graph::Value* v : n->inputs) any |= rg[size_t(v->id)] != 0;
    if (!any) continue;
    for (const graph::Value* v : n->outputs) rg[size_t(v->id)] = is_floating(v->meta.dtype);
  }
  return rg;
}

namespace {

// Thrown by the hook for what a grad formula may not do while traced; build_joint turns it into
// a reason to run the graph with per-op autograd.
struct Untraceable {
  std::string why;
};

// Appends the ops grad formulas call to the joint graph, over symbolic tensors standing for its
// values.
class GradTracer : public CaptureHook {
 public:
  explicit GradTracer(graph::Graph& g) : g_(g) {}

  // A symbolic tensor for value v (the same handle each time).
  Tensor sym(graph::Value* v) {
    auto it = handles_.find(v);
    if (it != handles_.end()) return it->second;
    auto impl = std::make_shared<TensorImpl>();
    impl->sizes = v->meta.sizes;
    impl->strides = v->meta.strides;
    impl->offset = v->meta.offset;
    impl->dtype = v->meta.dtype;
    impl->device = v->device;
    impl->is_view = v->producer && op_info(v->producer->op).kind == OpKind::View;
    impl->symbolic = std::make_shared<char>();
    Tensor t(std::move(impl));
    values_[t.impl()] = v;
    handles_.emplace(v, t);
    return t;
  }

  // The value a handle stands for (null for tensors the tracer did not make).
  graph::Value* find(const Tensor& t) const {
    auto it = values_.find(t.impl());
    return it == values_.end() ? nullptr : it->second;
  }

  std::vector<Tensor> on_op(OpId op, std::span<const Tensor> inputs, const Attrs& attrs) override {
    const OpInfo& info = op_info(op);
    if (info.has(kDataDependentShape) || info.has(kNeedsBreak) || info.kind == OpKind::Random)
      throw Untraceable{"a grad formula calls " + std::string(info.name) +
                        ", which a traced backward cannot hold"};
    std::vector<graph::Value*> vals;
    vals.reserve(inputs.size());
    for (const Tensor& t : inputs) vals.push_back(value_of(t, info.name));
    MetaList metas = op_impl(op).infer(inputs, attrs);
    graph::Node* n = g_.add_node(op, std::move(vals), attrs, metas);
    std::vector<Tensor> outs;
    for (graph::Value* v : n->outputs) outs.push_back(sym(v));
    return outs;
  }
  void on_inplace(OpId op, std::span<const Tensor>, const Tensor&, const Attrs&) override {
    throw Untraceable{"a grad formula writes in place (" + std::string(op_name(op)) + "_)"};
  }
  // detach() in a formula: the same value (the backward records no history anyway).
  void on_alias(const Tensor& alias, const Tensor&) override {
    if (!alias.is_symbolic()) return;  // a real tensor's alias is a constant like it
    auto it = values_.find(alias.impl());
    if (it != values_.end()) return;
    for (const auto& [v, h] : handles_)
      if (h.impl()->symbolic == alias.impl()->symbolic) {
        values_[alias.impl()] = v;
        aliases_.push_back(alias);
        return;
      }
  }
  void on_sync(const Tensor&, const char* why, ember::SourceLocation) override {
    throw Untraceable{std::string("a grad formula reads tensor values (") + why + ")"};
  }

 private:
  graph::Value* value_of(const Tensor& t, std::string_view op) {
    graph::Value* v = find(t);
    if (!v)
      throw Untraceable{"a grad formula passes " + std::string(op) +
                        " a tensor made outside the traced ops"};
    return v;
  }

  graph::Graph& g_;
  std::unordered_map<const TensorImpl*, graph::Value*> values_;
  std::unordered_map<graph::Value*, Tensor> handles_;
  std::vector<Tensor> aliases_;  // keeps detached handles (and so their addresses) alive
};

std::string input_desc(const graph::Graph& g, size_t i) {
  std::string s = "input " + std::to_string(i);
  if (!g.input_names()[i].empty()) s += " (\"" + g.input_names()[i] + "\")";
  return s;
}

// One pass over the forward graph, in reverse: the grad formulas of every node that has history.
void trace_backward(const graph::Graph& fwd, const std::vector<char>& rg,
                    const std::vector<graph::Value*>& map, GradTracer& tracer,
                    std::vector<Tensor>& grad_of) {
  const auto& nodes = fwd.nodes();
  for (size_t k = nodes.size(); k-- > 0;) {
    const graph::Node& n = *nodes[k];
    if (n.no_grad || !op_info(n.op).has(kDifferentiable)) continue;
    bool any_grad = false, any_needed = false;
    for (const graph::Value* v : n.outputs) any_grad |= grad_of[size_t(v->id)].defined();
    for (const graph::Value* v : n.inputs) any_needed |= rg[size_t(v->id)] != 0;
    if (!any_grad || !any_needed) continue;
    const OpImpl& impl = op_impl(n.op);
    const size_t ni = n.inputs.size(), no = n.outputs.size();
    std::vector<Tensor> ins(ni), outs(no), grads(no);
    std::vector<TensorMeta> metas(ni);
    std::unique_ptr<bool[]> needs(new bool[ni]);
    for (size_t i = 0; i < ni; ++i) {
      const graph::Value* v = n.inputs[i];
      if (impl.save_inputs & (1u << i)) ins[i] = tracer.sym(map[size_t(v->id)]);
      metas[i] = TensorMeta{v->meta.sizes, {}, 0, v->meta.dtype};
      needs[i] = rg[size_t(v->id)] != 0;
    }
    for (size_t j = 0; j < no; ++j) {
      const graph::Value* v = n.outputs[j];
      if (impl.save_outputs & (1u << j)) outs[j] = tracer.sym(map[size_t(v->id)]);
      grads[j] = grad_of[size_t(v->id)];
    }
    GradCtx ctx{n.op, n.attrs, ins, outs, grads, metas, std::span<const bool>(needs.get(), ni)};
    std::vector<Tensor> result = impl.grad(ctx);
    EMBER_CHECK(result.size() == ni, "internal: grad formula of ", op_name(n.op), " returned ",
                result.size(), " grads for ", ni, " inputs");
    for (size_t i = 0; i < ni; ++i) {
      Tensor r = result[i];
      if (!needs[i] || !r.defined()) continue;
      EMBER_CHECK(r.sizes() == metas[i].sizes, "internal: grad formula of ", op_name(n.op),
                  " gave shape ", r.shape_str(), " for input ", i, " of shape ",
                  shape_str(metas[i].sizes));
      if (r.dtype() != metas[i].dtype) r = r.to(metas[i].dtype);
      Tensor& slot = grad_of[size_t(n.inputs[i]->id)];
      slot = slot.defined() ? slot + r : r;
    }
  }
}

}  // namespace

bool build_joint(const graph::Graph& fwd, const std::vector<bool>& input_rg, JointGraph* out,
                 std::string* why) {
  const std::vector<char> rg = values_requiring_grad(fwd, input_rg);
  for (const graph::Mutation& m : fwd.mutations()) {
    if (rg[size_t(m.value->id)] || input_rg[size_t(m.target->input_index)]) {
      *why = "the graph writes a value with autograd history into " +
             input_desc(fwd, size_t(m.target->input_index)) + " (an in-place op on it)";
      return false;
    }
  }
  for (const auto& n : fwd.nodes()) {
    if (n->no_grad || !op_info(n->op).has(kNoGrad)) continue;
    for (const graph::Value* v : n->inputs)
      if (rg[size_t(v->id)]) {
        *why = std::string(op_name(n->op)) + " has no gradient but an input requires grad";
        return false;
      }
  }

  // The forward, copied.
  auto g = std::make_shared<graph::Graph>();
  g->set_dynamic_sizes(fwd.dynamic_sizes());
  g->set_static_dims(fwd.static_dims());  // the same inputs, first and in order
  std::vector<graph::Value*> map(fwd.values().size(), nullptr);
  for (size_t i = 0; i < fwd.inputs().size(); ++i) {
    const graph::Value* v = fwd.inputs()[i];
    map[size_t(v->id)] =
        g->add_input(v->meta, v->device, fwd.input_kinds()[i], fwd.input_names()[i]);
  }
  for (const auto& n : fwd.nodes()) {
    std::vector<graph::Value*> ins;
    for (const graph::Value* v : n->inputs) ins.push_back(map[size_t(v->id)]);
    MetaList metas;
    for (const graph::Value* v : n->outputs) metas.push_back(v->meta);
    graph::Node* c = g->add_node(n->op, std::move(ins), n->attrs, metas, n->loc);
    c->no_grad = n->no_grad;
    c->skipped_draws = n->skipped_draws;
    for (size_t j = 0; j < metas.size(); ++j) map[size_t(n->outputs[j]->id)] = c->outputs[j];
  }
  for (const graph::Mutation& m : fwd.mutations())
    g->add_mutation(map[size_t(m.target->id)], map[size_t(m.value->id)]);

  JointGraph j;
  j.num_primals = fwd.inputs().size();
  j.num_forward_nodes = fwd.num_ops();
  j.num_forward_outputs = fwd.outputs().size();
  j.trailing_draws = fwd.trailing_skipped_draws();
  GradTracer tracer(*g);
  std::vector<Tensor> grad_of(fwd.values().size());
  for (size_t k = 0; k < fwd.outputs().size(); ++k) {
    const graph::Value* v = fwd.outputs()[k];
    if (!v->producer || !rg[size_t(v->id)]) continue;
    j.diff_outputs.push_back(int(k));
    TensorMeta m{v->meta.sizes, contiguous_strides(v->meta.sizes), 0, v->meta.dtype};
    grad_of[size_t(v->id)] =
        tracer.sym(g->add_input(m, v->device, graph::InputKind::Argument,
                                "tangent" + std::to_string(j.diff_outputs.size() - 1)));
  }
  try {
    HookScope on(&tracer);
    NoGradGuard no_grad;  // as the engine runs grad formulas
    trace_backward(fwd, rg, map, tracer, grad_of);
  } catch (const Untraceable& u) {
    *why = u.why;
    return false;
  }

  std::vector<graph::Value*> outs;
  for (const graph::Value* v : fwd.outputs()) outs.push_back(map[size_t(v->id)]);
  for (size_t i = 0; i < fwd.inputs().size(); ++i) {
    const Tensor& gi = grad_of[size_t(fwd.inputs()[i]->id)];
    if (!input_rg[i] || !gi.defined()) continue;
    j.grad_inputs.push_back(int(i));
    outs.push_back(tracer.find(gi));
    EMBER_CHECK(outs.back(), "internal: the grad of ", input_desc(fwd, i),
                " is not a value of the joint graph");
  }
  g->set_outputs(std::move(outs));
  g->validate();
  j.g = std::move(g);
  *out = std::move(j);
  return true;
}

}  // namespace ember::capture
