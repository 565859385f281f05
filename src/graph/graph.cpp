// Graph building, validation and structural identity (hash and equality).
#include "graph/graph.h"

#include <cstring>

#include "core/shape.h"
#include "graph/graph_util.h"

namespace ember::graph {

namespace {

uint64_t double_bits(double d) {
  uint64_t u;
  std::memcpy(&u, &d, 8);
  return u;
}

inline void mix(size_t& h, uint64_t v) { h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2); }

void mix_shape(size_t& h, const Shape& s) {
  mix(h, s.size());
  for (int64_t v : s) mix(h, uint64_t(v));
}

// A tensor with the value's metadata and no storage, for running shape rules.
Tensor symbolic_tensor(const Value& v) {
  auto impl = std::make_shared<TensorImpl>();
  impl->sizes = v.meta.sizes;
  impl->strides = v.meta.strides;
  impl->offset = v.meta.offset;
  impl->dtype = v.meta.dtype;
  impl->device = v.device;
  impl->is_view = v.producer && op_info(v.producer->op).kind == OpKind::View;
  return Tensor(std::move(impl));
}

bool same_meta(const TensorMeta& a, const TensorMeta& b) {
  return a.sizes == b.sizes && a.strides == b.strides && a.offset == b.offset &&
         a.dtype == b.dtype;
}

// Positions of values in definition order (inputs first, then node outputs in node order):
// what wiring is compared by, so that value ids do not matter.
std::vector<int> canonical_positions(const Graph& g) {
  std::vector<int> pos(g.values().size(), -1);
  int next = 0;
  for (const Value* v : g.inputs()) pos[size_t(v->id)] = next++;
  for (const auto& n : g.nodes())
    for (const Value* v : n->outputs) pos[size_t(v->id)] = next++;
  return pos;
}

}  // namespace

std::string SourceLoc::str() const {
  if (!file || line == 0) return "<unknown>";
  return std::string(file) + ":" + std::to_string(line);
}

bool same_attrs(OpId op, const Attrs& a, const Attrs& b) {
  if (double_bits(a.value) != double_bits(b.value) ||
      double_bits(a.value2) != double_bits(b.value2))
    return false;
  Attrs x = a, y = b;
  x.value = y.value = x.value2 = y.value2 = 0;
  if (is_random(op)) x.seed = y.seed = x.offset = y.offset = 0;
  return x == y;
}

size_t attrs_hash(OpId op, const Attrs& a) {
  if (!is_random(op)) return a.hash();
  Attrs x = a;
  x.seed = x.offset = 0;
  return x.hash();
}

// ---- building ----

Value* Graph::new_value(const TensorMeta& meta, Device device) {
  auto v = std::make_unique<Value>();
  v->id = int(values_.size());
  v->meta = meta;
  // Shape rules leave strides empty for fresh (contiguous) outputs; storing them filled in
  // gives every value one spelling of its layout, which views of it and hashing rely on.
  if (v->meta.strides.empty()) v->meta.strides = contiguous_strides(v->meta.sizes);
  v->device = device;
  values_.push_back(std::move(v));
  return values_.back().get();
}

Value* Graph::add_input(const TensorMeta& meta, Device device, InputKind kind, std::string name) {
  Value* v = new_value(meta, device);
  v->input_index = int(inputs_.size());
  inputs_.push_back(v);
  input_kinds_.push_back(kind);
  input_names_.push_back(std::move(name));
  invalidate_plan();
  return v;
}

