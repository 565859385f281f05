// Fusion planning (see pointwise_fusion.h): pointwise trees, row, gemm and attention groups.
#include "compiler/pointwise_fusion.h"

#include <algorithm>
#include <cmath>
#include <unordered_map>

#include "compiler/decompositions.h"
#include "core/shape.h"
#include "graph/graph_util.h"

namespace ember::compiler {

namespace {

// Every op here computes in its output dtype from inputs of that same dtype, so generated
// code has one element type per group.
const FusedOpInfo* table_entry(OpId op) {
  static const FusedOpInfo add{"Add", 2}, sub{"Sub", 2}, mul{"Mul", 2}, div{"Div", 2},
      neg{"Neg", 1}, clone{"Identity", 1}, exp{"Exp", 1}, log{"Log", 1}, sqrt{"Sqrt", 1},
      rsqrt{"Rsqrt", 1}, pow{"Pow", 2}, abs{"Abs", 1}, sign{"Sign", 1}, maximum{"Maximum", 2},
      minimum{"Minimum", 2}, tanh{"Tanh", 1}, sigmoid{"Sigmoid", 1}, relu{"Relu", 1},
      silu{"Silu", 1};
  switch (op) {
    case OpId::add: return &add;
    case OpId::sub: return &sub;
    case OpId::mul: return &mul;
    case OpId::div: return &div;
    case OpId::neg: return &neg;
    case OpId::clone: return &clone;
    case OpId::exp: return &exp;
    case OpId::log: return &log;
    case OpId::sqrt: return &sqrt;
    case OpId::rsqrt: return &rsqrt;
    case OpId::pow: return &pow;
    case OpId::abs: return &abs;
    case OpId::sign: return &sign;
    case OpId::maximum: return &maximum;
    case OpId::minimum: return &minimum;
    case OpId::tanh: return &tanh;
    case OpId::sigmoid: return &sigmoid;
    case OpId::relu: return &relu;
    case OpId::silu: return &silu;
    default: return nullptr;
  }
}

bool supported_dtype(DType t) {
  return t == DType::Float32 || t == DType::Float64 || t == DType::Int32 || t == DType::Int64;
}

// Whether n can be one step of a generated loop over its output's elements.
// slice_backward along the last dim: zeros but for the incoming grad's columns, which a
// fused kernel computes per column (a select), so a sum of such grads (the backward of a split)
// becomes one pass instead of zero-filled buffers, copies and adds.
bool fusable_slice_backward(const graph::Node& n) {
  if (n.op != OpId::slice_backward) return false;
  const graph::Value& g = *n.inputs[0];
  const graph::Value& out = *n.outputs[0];
  const Shape& os = out.meta.sizes;
  if (os.empty() || n.attrs.dim != int64_t(os.size()) - 1 || n.attrs.step < 1) return false;
  if (!supported_dtype(out.meta.dtype) || out.device != kCPU || g.device != kCPU) return false;
  if (g.meta.dtype != out.meta.dtype || g.meta.sizes.size() != os.size()) return false;
  for (size_t d = 0; d + 1 < os.size(); ++d)
    if (g.meta.sizes[d] != os[d]) return false;
  return out.meta.offset == 0 && out.meta.strides == contiguous_strides(os);
}

bool can_fuse(const graph::Node& n) {
  if (fusable_slice_backward(n)) return true;
  const OpInfo& info = op_info(n.op);
  if (info.kind != OpKind::Pointwise || !info.has(kFusable)) return false;
  if (!fused_op_info(n) || n.outputs.size() != 1) return false;
  const graph::Value& out = *n.outputs[0];
  if (!supported_dtype(out.meta.dtype) || out.device != kCPU) return false;
  if (out.meta.offset != 0 || out.meta.strides != contiguous_strides(out.meta.sizes)) return false;
  for (const graph::Value* v : n.inputs) {
    if (v->meta.dtype != out.meta.dtype || v->device != kCPU) return false;
    // Inputs broadcast to the output: right-aligned, each dim equal or 1.
    if (v->meta.sizes.size() > out.meta.sizes.size()) return false;
    const size_t lead = out.meta.sizes.size() - v->meta.sizes.size();
    for (size_t d = 0; d < v->meta.sizes.size(); ++d)
      if (v->meta.sizes[d] != 1 && v->meta.sizes[d] != out.meta.sizes[lead + d]) return false;
  }
  return true;
}

bool has_slice_backward(const FusionGroup& grp) {
  for (const graph::Node* n : grp.nodes)
    if (n->op == OpId::slice_backward) return true;
  return false;
}

bool contiguous(const graph::Value& v) {
  return v.meta.offset == 0 && v.meta.strides == contiguous_strides(v.meta.sizes);
}

// Whether n is a matmul the compiler runs as a gemm accumulating onto its consumer's other
// terms: float32/float64 matrices on the CPU with a contiguous result.
bool can_accumulate_gemm(const graph::Node& n) {
  if (n.op != OpId::matmul) return false;
  const graph::Value& out = *n.outputs[0];
  const DType t = out.meta.dtype;
  if ((t != DType::Float32 && t != DType::Float64) || out.device != kCPU || !contiguous(out))
    return false;
  for (const graph::Value* v : n.inputs)
    if (v->meta.dtype != t || v->device != kCPU || v->meta.sizes.size() < 2) return false;
  return shape_numel(out.meta.sizes) > 0;
}

// Whether n's result is "input a + something": add with either operand, sub with a on the left.
bool adds_operand(const graph::Node& n, size_t a) {
  return n.op == OpId::add || (n.op == OpId::sub && a == 0);
}

// Whether n is a matmul of same-dtype float matrices whose batch dims equal its output's (no
// broadcasting), the form an attention kernel reads through strides.
bool attention_matmul(const graph::Node* n) {
  if (!n || n->op != OpId::matmul) return false;
  const graph::Value& out = *n->outputs[0];
  const DType t = out.meta.dtype;
  if ((t != DType::Float32 && t != DType::Float64) || out.device != kCPU) return false;
  const size_t nd = out.meta.sizes.size();
  if (nd < 2) return false;
  for (const graph::Value* v : n->inputs) {
    if (v->meta.dtype != t || v->device != kCPU || v->meta.sizes.size() != nd) return false;
    for (size_t d = 0; d + 2 < nd; ++d)
      if (v->meta.sizes[d] != out.meta.sizes[d]) return false;
  }
  return shape_numel(out.meta.sizes) > 0;
}

// Turns a softmax row group into an attention group when its neighbours allow (see
// FusionGroup::attn_qk); `uses` counts the readers of each value (graph outputs count 2), and
// `is_output` marks the graph's outputs.
void try_attention(FusionGroup& grp, const std::vector<int>& uses,
                   const std::vector<std::vector<const graph::Node*>>& readers,
                   const std::vector<char>& is_output) {
  const graph::Node& row = *grp.row;
  if (row.op != OpId::softmax || !grp.extra_outputs.empty() || grp.output != row.outputs[0])
    return;
  const graph::Value* p = row.outputs[0];
  // The probabilities feed softmax @ v only, or also leave the graph once (a training forward
  // saves them for the backward): then the kernel writes them out as well.
  const bool probs_out = is_output[size_t(p->id)] && uses[size_t(p->id)] == 3;
  if ((uses[size_t(p->id)] != 1 && !probs_out) || readers[size_t(p->id)].size() != 1) return;
  const graph::Node* pv = readers[size_t(p->id)][0];
  if (!attention_matmul(pv) || pv->inputs[0] != p || pv->inputs[1] == p) return;
  if (!contiguous(*pv->outputs[0])) return;
  // The scores: a matmul product read by exactly one node of the group.
  const graph::Node* qk = nullptr;
  for (const graph::Value* v : grp.inputs) {
    if (attention_matmul(v->producer) && uses[size_t(v->id)] == 1 &&
        v->meta.sizes == p->meta.sizes) {
      qk = v->producer;
      break;
    }
  }
  if (!qk) return;
  grp.attn_qk = qk;
  grp.attn_pv = pv;
  grp.output = pv->outputs[0];
  if (probs_out) grp.extra_outputs.push_back(p);
  grp.inputs.erase(std::find(grp.inputs.begin(), grp.inputs.end(), qk->outputs[0]));
  // The result permuted and copied contiguous, with the last dim staying last: written in place.
  const graph::Value* y = pv->outputs[0];
  if (uses[size_t(y->id)] == 1 && readers[size_t(y->id)].size() == 1) {
    const graph::Node* perm = readers[size_t(y->id)][0];
    const graph::Value* yp = perm->outputs[0];
    const size_t nd = y->meta.sizes.size();
    if (perm->op == OpId::permute && perm->attrs.dims.size() == nd &&
        perm->attrs.dims.back() == int64_t(nd) - 1 && uses[size_t(yp->id)] == 1 &&
        readers[size_t(yp->id)].size() == 1) {
      const graph::Node* copy = readers[size_t(yp->id)][0];
      if (copy->op == OpId::clone && contiguous(*copy->outputs[0]) &&
          copy->outputs[0]->meta.dtype == y->meta.dtype) {
        grp.out_permute = perm;
        grp.out_copy = copy;
        grp.output = copy->outputs[0];
      }
    }
  }
  // A causal mask: the row input is add(x, triu(full(-inf), diag)) with the mask [.., L, S].
  const graph::Node* add = row.inputs[0]->producer;
  if (!add || add->op != OpId::add) return;
  for (const graph::Value* m : add->inputs) {
    const graph::Node* tri = m->producer;
    if (!tri || tri->op != OpId::triu || !tri->inputs[0]->producer) continue;
    const graph::Node* fill = tri->inputs[0]->producer;
    if (fill->op != OpId::full || !(std::isinf(fill->attrs.value) && fill->attrs.value < 0))
      continue;
    const Shape& ms = m->meta.sizes;
    const Shape& ps = p->meta.sizes;
    if (ms.size() < 2 || ms[ms.size() - 1] != ps.back() || ms[ms.size() - 2] != ps[ps.size() - 2])
      continue;
    if (shape_numel(ms) != ms[ms.size() - 1] * ms[ms.size() - 2]) continue;
    grp.causal = true;
    grp.causal_diag = tri->attrs.start;
  }
}

// Whether v = permute(of) swapping of's last two dims.
bool transpose_of(const graph::Value* v, const graph::Value* of) {
  const graph::Node* n = v->producer;
  if (!n || n->op != OpId::permute || n->inputs[0] != of) return false;
  const Shape& d = n->attrs.dims;
  const size_t nd = d.size();
  if (nd < 2 || d[nd - 2] != int64_t(nd) - 1 || d[nd - 1] != int64_t(nd) - 2) return false;
  for (size_t k = 0; k + 2 < nd; ++k)
    if (d[k] != int64_t(k)) return false;
  return true;
}

// Where the view and clone nodes between `src` and `x` put src's elements: whether x[b, t, c]
// is src's element (b, h, t, d) with c = h * D + d, for src [B, H, T, D] contiguous, or, with
// `transposed`, src [B, H, D, T] holding element (b, h, t, d) at (b, h, d, t). Checked
// element by element by walking each of x's positions back through the buffers it views.
bool merges_heads(const graph::Value* src, const graph::Value* x, bool transposed) {
  const Shape& s = src->meta.sizes;
  const Shape& xs = x->meta.sizes;
  if (s.size() != 4 || xs.size() != 3) return false;
  const int64_t B = s[0], H = s[1], T = transposed ? s[3] : s[2], D = transposed ? s[2] : s[3];
  if (xs[0] != B || xs[1] != T || xs[2] != H * D) return false;
  std::vector<int64_t> idx(3);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t c = 0; c < H * D; ++c) {
        // The position in the buffer x views, then up through each clone to the buffer its
        // input views, until src's own buffer.
        const graph::Value* v = x;
        int64_t p = v->meta.offset + b * v->meta.strides[0] + t * v->meta.strides[1] +
                    c * v->meta.strides[2];
        for (;;) {
          const graph::Value* root = graph::view_root(v);
          if (root == src) break;
          const graph::Node* n = root->producer;
          if (!n || n->op != OpId::clone) return false;
          v = n->inputs[0];
          int64_t q = v->meta.offset, rest = p;
          for (size_t k = v->meta.sizes.size(); k-- > 0;) {
            q += rest % v->meta.sizes[k] * v->meta.strides[k];
            rest /= v->meta.sizes[k];
          }
          p = q;
        }
        const int64_t h = c / D, d = c % D;
        const int64_t want = transposed ? ((b * H + h) * D + d) * T + t : ((b * H + h) * T + t) * D + d;
        if (p != want) return false;
      }
  return true;
}

// The attention backward around a row sum s = sum(dp * p, last dim, keepdim) (FusionGroup::
// attn_bwd): fills `out` and returns the nodes it fuses, or nothing. `pos` gives each node's
// position in the graph.
std::vector<const graph::Node*> match_attention_backward(
    const graph::Node& s, const std::vector<int>& uses,
    const std::vector<std::vector<const graph::Node*>>& readers,
    const std::unordered_map<const graph::Node*, size_t>& pos,
    FusionGroup::AttentionBackward* out) {
  auto only_reader = [&](const graph::Value* v) -> const graph::Node* {
    return uses[size_t(v->id)] == 1 && readers[size_t(v->id)].size() == 1 ? readers[size_t(v->id)][0]
                                                                        : nullptr;
  };
  if (s.op != OpId::sum || s.inputs.size() != 1) return {};
  const graph::Value* x = s.inputs[0];
  const size_t nd = x->meta.sizes.size();
  if (!s.attrs.keepdim || nd < 2 || s.attrs.dims != Shape{int64_t(nd) - 1})
    return {};
  const graph::Node* m1 = x->producer;
  if (!m1 || m1->op != OpId::mul || uses[size_t(x->id)] != 1) return {};
  // m1 = dp * p (either order), dp a matmul's product read by m1 and d = dp - s only.
  const bool dp_first = m1->inputs[0]->producer && m1->inputs[0]->producer->op == OpId::matmul;
  const graph::Value* dp = m1->inputs[dp_first ? 0 : 1];
  const graph::Value* p = m1->inputs[dp_first ? 1 : 0];
  if (!dp->producer || dp->producer->op != OpId::matmul || uses[size_t(dp->id)] != 2) return {};
  const graph::Node* d = only_reader(s.outputs[0]);
  if (!d || d->op != OpId::sub || d->inputs[0] != dp || d->inputs[1] != s.outputs[0]) return {};
  const graph::Node* m2 = only_reader(d->outputs[0]);
  if (!m2 || m2->op != OpId::mul ||
      !((m2->inputs[0] == p && m2->inputs[1] == d->outputs[0]) ||
        (m2->inputs[1] == p && m2->inputs[0] == d->outputs[0])))
    return {};
  std::vector<const graph::Node*> nodes = {dp->producer, m1, &s, d, m2};
  // An optional scale: ds = m2 * c, c a scalar constant.
  const graph::Value* ds = m2->outputs[0];
  double scale = 1;
  if (const graph::Node* m3 = only_reader(ds); m3 && m3->op == OpId::mul) {
    const graph::Value* c = m3->inputs[m3->inputs[0] == ds ? 1 : 0];
    if (!c->meta.sizes.empty() || !c->producer || c->producer->op != OpId::full) return {};
    scale = c->producer->attrs.value;
    ds = m3->outputs[0];
    nodes.push_back(m3);
  }
  if (uses[size_t(ds->id)] != 2 || readers[size_t(ds->id)].size() != 2) return {};
  // dq = ds @ k, and dk^T = q^T @ ds or dk = ds^T @ q.
  const graph::Node* dq = nullptr;
  const graph::Node* dkt = nullptr;
  const graph::Node* dst = nullptr;  // the permute making ds^T, in the second form
  for (const graph::Node* r : readers[size_t(ds->id)]) {
    if (r->op == OpId::matmul && r->inputs[0] == ds && r->inputs[1] != ds) dq = r;
    if (r->op == OpId::matmul && r->inputs[1] == ds && r->inputs[0] != ds) dkt = r;
    if (transpose_of(r->outputs[0], ds)) {
      const graph::Node* m = only_reader(r->outputs[0]);
      if (m && m->op == OpId::matmul && m->inputs[0] == r->outputs[0] && m->inputs[1] != ds) {
        dst = r;
        dkt = m;
      }
    }
  }
  const bool dk_transposed = !dst;
  const graph::Node* dpm = dp->producer;
  const graph::Value* g = dpm->inputs[0];
  const graph::Node* dv = nullptr;
  for (const graph::Node* r : readers[size_t(g->id)])
    if (r->op == OpId::matmul && r->inputs[1] == g && transpose_of(r->inputs[0], p)) dv = r;
  if (!dq || !dkt || !dv) return {};
  // Shapes: p [.., T, T], g and k [.., T, D], v^T and q^T [.., D, T], one batch, float32.
  const Shape& ps = p->meta.sizes;
  const int64_t t = ps[nd - 1], dd = g->meta.sizes.back();
  if (ps[nd - 2] != t || t % 16 || dd % 16 || t > 512 || dd > 256) return {};
  const graph::Value* ins[] = {g, dpm->inputs[1], p, dq->inputs[1],
                               dkt->inputs[dk_transposed ? 0 : 1]};
  const Shape batch(ps.begin(), ps.end() - 2);
  const bool rows_td[] = {true, false, true, true, !dk_transposed};
  for (size_t i = 0; i < 5; ++i) {
    const graph::Value& v = *ins[i];
    if (v.meta.dtype != DType::Float32 || v.device != kCPU || v.meta.sizes.size() != nd ||
        !std::equal(batch.begin(), batch.end(), v.meta.sizes.begin()))
      return {};
    const int64_t r = v.meta.sizes[nd - 2], c = v.meta.sizes[nd - 1];
    if (i == 2 ? (r != t || c != t || v.meta.strides[nd - 1] != 1)
               : rows_td[i] ? (r != t || c != dd) : (r != dd || c != t))
      return {};
  }
  for (const graph::Node* m : {dq, dkt, dv})
    if (!contiguous(*m->outputs[0])) return {};
  nodes.insert(nodes.end(), {dv, dq, dkt});
  if (dst) nodes.push_back(dst);
  // The kernel runs at the last of its nodes: the results' readers must all come after it.
  size_t last = 0;
  for (const graph::Node* n : nodes) last = std::max(last, pos.at(n));
  bool readers_after = true;
  for (const graph::Node* m : {dq, dkt, dv})
    for (const graph::Node* r : readers[size_t(m->outputs[0]->id)])
      readers_after = readers_after && pos.at(r) > last;
  *out = {dpm, dv, dq, dkt, dk_transposed, scale};
  // The head merge: each result through single-reader views and clones to a slice_backward
  // along the last dim, the three slices adding up to one value.
  const graph::Node* slices[3] = {nullptr, nullptr, nullptr};
  std::vector<const graph::Node*> chain;
  const graph::Node* results[3] = {dq, dkt, dv};
  for (int r = 0; r < 3; ++r) {
    const graph::Value* v = results[r]->outputs[0];
    const graph::Node* n = only_reader(v);
    while (n && (n->op == OpId::view || n->op == OpId::permute || n->op == OpId::clone)) {
      chain.push_back(n);
      v = n->outputs[0];
      n = only_reader(v);
    }
    if (!n || n->op != OpId::slice_backward || n->attrs.step != 1 || n->attrs.dim != 2 ||
        !merges_heads(results[r]->outputs[0], v, r == 1 && dk_transposed))
      return readers_after ? nodes : std::vector<const graph::Node*>{};
    slices[r] = n;
  }
  // add(add(s1, s2), s3) in any order, over slices that tile the last dim.
  const graph::Node* a1 = only_reader(slices[0]->outputs[0]);
  const graph::Node* a2 = nullptr;
  auto sum_of = [&](const graph::Node* a, const graph::Node* x, const graph::Node* y) {
    return a && a->op == OpId::add &&
           ((a->inputs[0] == x->outputs[0] && a->inputs[1] == y->outputs[0]) ||
            (a->inputs[1] == x->outputs[0] && a->inputs[0] == y->outputs[0]));
  };
  for (int first = 0; first < 3 && !a2; ++first)
    for (int second = 0; second < 3 && !a2; ++second) {
      if (first == second) continue;
      const int third = 3 - first - second;
      const graph::Node* inner = only_reader(slices[first]->outputs[0]);
      if (!sum_of(inner, slices[first], slices[second])) continue;
      const graph::Node* outer = only_reader(inner->outputs[0]);
      if (outer && outer->op == OpId::add &&
          ((outer->inputs[0] == inner->outputs[0] && outer->inputs[1] == slices[third]->outputs[0]) ||
           (outer->inputs[1] == inner->outputs[0] && outer->inputs[0] == slices[third]->outputs[0]))) {
        a1 = inner;
        a2 = outer;
      }
    }
  const std::vector<const graph::Node*> unmerged =
      readers_after ? nodes : std::vector<const graph::Node*>{};
  if (!a2 || !contiguous(*a2->outputs[0])) return unmerged;
  const int64_t width = a2->outputs[0]->meta.sizes.back();
  std::vector<std::pair<int64_t, int64_t>> spans;
  for (const graph::Node* sl : slices) {
    if (sl->outputs[0]->meta.sizes != a2->outputs[0]->meta.sizes) return unmerged;
    spans.push_back({sl->attrs.start, sl->attrs.end});
  }
  std::sort(spans.begin(), spans.end());
  if (spans[0].first != 0 || spans[0].second != spans[1].first ||
      spans[1].second != spans[2].first || spans[2].second != width)
    return unmerged;
  nodes.insert(nodes.end(), chain.begin(), chain.end());
  nodes.insert(nodes.end(), {slices[0], slices[1], slices[2], a1, a2});
  out->merged = a2->outputs[0];
  for (int r = 0; r < 3; ++r) out->merged_start[r] = slices[r]->attrs.start;
  return nodes;
}

}  // namespace

