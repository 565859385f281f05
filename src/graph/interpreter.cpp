// Running a graph op by op through the full dispatcher: the `eager` backend of compile, and
// the reference the compiler's output is checked against.
#include <climits>

#include "core/generator.h"
#include "core/shape.h"
#include "dispatch/dispatcher.h"
#include "ember/autograd.h"
#include "graph/graph_util.h"

namespace ember::graph {

// Precomputed once per graph (and again after it changes).
struct RunPlan {
  // After node i, the values whose last use it was: dropping them frees intermediates as
  // early as eager code that lets temporaries go out of scope.
  std::vector<std::vector<int>> release_after;
  std::vector<uint64_t> draws;  // per node: draws to reserve (random nodes only)
};

uint64_t random_draws(const Node& n) {
  const Attrs& a = n.attrs;
  const uint64_t numel = uint64_t(shape_numel(a.shape));
  const bool f64 = a.dtype == DType::Float64;
  switch (n.op) {
    case OpId::rand:
      return (f64 ? 2 : 1) * numel;
    case OpId::randn:  // Box-Muller pairs
      return (numel + 1) / 2 * (f64 ? 4 : 2);
    case OpId::randint:
      return 2 * numel;
    case OpId::bernoulli:
      return numel;
    case OpId::rng_state:
      return uint64_t(a.end);
    case OpId::multinomial: {
      const Shape& w = n.inputs[0]->meta.sizes;
      const uint64_t rows = w.size() == 1 ? 1 : uint64_t(w[0]);
      const uint64_t cols = uint64_t(w.back());
      const bool race = !a.flag && a.end > 1;
      return rows * round_up_to_block(2 * (race ? cols : uint64_t(a.end)));
    }
    default:
      EMBER_FAIL("graph: cannot replay random op ", op_name(n.op),
                 ": its draw count is unknown (add it to graph::random_draws)");
  }
}

std::shared_ptr<const RunPlan> Graph::run_plan() const {
  std::lock_guard lock(plan_mutex_);
  if (plan_) return plan_;
  // Once per graph: the plan and the run below index by value ids and trust the wiring.
  validate();
  auto plan = std::make_shared<RunPlan>();
  const size_t n = nodes_.size();
  std::vector<int> last_use(values_.size(), -1);
  for (size_t i = 0; i < n; ++i)
    for (const Value* v : nodes_[i]->inputs) last_use[size_t(v->id)] = int(i);
  // Outputs and mutations are read after the last node.
  for (const Value* v : outputs_) last_use[size_t(v->id)] = INT_MAX;
  for (const Mutation& m : mutations_) {
    last_use[size_t(m.target->id)] = INT_MAX;
    last_use[size_t(m.value->id)] = INT_MAX;
  }
  plan->release_after.resize(n);
  plan->draws.assign(n, 0);
  for (size_t i = 0; i < n; ++i) {
    const Node& node = *nodes_[i];
    if (is_random(node.op)) plan->draws[i] = random_draws(node);
    for (const Value* v : node.inputs)
      if (last_use[size_t(v->id)] == int(i)) plan->release_after[i].push_back(v->id);
    for (const Value* v : node.outputs)  // outputs nobody reads (topk's indices, say)
      if (last_use[size_t(v->id)] < 0) plan->release_after[i].push_back(v->id);
    // A node reading one value twice would list it twice; dropping it twice is harmless.
  }
  plan_ = plan;
  return plan;
}

namespace {

std::string input_desc(const Graph& g, size_t i) {
  std::string s = "input " + std::to_string(i);
  if (!g.input_names()[i].empty()) s += " (\"" + g.input_names()[i] + "\")";
  return s;
}

std::string tensor_type_str(const Tensor& t) {
  return std::string(dtype_name(t.dtype())) + shape_str(t.sizes()) +
         (t.device() == kCPU ? "" : " on " + t.device().str());
}

void check_inputs(const Graph& g, const std::vector<Tensor>& args) {
  EMBER_CHECK(args.size() == g.inputs().size(), "graph: expected ", g.inputs().size(),
              " input tensors, got ", args.size());
  for (size_t i = 0; i < args.size(); ++i) {
    const Value& v = *g.inputs()[i];
    EMBER_CHECK(args[i].defined(), "graph: ", input_desc(g, i), " is an undefined tensor");
    const Tensor& t = args[i];
    EMBER_CHECK(t.sizes() == v.meta.sizes && t.dtype() == v.meta.dtype && t.device() == v.device,
                "graph: ", input_desc(g, i), " is ", tensor_type_str(t),
                ", but the graph was captured for ", dtype_name(v.meta.dtype),
                shape_str(v.meta.sizes), v.device == kCPU ? "" : " on " + v.device.str(),
                "; capture again for these inputs");
  }
}

// Which values will carry autograd history in this run: what the dispatcher decides per op,
// decided ahead so that mutations that record history can be prepared before anything runs.
std::vector<char> values_needing_grad(const Graph& g, const std::vector<Tensor>& args) {
  std::vector<char> rg(g.values().size(), 0);
  if (!is_grad_enabled()) return rg;
  for (size_t i = 0; i < args.size(); ++i) rg[size_t(g.inputs()[i]->id)] = args[i].requires_grad();
  for (const auto& n : g.nodes()) {
    if (n->no_grad || !op_info(n->op).has(kDifferentiable)) continue;
    bool any = false;
    for (const Value* v : n->inputs) any |= rg[size_t(v->id)] != 0;
    if (!any) continue;
    for (const Value* v : n->outputs) rg[size_t(v->id)] = is_floating(v->meta.dtype);
  }
  return rg;
}

// The last write into the target ran with grad mode off (an update under NoGradGuard inside
// the function): eager recorded no history for it and made no leaf check, nor does the replay.
bool written_without_grad(const Mutation& m) {
  return m.value->producer && m.value->producer->no_grad;
}

}  // namespace

std::vector<RandomRange> Graph::reserve_draws() const {
  std::shared_ptr<const RunPlan> plan = run_plan();
  std::vector<RandomRange> ranges(nodes_.size());
  for (size_t i = 0; i < nodes_.size(); ++i) {
    const Node& n = *nodes_[i];
    if (n.skipped_draws) reserve_random(n.skipped_draws, "graph replay");
    if (is_random(n.op)) ranges[i] = reserve_random(plan->draws[i], op_name(n.op).data());
  }
  if (trailing_skipped_draws_) reserve_random(trailing_skipped_draws_, "graph replay");
  return ranges;
}

std::vector<Tensor> Graph::interpret(const std::vector<Tensor>& args) const {
  check_inputs(*this, args);
  std::shared_ptr<const RunPlan> plan = run_plan();
  std::vector<Tensor> env(values_.size());
  for (size_t i = 0; i < args.size(); ++i) env[size_t(inputs_[i]->id)] = args[i];

  // A write-back that records autograd history is eager's dispatch_inplace of clone: it
  // fails where eager fails (checked before anything runs, so nothing is half done), and
  // the nodes read a copy of the target, as eager's in-place ops compute from a copy of
  // their target, so the copy_ at the end does not overwrite tensors saved for backward.
  if (!mutations_.empty()) {
    std::vector<char> rg = values_needing_grad(*this, args);
    for (const Mutation& m : mutations_) {
      const Tensor& target = args[size_t(m.target->input_index)];
      if (m.value == m.target || !is_grad_enabled() || written_without_grad(m)) continue;
      if (!target.requires_grad() && !rg[size_t(m.value->id)]) continue;
      const std::string what = "graph: `mutate %" + std::to_string(m.target->id) + " <- %" +
                               std::to_string(m.value->id) + "` (" +
                               input_desc(*this, size_t(m.target->input_index)) + ")";
      EMBER_CHECK(!(target.requires_grad() && target.is_leaf()), what,
                  ": a leaf tensor that requires grad (shape ", target.shape_str(),
                  ") cannot be modified in place while grad mode is on; run the update under "
                  "NoGradGuard, or use the out-of-place op");
      EMBER_CHECK(!target.impl()->is_view, what,
                  ": in-place update of a view while recording gradients is not supported "
                  "(shape ", target.shape_str(), "); use the out-of-place op");
      Tensor& slot = env[size_t(m.target->id)];
      if (slot.impl() == target.impl()) slot = dispatch1(OpId::clone, {target});
    }
  }

  for (size_t i = 0; i < nodes_.size(); ++i) {
    const Node& n = *nodes_[i];
    if (n.skipped_draws) reserve_random(n.skipped_draws, "graph replay");
    std::vector<Tensor> ins;
    ins.reserve(n.inputs.size());
    for (const Value* v : n.inputs) ins.push_back(env[size_t(v->id)]);
    std::vector<Tensor> outs;
    const Attrs* attrs = &n.attrs;
    Attrs fresh;
    if (is_random(n.op)) {
      // A fresh range at each run, in node order: the draws eager calls would make.
      fresh = n.attrs;
      RandomRange r = reserve_random(plan->draws[i], op_name(n.op).data());
      fresh.seed = r.seed;
      fresh.offset = r.offset;
      attrs = &fresh;
    }
    if (n.no_grad) {
      NoGradGuard no_grad;
      outs = dispatch(n.op, std::move(ins), *attrs);
    } else {
      outs = dispatch(n.op, std::move(ins), *attrs);
    }
    EMBER_CHECK(outs.size() == n.outputs.size(), "graph: `", node_str(n), "` returned ",
                outs.size(), " tensors");
    for (size_t j = 0; j < outs.size(); ++j) env[size_t(n.outputs[j]->id)] = std::move(outs[j]);
    for (int id : plan->release_after[i]) env[size_t(id)] = Tensor();
  }
  if (trailing_skipped_draws_) reserve_random(trailing_skipped_draws_, "graph replay");

  std::vector<Tensor> results;
  results.reserve(outputs_.size());
  for (const Value* v : outputs_)
    results.push_back(v->producer ? env[size_t(v->id)] : args[size_t(v->input_index)]);
  for (const Mutation& m : mutations_) {
    if (m.value == m.target) continue;  // written back onto itself
    Tensor target = args[size_t(m.target->input_index)];
    if (written_without_grad(m)) {
      NoGradGuard no_grad;
      target.copy_(env[size_t(m.value->id)]);
    } else {
      target.copy_(env[size_t(m.value->id)]);
    }
  }
  return results;
}

}  // namespace ember::graph