Node* Graph::add_node(OpId op, std::vector<Value*> inputs, const Attrs& attrs,
                      const std::vector<TensorMeta>& output_meta, SourceLoc loc) {
  const OpInfo& info = op_info(op);
  EMBER_CHECK(info.num_inputs < 0 || size_t(info.num_inputs) == inputs.size(),
              "graph add_node: ", info.name, " takes ", int(info.num_inputs),
              " tensor inputs, got ", inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Value* v = inputs[i];
    EMBER_CHECK(v && v->id >= 0 && size_t(v->id) < values_.size() &&
                    values_[size_t(v->id)].get() == v,
                "graph add_node: input ", i, " of ", info.name,
                " is not a value of this graph");
  }
  MetaList metas = output_meta;
  if (metas.empty()) {
    std::vector<Tensor> sym;
    sym.reserve(inputs.size());
    for (const Value* v : inputs) sym.push_back(symbolic_tensor(*v));
    metas = op_impl(op).infer(sym, attrs);
  }
  EMBER_CHECK(metas.size() == size_t(info.num_outputs), "graph add_node: ", info.name, " has ",
              int(info.num_outputs), " outputs, but ", metas.size(),
              " output metadata were given");
  auto node = std::make_unique<Node>();
  node->id = int(nodes_.size());
  node->op = op;
  node->attrs = attrs;
  node->loc = loc;
  Device device = inputs.empty() ? attrs.device : inputs[0]->device;
  node->inputs = std::move(inputs);
  for (size_t j = 0; j < metas.size(); ++j) {
    Value* out = new_value(metas[j], device);
    out->producer = node.get();
    out->output_index = int(j);
    node->outputs.push_back(out);
  }
  nodes_.push_back(std::move(node));
  invalidate_plan();
  return nodes_.back().get();
}

void Graph::set_outputs(std::vector<Value*> outputs) {
  outputs_ = std::move(outputs);
  invalidate_plan();
}

void Graph::add_mutation(Value* target, Value* value) {
  mutations_.push_back({target, value});
  invalidate_plan();
}

void Graph::renumber() {
  for (size_t i = 0; i < values_.size(); ++i) values_[i]->id = int(i);
  for (size_t i = 0; i < nodes_.size(); ++i) nodes_[i]->id = int(i);
  invalidate_plan();
}

// ---- validation ----

void Graph::validate() const {
  auto owned = [&](const Value* v) {
    return v && v->id >= 0 && size_t(v->id) < values_.size() && values_[size_t(v->id)].get() == v;
  };
  std::vector<char> defined(values_.size(), 0);
  for (size_t i = 0; i < inputs_.size(); ++i) {
    const Value* v = inputs_[i];
    EMBER_CHECK(owned(v), "graph: input ", i, " is not a value of this graph");
    EMBER_CHECK(!v->producer && v->input_index == int(i), "graph: input ", i, " (%", v->id,
                ") is also produced by a node or listed at another position");
    EMBER_CHECK(!defined[size_t(v->id)], "graph: %", v->id, " is listed twice as an input");
    defined[size_t(v->id)] = 1;
  }
  for (const auto& np : nodes_) {
    const Node& n = *np;
    const OpInfo& info = op_info(n.op);
    auto fail = [&](const auto&... why) {
      EMBER_FAIL("graph: malformed node `", node_str(n), "`: ", why...);
    };
    if (info.num_inputs >= 0 && size_t(info.num_inputs) != n.inputs.size())
      fail(info.name, " takes ", int(info.num_inputs), " inputs, the node has ", n.inputs.size());
    if (size_t(info.num_outputs) != n.outputs.size())
      fail(info.name, " has ", int(info.num_outputs), " outputs, the node has ",
           n.outputs.size());
    for (size_t i = 0; i < n.inputs.size(); ++i) {
      const Value* v = n.inputs[i];
      if (!owned(v)) fail("input ", i, " is not a value of this graph");
      if (!defined[size_t(v->id)])
        fail("input ", i, " (%", v->id, ") is used before it is defined");
    }
    for (size_t j = 0; j < n.outputs.size(); ++j) {
      const Value* v = n.outputs[j];
      if (!owned(v)) fail("output ", j, " is not a value of this graph");
      if (defined[size_t(v->id)]) fail("output ", j, " (%", v->id, ") is already defined");
      if (v->producer != &n || v->output_index != int(j))
        fail("output ", j, " (%", v->id, ") names another producer");
      defined[size_t(v->id)] = 1;
    }
  }
  for (size_t i = 0; i < outputs_.size(); ++i) {
    const Value* v = outputs_[i];
    EMBER_CHECK(owned(v), "graph: output ", i, " is not a value of this graph");
    EMBER_CHECK(defined[size_t(v->id)], "graph: output ", i, " (%", v->id,
                ") is never defined");
  }
  for (const Mutation& m : mutations_) {
    EMBER_CHECK(owned(m.target) && owned(m.value),
                "graph: a mutation names a value that is not in this graph");
    EMBER_CHECK(!m.target->producer && m.target->input_index >= 0,
                "graph: `mutate %", m.target->id, " <- %", m.value->id, "`: the target %",
                m.target->id, " is not a graph input; only inputs can be written back");
    EMBER_CHECK(defined[size_t(m.value->id)], "graph: `mutate %", m.target->id, " <- %",
                m.value->id, "`: %", m.value->id, " is never defined");
    // As for eager in-place ops: the new contents have the target's shape and dtype.
    EMBER_CHECK(m.value->meta.sizes == m.target->meta.sizes &&
                    m.value->meta.dtype == m.target->meta.dtype,
                "graph: `mutate %", m.target->id, " <- %", m.value->id, "`: the new contents (",
                value_type_str(*m.value), ") do not match the target (",
                value_type_str(*m.target), ")");
  }
}

