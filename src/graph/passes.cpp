// Graph cleanup passes: dead code elimination, common subexpression elimination, and
// transposed matmul products computed in the transposed order.
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

// The permutation that swaps the last two of nd dims.
Shape swap_last_two(size_t nd) {
  Shape dims(nd);
  for (size_t k = 0; k < nd; ++k) dims[k] = int64_t(k);
  std::swap(dims[nd - 2], dims[nd - 1]);
  return dims;
}

bool swaps_last_two(const Node& n) {
  return n.op == OpId::permute && n.attrs.dims.size() >= 2 &&
         n.attrs.dims == swap_last_two(n.attrs.dims.size());
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

int Graph::transpose_matmul_products() {
  std::vector<int> readers(values_.size(), 0);
  // Values a view reads: the view's layout was derived from theirs, so they keep it.
  std::vector<char> viewed(values_.size(), 0);
  for (const auto& n : nodes_)
    for (const Value* v : n->inputs) {
      ++readers[size_t(v->id)];
      viewed[size_t(v->id)] |= op_info(n->op).kind == OpKind::View;
    }
  for (const Value* v : outputs_) ++readers[size_t(v->id)];
  for (const Mutation& m : mutations_) readers[size_t(m.target->id)] = readers[size_t(m.value->id)] = 2;

  std::vector<Value*> replace(values_.size(), nullptr);
  std::vector<std::vector<std::unique_ptr<Node>>> after(nodes_.size());
  int rewritten = 0;
  const size_t original = nodes_.size();
  for (size_t i = 0; i < original; ++i) {
    const Node& t = *nodes_[i];
    if (!swaps_last_two(t)) continue;
    const Value* product = t.inputs[0];
    const Node* mm = product->producer;
    if (!mm || mm->op != OpId::matmul || readers[size_t(product->id)] != 1 ||
        viewed[size_t(t.outputs[0]->id)] ||
        mm->no_grad != t.no_grad || t.attrs.dims.size() != product->meta.sizes.size())
      continue;
    Value* a = mm->inputs[0];
    Value* b = mm->inputs[1];
    if (a->meta.sizes.size() < 2 || b->meta.sizes.size() < 2) continue;
    // The transpose of an operand: the permute's input when the operand is one, else a new
    // (free) transposed view.
    auto transposed = [&](Value* v) -> Value* {
      if (v->producer && swaps_last_two(*v->producer)) return v->producer->inputs[0];
      Attrs attrs;
      attrs.dims = swap_last_two(v->meta.sizes.size());
      return add_node(OpId::permute, {v}, attrs, {}, t.loc)->outputs[0];
    };
    // Batch dims broadcast alike either way round, so the product has t's sizes.
    Value* bt = transposed(b);
    Value* at = transposed(a);
    Node* swapped = add_node(OpId::matmul, {bt, at}, Attrs{}, {}, mm->loc);
    replace[size_t(t.outputs[0]->id)] = swapped->outputs[0];
    ++rewritten;
    // The added nodes (at the end of nodes_) move to just after t, past their inputs.
    for (size_t k = original; k < nodes_.size(); ++k) after[i].push_back(std::move(nodes_[k]));
    nodes_.resize(original);
  }
  if (rewritten == 0) return 0;
  auto resolve = [&](Value* v) {
    return size_t(v->id) < replace.size() && replace[size_t(v->id)] ? replace[size_t(v->id)] : v;
  };
  std::vector<std::unique_ptr<Node>> order;
  for (size_t i = 0; i < original; ++i) {
    order.push_back(std::move(nodes_[i]));
    for (auto& n : after[i]) order.push_back(std::move(n));
  }
  for (auto& n : order)
    for (Value*& v : n->inputs) v = resolve(v);
  for (Value*& v : outputs_) v = resolve(v);
  for (Mutation& m : mutations_) m.value = resolve(m.value);
  nodes_ = std::move(order);
  renumber();
  eliminate_dead_code();
  return rewritten;
}

}  // namespace ember::graph
