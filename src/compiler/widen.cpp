// Widening 16-bit ops to float32 (widen.h): the graph copied node by node, the widened ones
// between casts.
#include "compiler/widen.h"

#include "compiler/decompositions.h"
#include "core/shape.h"

namespace ember::compiler {

namespace {

// Whether n computes in a 16-bit float dtype an op the compiler generates only for wider
// floats: its outputs and floating inputs all of that dtype.
// (Row statistics, like layer_norm's mean and rstd, may be float32 already.)
bool widens(const graph::Node& n) {
  if (n.op != OpId::matmul && !has_row_decomposition(n)) return false;
  const DType t = n.outputs[0]->meta.dtype;
  if (!is_16bit_float(t)) return false;
  for (const graph::Value* v : n.outputs)
    if ((v->meta.dtype != t && v->meta.dtype != DType::Float32) || v->device.type != DeviceType::CPU)
      return false;
  for (const graph::Value* v : n.inputs)
    if (v->meta.dtype != t || v->device.type != DeviceType::CPU) return false;
  return true;
}

TensorMeta as_dtype(TensorMeta m, DType t) {
  m.dtype = t;
  return m;
}

}  // namespace

std::shared_ptr<const graph::Graph> widen_16bit(std::shared_ptr<const graph::Graph> g) {
  bool any = false;
  for (const auto& n : g->nodes()) any |= widens(*n);
  if (!any) return g;
  auto w = std::make_shared<graph::Graph>();
  w->set_dynamic_sizes(g->dynamic_sizes());
  w->set_static_dims(g->static_dims());
  std::vector<graph::Value*> map(g->values().size(), nullptr);
  for (size_t i = 0; i < g->inputs().size(); ++i) {
    const graph::Value* v = g->inputs()[i];
    map[size_t(v->id)] = w->add_input(v->meta, v->device, g->input_kinds()[i], g->input_names()[i]);
  }
  auto cast = [&](graph::Value* v, DType t, graph::SourceLoc loc, bool no_grad) {
    Attrs a;
    a.dtype = t;
    TensorMeta m{v->meta.sizes, contiguous_strides(v->meta.sizes), 0, t};
    graph::Node* c = w->add_node(OpId::cast, {v}, a, {m}, loc);
    c->no_grad = no_grad;
    return c->outputs[0];
  };
  for (const auto& n : g->nodes()) {
    std::vector<graph::Value*> ins;
    for (const graph::Value* v : n->inputs) ins.push_back(map[size_t(v->id)]);
    const bool wide = widens(*n);
    std::vector<TensorMeta> metas;
    for (const graph::Value* v : n->outputs)
      metas.push_back(wide ? as_dtype(v->meta, DType::Float32) : v->meta);
    if (wide)
      for (graph::Value*& v : ins) v = cast(v, DType::Float32, n->loc, n->no_grad);
    graph::Node* c = w->add_node(n->op, std::move(ins), n->attrs, metas, n->loc);
    c->no_grad = n->no_grad;
    c->skipped_draws = n->skipped_draws;
    for (size_t j = 0; j < n->outputs.size(); ++j)
      map[size_t(n->outputs[j]->id)] =
          wide && n->outputs[j]->meta.dtype != DType::Float32
              ? cast(c->outputs[j], n->outputs[j]->meta.dtype, n->loc, n->no_grad)
              : c->outputs[j];
  }
  std::vector<graph::Value*> outs;
  for (const graph::Value* v : g->outputs()) outs.push_back(map[size_t(v->id)]);
  w->set_outputs(std::move(outs));
  for (const graph::Mutation& m : g->mutations())
    w->add_mutation(map[size_t(m.target->id)], map[size_t(m.value->id)]);
  return w;
}

}  // namespace ember::compiler