// ---- structural identity ----

size_t Graph::structural_hash() const {
  std::vector<int> pos = canonical_positions(*this);
  size_t h = 0;
  auto mix_value = [&](const Value* v) {
    mix_shape(h, v->meta.sizes);
    mix_shape(h, v->meta.strides);
    mix(h, uint64_t(v->meta.offset));
    mix(h, uint64_t(v->meta.dtype) | uint64_t(v->device.type) << 8 |
               uint64_t(uint32_t(v->device.index)) << 16);
  };
  mix(h, inputs_.size());
  for (size_t i = 0; i < inputs_.size(); ++i) {
    mix(h, uint64_t(input_kinds_[i]));
    mix_value(inputs_[i]);
  }
  mix(h, nodes_.size());
  for (const auto& n : nodes_) {
    mix(h, uint64_t(n->op) | uint64_t(n->no_grad) << 16);
    mix(h, attrs_hash(n->op, n->attrs));
    mix(h, n->skipped_draws);
    mix(h, n->inputs.size());
    for (const Value* v : n->inputs) mix(h, uint64_t(pos[size_t(v->id)]));
    for (const Value* v : n->outputs) mix_value(v);
  }
  mix(h, outputs_.size());
  for (const Value* v : outputs_) mix(h, uint64_t(pos[size_t(v->id)]));
  mix(h, mutations_.size());
  for (const Mutation& m : mutations_) {
    mix(h, uint64_t(pos[size_t(m.target->id)]));
    mix(h, uint64_t(pos[size_t(m.value->id)]));
  }
  mix(h, trailing_skipped_draws_);
  return h;
}

bool Graph::structurally_equal(const Graph& other) const {
  const Graph& o = other;
  if (inputs_.size() != o.inputs_.size() || nodes_.size() != o.nodes_.size() ||
      outputs_.size() != o.outputs_.size() || mutations_.size() != o.mutations_.size() ||
      trailing_skipped_draws_ != o.trailing_skipped_draws_ || input_kinds_ != o.input_kinds_)
    return false;
  std::vector<int> pa = canonical_positions(*this), pb = canonical_positions(o);
  auto same_value = [](const Value* a, const Value* b) {
    return same_meta(a->meta, b->meta) && a->device == b->device;
  };
  auto same_wire = [&](const Value* a, const Value* b) {
    return pa[size_t(a->id)] == pb[size_t(b->id)];
  };
  for (size_t i = 0; i < inputs_.size(); ++i)
    if (!same_value(inputs_[i], o.inputs_[i])) return false;
  for (size_t k = 0; k < nodes_.size(); ++k) {
    const Node& a = *nodes_[k];
    const Node& b = *o.nodes_[k];
    if (a.op != b.op || a.no_grad != b.no_grad || a.skipped_draws != b.skipped_draws ||
        a.inputs.size() != b.inputs.size() || a.outputs.size() != b.outputs.size() ||
        !same_attrs(a.op, a.attrs, b.attrs))
      return false;
    for (size_t i = 0; i < a.inputs.size(); ++i)
      if (!same_wire(a.inputs[i], b.inputs[i])) return false;
    for (size_t j = 0; j < a.outputs.size(); ++j)
      if (!same_value(a.outputs[j], b.outputs[j])) return false;
  }
  for (size_t i = 0; i < outputs_.size(); ++i)
    if (!same_wire(outputs_[i], o.outputs_[i])) return false;
  for (size_t i = 0; i < mutations_.size(); ++i)
    if (!same_wire(mutations_[i].target, o.mutations_[i].target) ||
        !same_wire(mutations_[i].value, o.mutations_[i].value))
      return false;
  return true;
}

}  // namespace ember::graph
