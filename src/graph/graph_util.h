// Helpers shared by the graph files: printing pieces and attribute identity.
#pragma once
#include <string>

#include "graph/graph.h"

namespace ember::graph {

// "f32[4, 8]", with strides and offset when the value is not a plain contiguous tensor.
std::string value_type_str(const Value& v);
// One node as str() prints it, without indentation: "%3 = add(%1, %2)  # f32[4, 8]".
std::string node_str(const Node& n);

inline bool is_random(OpId op) { return op_info(op).kind == OpKind::Random; }
// Whether a run of g draws random numbers: a random node, or draws reserved in place of removed
// ones.
inline bool draws_random(const Graph& g) {
  if (g.trailing_skipped_draws() > 0) return true;
  for (const auto& n : g.nodes())
    if (is_random(n->op) || n->skipped_draws) return true;
  return false;
}

// The value whose buffer v lives in: v itself, or what a chain of views of it started from.
inline const Value* view_root(const Value* v) {
  while (v->producer && op_info(v->producer->op).kind == OpKind::View) v = v->producer->inputs[0];
  return v;
}

// Attribute identity for graphs: floating fields compare by bits (so a NaN fill value equals
// itself and -0.0 differs from 0.0), and random ops ignore seed and offset, which are drawn
// afresh at each run.
bool same_attrs(OpId op, const Attrs& a, const Attrs& b);
size_t attrs_hash(OpId op, const Attrs& a);

}  // namespace ember::graph