bool can_fuse_row(const graph::Node& n) {
  if (!row_decomposition(n)) return false;  // the table says which ops are row ops
  const graph::Value& x = *n.inputs[0];
  const graph::Value& out = *n.outputs[0];
  const DType t = out.meta.dtype;
  const Shape& s = x.meta.sizes;
  // x itself may be strided: generated code reads it through index arithmetic.
  if ((t != DType::Float32 && t != DType::Float64) || x.meta.dtype != t) return false;
  if (x.device != kCPU || out.device != kCPU || s.empty() || shape_numel(s) == 0) return false;
  if (!contiguous(out)) return false;
  const int64_t last = int64_t(s.size()) - 1;
  if (n.op == OpId::sum || n.op == OpId::mean)  // one value per row
    return n.attrs.dims == std::vector<int64_t>{last};
  if (out.meta.sizes != s) return false;
  if (n.op != OpId::layer_norm) return n.attrs.dim == last;  // softmax, log_softmax
  if (n.attrs.shape.size() != 1 || n.attrs.shape[0] != s.back()) return false;
  for (size_t k = 1; k < n.inputs.size(); ++k) {
    const graph::Value& p = *n.inputs[k];
    if (p.meta.dtype != t || p.device != kCPU || p.meta.sizes != Shape{s.back()} || !contiguous(p))
      return false;
  }
  for (size_t k = 1; k < n.outputs.size(); ++k)
    if (n.outputs[k]->meta.dtype != t || !contiguous(*n.outputs[k])) return false;
  return true;
}

