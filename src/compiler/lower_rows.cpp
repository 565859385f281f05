// Lowering row groups (lower.h): the row op's decomposition (decompositions.h) between the
// fused producers, which compute its input at each column, and the consumers of its output.
#include <algorithm>

#include "compiler/codegen_util.h"
#include "compiler/decompositions.h"
#include "compiler/lower.h"
#include "core/shape.h"
#include "graph/graph_util.h"

namespace ember::compiler {

namespace {

// Appends a load of every group input that `nodes` (or `also`) read and is not loaded yet to
// `loads`, then a call per node to `into`.
void lower_nodes(const FusionGroup& grp, const std::vector<const graph::Node*>& nodes,
                 const Shape& shape, const graph::Value* also, std::vector<kir::Stmt>& loads,
                 std::vector<kir::Stmt>& into, std::vector<bool>& loaded) {
  for (size_t b = 0; b < grp.inputs.size(); ++b) {
    const graph::Value* v = grp.inputs[b];
    bool read = v == also;
    for (const graph::Node* node : nodes)
      read |= std::find(node->inputs.begin(), node->inputs.end(), v) != node->inputs.end();
    if (!read || loaded[b]) continue;
    loaded[b] = true;
    kir::Stmt s;
    s.out = var(v);
    s.dtype = v->meta.dtype;
    s.buffer = int(b);
    s.index = shape_numel(v->meta.sizes) == 1 ? kir::Index(0) : broadcast_index(*v, shape);
    loads.push_back(s);
  }
  // A cast is only ever the group's last node (pointwise_fusion.cpp).
  for (const graph::Node* node : nodes) into.push_back(node_stmt(*node));
}

}  // namespace

kir::Kernel lower_rows(const FusionGroup& grp, const std::string& name) {
  EMBER_CHECK(grp.row != nullptr, "compiler: lower_rows of a group without a row op");
  const graph::Node& row = *grp.row;
  const graph::Value& out = *grp.output;
  const Shape& shape = row.inputs[0]->meta.sizes;  // whole rows
  kir::Kernel k = kernel_of_group(grp, shape, name);
  const int out_buffer = int(grp.inputs.size());
  // Producers: the nodes the row op depends on; consumers: the rest, after it.
  std::vector<const graph::Node*> pre, post;
  std::vector<const graph::Value*> needed = {row.inputs[0]};
  for (size_t a = grp.nodes.size(); a-- > 0;) {
    const graph::Node* node = grp.nodes[a];
    if (node == &row) continue;
    if (std::find(needed.begin(), needed.end(), node->outputs[0]) != needed.end()) {
      pre.insert(pre.begin(), node);
      needed.insert(needed.end(), node->inputs.begin(), node->inputs.end());
    }
  }
  for (const graph::Node* node : grp.nodes)
    if (node != &row && std::find(pre.begin(), pre.end(), node) == pre.end()) post.push_back(node);
  auto buffer_of = [&](const graph::Value* v) {
    const auto it = std::find(grp.inputs.begin(), grp.inputs.end(), v);
    EMBER_CHECK(it != grp.inputs.end(), "compiler: ", var(v), " is not an input of ", name);
    return int(it - grp.inputs.begin());
  };
  const std::optional<RowDecomposition> dec = row_decomposition(
      row, var(row.inputs[0]), [&](size_t i) { return buffer_of(row.inputs[i]); });
  EMBER_CHECK(dec.has_value(), "compiler: no row decomposition for ", op_name(row.op));
  kir::RowProgram rp;
  rp.input = var(row.inputs[0]);
  rp.steps = dec->steps;
  rp.row_output = out.meta.sizes == shape;
  rp.compute = row.outputs[0]->meta.dtype;
  // The producers and their loads (the row op's input itself when nothing computes it).
  std::vector<bool> loaded(grp.inputs.size(), false);
  lower_nodes(grp, pre, shape, row.inputs[0], rp.pre, rp.pre, loaded);
  // The output pass is a loop of its own: it loads what the consumers read again, first (a
  // consumer may read the row op's input, which the op's output reads too).
  std::vector<bool> loaded_out(grp.inputs.size(), false);
  std::vector<kir::Stmt> consumers;
  lower_nodes(grp, post, shape, nullptr, rp.out, consumers, loaded_out);
  rp.out.insert(rp.out.end(), dec->out.begin(), dec->out.end());
  rp.out.insert(rp.out.end(), consumers.begin(), consumers.end());
  kir::Stmt st;
  st.kind = kir::Stmt::Kind::Store;
  st.dtype = out.meta.dtype;
  st.buffer = out_buffer;
  st.args = {var(&out)};
  st.index = rp.row_output ? k.contiguous_index() : with_columns_dropped(k);
  rp.out.push_back(st);
  for (const auto& [index, stat] : dec->stat_outputs)
    for (size_t e = 0; e < grp.extra_outputs.size(); ++e)
      if (grp.extra_outputs[e] == row.outputs[index])
        rp.stats.push_back({out_buffer + 1 + int(e), stat});
  k.rows = std::move(rp);
  return k;
}

kir::Index with_columns_dropped(const kir::Kernel& k) {
  kir::Index idx = 0, inner = 1;
  for (size_t d = k.domain.size() - 1; d-- > 0;) {
    idx = idx + kir::coord(int(d)) * inner;
    inner = inner * k.domain[d];
  }
  return idx;
}

}  // namespace ember::compiler
