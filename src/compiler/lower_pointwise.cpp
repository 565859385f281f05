// Lowering elementwise groups (lower.h): a load per input the nodes read, a statement per
// node, the store of the root. slice_backward becomes a load of its grad under the slice's
// conditions on the last coordinate.
#include <algorithm>
#include <cmath>

#include "compiler/codegen_util.h"
#include "compiler/lower.h"
#include "core/shape.h"
#include "graph/graph_util.h"

namespace ember::compiler {

kir::Stmt node_stmt(const graph::Node& node) {
  kir::Stmt s;
  s.out = var(node.outputs[0]);
  s.dtype = node.outputs[0]->meta.dtype;
  if (node.op == OpId::cast) {
    s.kind = kir::Stmt::Kind::Cast;
    s.args = {var(node.inputs[0])};
  } else {
    s.kind = kir::Stmt::Kind::Call;
    s.functor = fused_op_info(node)->functor;
    for (const graph::Value* v : node.inputs) s.args.push_back(var(v));
  }
  return s;
}

kir::Index broadcast_index(const graph::Value& v, const Shape& out) {
  const Shape& vs = v.meta.sizes;
  const size_t lead = out.size() - vs.size();
  kir::Index idx = 0;
  for (size_t d = lead; d < out.size(); ++d)
    if (out[d] > 1 && vs[d - lead] != 1 && v.meta.strides[d - lead] != 0)
      idx = idx + kir::coord(int(d)) * v.meta.strides[d - lead];
  return idx;
}

namespace {

// The grad's element for output column j of slice_backward `node`, or 0 outside the slice.
kir::Stmt slice_backward_load(const graph::Node& node, int buffer) {
  const graph::Value& g = *node.inputs[0];
  const Attrs& a = node.attrs;
  kir::Stmt s;
  s.kind = kir::Stmt::Kind::Load;
  s.out = var(node.outputs[0]);
  s.dtype = node.outputs[0]->meta.dtype;
  s.buffer = buffer;
  using Rel = sym::Rel;
  if (shape_numel(g.meta.sizes) == 0) {  // nothing sliced: zeros
    s.when = {Rel::make(0, Rel::Op::Ne, 0)};
    return s;
  }
  const int last = int(g.meta.sizes.size()) - 1;
  const kir::Index j = kir::coord(last);
  // g's rows are the output's rows; its column for j is (j - start) / step.
  kir::Index row = 0;
  for (int d = 0; d < last; ++d)
    if (g.meta.sizes[size_t(d)] > 1) row = row + kir::coord(d) * g.meta.strides[size_t(d)];
  s.index = row + floordiv(j - a.start, a.step) * g.meta.strides.back();
  s.when = {Rel::make(j, Rel::Op::Ge, a.start), Rel::make(j, Rel::Op::Lt, a.end)};
  if (a.step > 1) s.when.push_back(Rel::make(mod(j - a.start, a.step), Rel::Op::Eq, 0));
  return s;
}

}  // namespace

// Marks a load of `v` as an iota (kir::Stmt::iota) where v is an arange's output that the
// kernel can compute at each offset: contiguous, integral start and step, every value exact in
// its dtype (a float's mantissa holds it).
void mark_iota(kir::Stmt& s, const graph::Value& v) {
  const graph::Node* p = v.producer;
  if (!p || p->op != OpId::arange || v.meta.sizes.size() != 1 || v.meta.strides[0] != 1) return;
  const double start = p->attrs.value, step = p->attrs.value2;
  const double last = start + step * double(std::max<int64_t>(v.meta.sizes[0] - 1, 0));
  double exact = 0;  // the largest magnitude every integer below is exact at
  switch (v.meta.dtype) {
    case DType::Int64: exact = 0x1p62; break;
    case DType::Int32: exact = 0x1p31 - 1; break;
    case DType::Float64: exact = 0x1p53; break;
    case DType::Float32: exact = 0x1p24; break;
    case DType::Float16: exact = 0x1p11; break;
    case DType::BFloat16: exact = 0x1p8; break;
    default: return;
  }
  if (start != std::trunc(start) || step != std::trunc(step) ||
      std::max(std::fabs(start), std::fabs(last)) > exact)
    return;
  s.iota = true;
  s.iota_start = int64_t(start);
  s.iota_step = int64_t(step);
}

kir::Kernel kernel_of_group(const FusionGroup& grp, const Shape& domain,
                            const std::string& name) {
  kir::Kernel k;
  k.name = name;
  for (int64_t s : domain) k.domain.push_back(s);
  for (const graph::Node* node : grp.nodes) k.comment.push_back(node_str(*node));
  for (const graph::Value* v : grp.inputs)
    k.buffers.push_back({v->meta.dtype, shape_numel(v->meta.sizes), false,
                         var(v) + " " + value_type_str(*v)});
  const graph::Value& out = *grp.output;
  k.buffers.push_back({out.meta.dtype, shape_numel(out.meta.sizes), true, var(&out)});
  for (const graph::Value* v : grp.extra_outputs)
    k.buffers.push_back({v->meta.dtype, shape_numel(v->meta.sizes), true, var(v)});
  return k;
}

kir::Kernel lower_elementwise(const FusionGroup& grp, const std::string& name) {
  EMBER_CHECK(grp.elementwise(), "compiler: lower_elementwise of a group that is not elementwise");
  const graph::Value& out = *grp.output;
  const Shape& shape = out.meta.sizes;
  kir::Kernel k = kernel_of_group(grp, shape, name);
  k.epilogue = grp.gemm != nullptr;
  const int out_buffer = int(grp.inputs.size());
  auto buffer_of = [&](const graph::Value* v) {
    return int(std::find(grp.inputs.begin(), grp.inputs.end(), v) - grp.inputs.begin());
  };
  if (grp.gemm) {  // the product, already in the output
    kir::Stmt s;
    s.out = var(grp.gemm->outputs[0]);
    s.dtype = out.meta.dtype;
    s.buffer = out_buffer;
    s.index = k.contiguous_index();
    k.body.push_back(s);
  }
  // Inputs read element for element by some node (a slice_backward's grad is read at its own
  // columns, by its masked load).
  for (const graph::Value* v : grp.inputs) {
    bool direct = false;
    for (const graph::Node* node : grp.nodes)
      if (node->op == OpId::dropout_rng)  // its rng_state is read by the draw itself
        direct |= node->inputs[0] == v;
      else if (node->op != OpId::slice_backward)
        direct |= std::find(node->inputs.begin(), node->inputs.end(), v) != node->inputs.end();
    if (!direct) continue;
    kir::Stmt s;
    s.out = var(v);
    s.dtype = v->meta.dtype;
    s.buffer = buffer_of(v);
    s.index = shape_numel(v->meta.sizes) == 1 ? kir::Index(0) : broadcast_index(*v, shape);
    mark_iota(s, *v);
    k.body.push_back(s);
  }
  for (const graph::Node* node : grp.nodes) {
    if (node->op == OpId::slice_backward) {
      int b = buffer_of(node->inputs[0]);
      if (b == int(grp.inputs.size())) b = -1;  // a zero-size grad: never read
      // The grad is read at other columns than j: only a buffer, never a value computed here.
      EMBER_CHECK(b >= 0 || shape_numel(node->inputs[0]->meta.sizes) == 0,
                  "compiler: slice_backward's grad ", var(node->inputs[0]),
                  " is computed inside its kernel, which reads it at other columns");
      k.body.push_back(slice_backward_load(*node, b));
      continue;
    }
    if (node->op == OpId::dropout_rng) {  // a draw at the element's offset in the result
      kir::Stmt d;
      d.kind = kir::Stmt::Kind::Dropout;
      d.out = var(node->outputs[0]);
      d.dtype = node->outputs[0]->meta.dtype;
      d.args = {var(node->inputs[0])};
      d.buffer = buffer_of(node->inputs[1]);
      EMBER_CHECK(d.buffer < int(grp.inputs.size()), "compiler: dropout_rng's rng_state ",
                  var(node->inputs[1]), " is computed inside its kernel");
      d.index = k.contiguous_index();
      d.constant = node->attrs.value;
      k.body.push_back(d);
      continue;
    }
    k.body.push_back(node_stmt(*node));
  }
  kir::Stmt st;
  st.kind = kir::Stmt::Kind::Store;
  st.dtype = out.meta.dtype;
  st.buffer = out_buffer;
  st.index = k.contiguous_index();
  st.args = {var(&out)};
  k.body.push_back(st);
  return k;
}

}  // namespace ember::compiler