const FusedOpInfo* fused_op_info(const graph::Node& n) {
  if (n.op == OpId::gelu) {
    static const FusedOpInfo exact{"Gelu", 1}, approx{"GeluTanh", 1};
    return n.attrs.flag ? &approx : &exact;
  }
  if (n.op == OpId::slice_backward) {  // generated as a select, not a functor call
    static const FusedOpInfo select{"", 1};
    return &select;
  }
  if (n.op == OpId::gelu_backward) {  // (grad, x)
    static const FusedOpInfo exact{"GeluBackward", 2}, approx{"GeluTanhBackward", 2};
    return n.attrs.flag ? &approx : &exact;
  }
  return table_entry(n.op);
}

bool can_fuse_columns(const graph::Node& n) {
  if (n.op != OpId::sum && n.op != OpId::mean) return false;
  const graph::Value& x = *n.inputs[0];
  const graph::Value& out = *n.outputs[0];
  const DType t = out.meta.dtype;
  if ((t != DType::Float32 && t != DType::Float64) || x.meta.dtype != t) return false;
  if (x.device != kCPU || out.device != kCPU || !contiguous(x) || !contiguous(out)) return false;
  const int64_t nd = int64_t(x.meta.sizes.size());
  if (nd < 2 || shape_numel(x.meta.sizes) == 0) return false;
  std::vector<int64_t> lead(size_t(nd - 1));
  for (int64_t d = 0; d < nd - 1; ++d) lead[size_t(d)] = d;
  return n.attrs.dims == lead;
}

