// Graph cleanup passes: dead code elimination and common subexpression elimination.
#include <algorithm>
#include <unordered_map>

#include "core/generator.h"
#include "graph/graph_util.h"

namespace ember::graph {

namespace {

// The CSE key of a node: op, attributes and the exact input values.
size_t node_key(const Node& n) {
  size_t h = size_t(n.op) * 0x9e3779b97f4a7c15ull ^ attrs_hash(n.op, n.attrs);
  for (const Value* v : n.inputs) h = h * 1000003u ^ size_t(v->id);
  return h;
}

bool same_computation(const Node& a, const Node& b) {
  return a.op == b.op && a.no_grad == b.no_grad && a.inputs == b.inputs &&
         same_attrs(a.op, a.attrs, b.attrs);
}

}  // namespace

int Graph::eliminate_dead_code() {
  std::vector<char> live(values_.size(), 0);
  for (const Value* v : outputs_) live[size_t(v->id)] = 1;
  for (const Mutation& m : mutations_) live[size_t(m.target->id)] = live[size_t(m.value->id)] = 1;
  std::vector<char> keep(nodes_.size(), 0);
  for (size_t i = nodes_.size(); i-- > 0;) {
    const Node& n = *nodes_[i];
    for (const Value* v : n.outputs) keep[i] |= live[size_t(v->id)];
    if (keep[i])
      for (const Value* v : n.inputs) live[size_t(v->id)] = 1;
  }
  // A removed random node still moves the generator on at each run (see Node::skipped_draws):
  // its draws go to the next random node kept, or to the end of the graph.
  uint64_t pending = 0;
  for (size_t i = 0; i < nodes_.size(); ++i) {
    Node& n = *nodes_[i];
    if (!is_random(n.op)) continue;
    if (keep[i]) {
      n.skipped_draws += pending;
      pending = 0;
    } else {
      pending += n.skipped_draws + round_up_to_block(random_draws(n));
    }
  }
  trailing_skipped_draws_ += pending;

  const int removed = int(std::count(keep.begin(), keep.end(), 0));
  if (removed == 0) return 0;
  std::vector<std::unique_ptr<Node>> kept;
  for (size_t i = 0; i < nodes_.size(); ++i) {
    if (keep[i]) {
      kept.push_back(std::move(nodes_[i]));
      continue;
    }
    for (Value* v : nodes_[i]->outputs) v->producer = nullptr;  // marks it for removal below
  }
  // The removed nodes' outputs: no longer produced and not graph inputs.
  std::erase_if(values_, [](const std::unique_ptr<Value>& v) {
    return !v->producer && v->input_index < 0;
  });
  nodes_ = std::move(kept);
  renumber();
  return removed;
}

int Graph::eliminate_common_subexpressions() {
  std::vector<Value*> replace(values_.size(), nullptr);
  auto resolve = [&](Value* v) { return replace[size_t(v->id)] ? replace[size_t(v->id)] : v; };
  // Values the caller receives: two distinct outputs must stay distinct tensors (eager would
  // return two tensors, and writing into one must not change the other).
  std::vector<char> is_output(values_.size(), 0);
  for (const Value* v : outputs_) is_output[size_t(v->id)] = 1;

  std::unordered_multimap<size_t, Node*> seen;
  std::vector<char> drop(nodes_.size(), 0);
  int removed = 0;
  for (size_t i = 0; i < nodes_.size(); ++i) {
    Node& n = *nodes_[i];
    for (Value*& v : n.inputs) v = resolve(v);
    // Two dropout masks are two draws, however alike their calls look.
    if (is_random(n.op)) continue;
    const size_t key = node_key(n);
    Node* same = nullptr;
    auto [lo, hi] = seen.equal_range(key);
    for (auto it = lo; it != hi && !same; ++it)
      if (same_computation(*it->second, n)) same = it->second;
    bool both_outputs = false;
    if (same)
      for (size_t j = 0; j < n.outputs.size(); ++j)
        both_outputs |= is_output[size_t(n.outputs[j]->id)] && is_output[size_t(same->outputs[j]->id)];
    if (!same || both_outputs) {
      if (!same) seen.emplace(key, &n);
      continue;
    }
    for (size_t j = 0; j < n.outputs.size(); ++j) {
      replace[size_t(n.outputs[j]->id)] = same->outputs[j];
      if (is_output[size_t(n.outputs[j]->id)]) is_output[size_t(same->outputs[j]->id)] = 1;
    }
    drop[i] = 1;
    ++removed;
  }
  if (removed == 0) return 0;
  for (Value*& v : outputs_) v = resolve(v);
  for (Mutation& m : mutations_) m.value = resolve(m.value);

  std::vector<std::unique_ptr<Node>> kept;
  for (size_t i = 0; i < nodes_.size(); ++i) {
    if (!drop[i]) {
      kept.push_back(std::move(nodes_[i]));
      continue;
    }
    for (Value* v : nodes_[i]->outputs) v->producer = nullptr;
  }
  std::erase_if(values_, [](const std::unique_ptr<Value>& v) {
    return !v->producer && v->input_index < 0;
  });
  nodes_ = std::move(kept);
  renumber();
  return removed;
}

}  // namespace ember::graph