FusionPlan plan_fusion(const graph::Graph& g) {
  const auto& nodes = g.nodes();
  std::vector<int> uses(g.values().size(), 0);
  for (const auto& n : nodes)
    for (const graph::Value* v : n->inputs) ++uses[size_t(v->id)];
  // Results the graph hands out or writes back must exist as buffers.
  for (const graph::Value* v : g.outputs()) uses[size_t(v->id)] += 2;
  for (const graph::Mutation& m : g.mutations()) uses[size_t(m.value->id)] += 2;

  FusionPlan plan;
  plan.group_of_node.assign(nodes.size(), -1);
  std::vector<int> group_of_value(g.values().size(), -1);
  std::vector<std::vector<const graph::Node*>> readers(g.values().size());
  for (const auto& n : nodes)
    for (const graph::Value* v : n->inputs) readers[size_t(v->id)].push_back(n.get());

  // Attention backward groups first: their nodes are taken out of the greedy grouping below.
  std::unordered_map<const graph::Node*, size_t> pos;
  for (size_t i = 0; i < nodes.size(); ++i) pos[nodes[i].get()] = i;
  std::vector<char> taken(nodes.size(), 0);
  for (size_t i = 0; i < nodes.size(); ++i) {
    FusionGroup::AttentionBackward ab;
    std::vector<const graph::Node*> fused =
        match_attention_backward(*nodes[i], uses, readers, pos, &ab);
    bool free = !fused.empty();
    for (const graph::Node* n : fused) free = free && !taken[pos.at(n)];
    if (!free) continue;
    for (const graph::Node* n : fused) taken[pos.at(n)] = 1;
    FusionGroup group;
    group.nodes = std::move(fused);
    group.attn_bwd = ab;
    plan.groups.push_back(std::move(group));
  }

  for (size_t i = 0; i < nodes.size(); ++i) {
    const graph::Node& n = *nodes[i];
    if (taken[i]) continue;
    if (can_fuse_columns(n)) {  // a kernel of its own: producers stay materialized
      FusionGroup group;
      group.col = &n;
      group.nodes.push_back(&n);
      group.output = n.outputs[0];
      plan.groups.push_back(std::move(group));
      continue;
    }
    const bool row = can_fuse_row(n);
    if (!row && !can_fuse(n)) continue;
    FusionGroup group;
    if (row) {
      group.row = &n;
      for (size_t k = 1; k < n.outputs.size(); ++k)
        if (uses[size_t(n.outputs[k]->id)] > 0) group.extra_outputs.push_back(n.outputs[k]);
    }
    // Absorb each producer group whose root feeds only this node and matches its shape (a row
    // op only the producer of its row input). One row op per group; a row group whose
    // statistics are read elsewhere stays the root of its kernel.
    const size_t absorbable = row ? 1 : n.inputs.size();
    for (size_t a = 0; a < absorbable; ++a) {
      const graph::Value* v = n.inputs[a];
      // A row op absorbs producers of its input's shape (a reduction's output is smaller).
      const Shape& full = row ? n.inputs[0]->meta.sizes : n.outputs[0]->meta.sizes;
      const bool same_shape = v->meta.sizes == full;
      // A matmul product added here: the group becomes a gemm group around it.
      if (!row && !group.gemm && v->producer && same_shape && uses[size_t(v->id)] == 1 &&
          adds_operand(n, a) && can_accumulate_gemm(*v->producer)) {
        group.gemm = v->producer;
        continue;
      }
      const int src = group_of_value[size_t(v->id)];
      // A row group is absorbed by consumers over whole rows: its row op's input shape (a row
      // reduction's one value per row is broadcast back along the row).
      const bool row_consumer =
          src >= 0 && plan.groups[size_t(src)].row &&
          n.outputs[0]->meta.sizes == plan.groups[size_t(src)].row->inputs[0]->meta.sizes;
      if (src >= 0 && uses[size_t(v->id)] == 1 &&
          (plan.groups[size_t(src)].row ? row_consumer : same_shape)) {
        FusionGroup& other = plan.groups[size_t(src)];
        if (other.row && (group.row || !other.extra_outputs.empty())) continue;
        // Row and attention kernels load inputs element for element: no slice_backward there.
        const bool rows = row || group.row || other.row;
        if (rows && (has_slice_backward(other) || has_slice_backward(group) ||
                     n.op == OpId::slice_backward))
          continue;
        // A gemm group's sum stays "product + rest" only through further adds.
        if (other.gemm && (row || group.gemm || !adds_operand(n, a))) continue;
        if (other.gemm) group.gemm = other.gemm;
        if (other.row) group.row = other.row;
        group.nodes.insert(group.nodes.end(), other.nodes.begin(), other.nodes.end());
        other.nodes.clear();  // emptied: dropped below
        group_of_value[size_t(v->id)] = -1;
      }
    }
    group.nodes.push_back(&n);
    group.output = n.outputs[0];
    group_of_value[size_t(n.outputs[0]->id)] = int(plan.groups.size());
    plan.groups.push_back(std::move(group));
  }

  // Drop the absorbed groups, order nodes by graph position, and collect external inputs.
  std::vector<int> index_of(g.values().size(), -1);  // node position by output value id
  for (size_t i = 0; i < nodes.size(); ++i)
    for (const graph::Value* v : nodes[i]->outputs) index_of[size_t(v->id)] = int(i);
  std::vector<FusionGroup> kept;
  for (FusionGroup& grp : plan.groups) {
    if (grp.nodes.empty()) continue;
    std::sort(grp.nodes.begin(), grp.nodes.end(), [&](const graph::Node* a, const graph::Node* b) {
      return index_of[size_t(a->outputs[0]->id)] < index_of[size_t(b->outputs[0]->id)];
    });
    std::vector<const graph::Value*> inside;
    for (const graph::Node* n : grp.nodes)
      inside.insert(inside.end(), n->outputs.begin(), n->outputs.end());
    if (grp.gemm) inside.push_back(grp.gemm->outputs[0]);  // the product is not read as input
    for (const graph::Node* n : grp.nodes)
      for (const graph::Value* v : n->inputs)
        if (std::find(inside.begin(), inside.end(), v) == inside.end() &&
            std::find(grp.inputs.begin(), grp.inputs.end(), v) == grp.inputs.end())
          grp.inputs.push_back(v);
    for (const graph::Node* n : grp.nodes)
      plan.group_of_node[size_t(index_of[size_t(n->outputs[0]->id)])] = int(kept.size());
    if (grp.attn_bwd) {  // fixed arguments; the results in graph order, the last one the root
      const FusionGroup::AttentionBackward& ab = *grp.attn_bwd;
      grp.inputs = {ab.dp->inputs[0], ab.dp->inputs[1], ab.dv->inputs[0]->producer->inputs[0],
                    ab.dq->inputs[1], ab.dk->inputs[ab.dk_transposed ? 0 : 1]};
      std::vector<const graph::Value*> res = {ab.dq->outputs[0], ab.dk->outputs[0],
                                              ab.dv->outputs[0]};
      std::sort(res.begin(), res.end(), [&](const graph::Value* a, const graph::Value* b) {
        return index_of[size_t(a->id)] < index_of[size_t(b->id)];
      });
      grp.output = res.back();
      grp.extra_outputs = {res[0], res[1]};
      if (ab.merged) {
        grp.output = ab.merged;
        grp.extra_outputs.clear();
      }
    }
    if (grp.gemm)
      plan.group_of_node[size_t(index_of[size_t(grp.gemm->outputs[0]->id)])] = int(kept.size());
    kept.push_back(std::move(grp));
  }
  plan.groups = std::move(kept);

  std::vector<char> is_output(g.values().size(), 0);
  for (const graph::Value* v : g.outputs()) is_output[size_t(v->id)] = 1;
  for (size_t k = 0; k < plan.groups.size(); ++k) {
    FusionGroup& grp = plan.groups[k];
    if (!grp.row) continue;
    try_attention(grp, uses, readers, is_output);
    if (!grp.attn_qk) continue;
    for (const graph::Node* mm : {grp.attn_qk, grp.attn_pv, grp.out_permute, grp.out_copy})
      if (mm) plan.group_of_node[size_t(index_of[size_t(mm->outputs[0]->id)])] = int(k);
  }
  return plan;
}

}  // namespace ember::compiler
