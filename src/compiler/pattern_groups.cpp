// Pattern groups (pattern_groups.h): each matcher checks the exact form the grad formulas
// trace (ops, operand order, readers, shapes) and gives up, leaving the nodes to the greedy
// grouping, on anything else.
#include "compiler/pattern_groups.h"

#include <algorithm>
#include <initializer_list>
#include <unordered_map>


namespace ember::compiler {

namespace {

using Readers = std::vector<std::vector<const graph::Node*>>;
using Positions = std::unordered_map<const graph::Node*, size_t>;

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

// Whether the chain of single-reader permutes and clones ending in one view, from a 4-D src,
// moves the heads next to each other: the chain's result x[b, t, h * D + d] is src[b, h, t, d]
// (src [B, H, T, D]) or, with `transposed`, src[b, h, d, t] (src [B, H, D, T]). Views keep
// the logical (row-major) order of elements whatever the strides, and clones copy it, so the
// chain is followed on logical indices: permutes compose, and the view must merge the last two
// dims of a [B, T, H, D] order into one.
bool merges_heads(const std::vector<const graph::Node*>& chain, bool transposed) {
  if (chain.empty() || chain.back()->op != OpId::view) return false;
  std::vector<int64_t> order = {0, 1, 2, 3};  // the src dim at each position
  for (size_t i = 0; i + 1 < chain.size(); ++i) {
    const graph::Node& n = *chain[i];
    if (n.op == OpId::clone) continue;
    if (n.op != OpId::permute || n.attrs.dims.size() != 4) return false;
    std::vector<int64_t> next(4);
    for (size_t k = 0; k < 4; ++k) next[k] = order[size_t(n.attrs.dims[k])];
    order = next;
  }
  const Shape& in = chain.back()->inputs[0]->meta.sizes;
  const Shape& out = chain.back()->outputs[0]->meta.sizes;
  const std::vector<int64_t> want =
      transposed ? std::vector<int64_t>{0, 3, 1, 2} : std::vector<int64_t>{0, 2, 1, 3};
  return order == want && in.size() == 4 && out == Shape{in[0], in[1], in[2] * in[3]};
}

// Whether every reader of the results (first outputs of `results`, null ones skipped) outside
// `nodes` comes after the last of `nodes`: the group's kernel runs there.
bool read_after(const std::vector<const graph::Node*>& nodes,
                std::initializer_list<const graph::Node*> results, const Readers& readers,
                const Positions& pos) {
  size_t last = 0;
  for (const graph::Node* n : nodes) last = std::max(last, pos.at(n));
  for (const graph::Node* res : results) {
    if (!res) continue;
    for (const graph::Node* r : readers[size_t(res->outputs[0]->id)])
      if (pos.at(r) < last && std::find(nodes.begin(), nodes.end(), r) == nodes.end()) return false;
  }
  return true;
}

// The attention backward around a row sum s = sum(dp * p, last dim, keepdim) (FusionGroup::
// attn_bwd): fills `out` and returns the nodes it fuses, or nothing. `pos` gives each node's
// position in the graph.
std::vector<const graph::Node*> match_attention_backward(const graph::Node& s,
                                                         const std::vector<int>& uses,
                                                         const Readers& readers,
                                                         const Positions& pos,
                                                         FusionGroup::AttentionBackward* out) {
  auto only_reader = [&](const graph::Value* v) -> const graph::Node* {
    return uses[size_t(v->id)] == 1 && readers[size_t(v->id)].size() == 1
               ? readers[size_t(v->id)][0]
               : nullptr;
  };
  if (s.op != OpId::sum || s.inputs.size() != 1) return {};
  const graph::Value* x = s.inputs[0];
  const size_t nd = x->meta.sizes.size();
  if (!s.attrs.keepdim || nd < 2 || s.attrs.dims != Shape{int64_t(nd) - 1}) return {};
  const graph::Node* m1 = x->producer;
  if (!m1 || m1->op != OpId::mul || uses[size_t(x->id)] != 1) return {};
  // m1 = dp * p (either order), dp read by m1 and d = dp - s only: a matmul's product, or,
  // under attention dropout, that product times the dropout's scaled mask.
  const graph::Value* mask = nullptr;  // set by product_of when it finds one
  auto product_of = [&](const graph::Value* v) -> const graph::Node* {
    const graph::Node* n = v->producer;
    if (n && n->op == OpId::matmul) return n;
    if (!n || n->op != OpId::mul) return nullptr;
    const graph::Value* a = n->inputs[0];
    if (!a->producer || a->producer->op != OpId::matmul || uses[size_t(a->id)] != 1 ||
        n->inputs[1]->meta.sizes != v->meta.sizes)
      return nullptr;
    mask = n->inputs[1];
    return a->producer;
  };
  const graph::Node* dpm = product_of(m1->inputs[0]);
  const bool dp_first = dpm != nullptr;
  if (!dp_first) dpm = product_of(m1->inputs[1]);
  const graph::Value* dp = m1->inputs[dp_first ? 0 : 1];
  const graph::Value* p = m1->inputs[dp_first ? 1 : 0];
  if (!dpm || uses[size_t(dp->id)] != 2) return {};
  const graph::Node* d = only_reader(s.outputs[0]);
  if (!d || d->op != OpId::sub || d->inputs[0] != dp || d->inputs[1] != s.outputs[0]) return {};
  const graph::Node* m2 = only_reader(d->outputs[0]);
  if (!m2 || m2->op != OpId::mul ||
      !((m2->inputs[0] == p && m2->inputs[1] == d->outputs[0]) ||
        (m2->inputs[1] == p && m2->inputs[0] == d->outputs[0])))
    return {};
  std::vector<const graph::Node*> nodes = {dpm, m1, &s, d, m2};
  if (mask) nodes.push_back(dp->producer);
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
  const graph::Value* g = dpm->inputs[0];
  // dv = p^T @ g, or (p * m)^T @ g under dropout (the product p * m and its transpose taken in).
  const graph::Node* dv = nullptr;
  const graph::Node* pm = nullptr;
  for (const graph::Node* r : readers[size_t(g->id)]) {
    if (r->op != OpId::matmul || r->inputs[1] != g || !r->inputs[0]->producer) continue;
    const graph::Value* src =
        r->inputs[0]->producer->inputs.empty() ? nullptr : r->inputs[0]->producer->inputs[0];
    if (!src || !transpose_of(r->inputs[0], src)) continue;
    if (!mask && src == p) dv = r;
    const graph::Node* n = src->producer;
    if (mask && n && n->op == OpId::mul && n->inputs[0] == p && n->inputs[1] == mask &&
        only_reader(src) == r->inputs[0]->producer && only_reader(r->inputs[0]) == r) {
      dv = r;
      pm = n;
    }
  }
  if (!dq || !dkt || !dv) return {};
  if (mask) {
    const graph::Value& m = *mask;
    if (m.meta.dtype != DType::Float32 || m.device != kCPU || m.meta.sizes != p->meta.sizes ||
        m.meta.strides.back() != 1)
      return {};
    nodes.insert(nodes.end(), {pm, dv->inputs[0]->producer});
  }
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
    if (i == 2       ? (r != t || c != t || v.meta.strides[nd - 1] != 1)
        : rows_td[i] ? (r != t || c != dd)
                     : (r != dd || c != t))
      return {};
  }
  for (const graph::Node* m : {dq, dkt, dv})
    if (!contiguous(*m->outputs[0])) return {};
  nodes.insert(nodes.end(), {dv, dq, dkt});
  if (dst) nodes.push_back(dst);
  *out = {dpm, dv, dq, dkt, dk_transposed, p, mask, scale};
  // Without the head merge, the three results are the group's: their readers must follow it.
  const std::vector<const graph::Node*> unmerged =
      read_after(nodes, {dq, dkt, dv}, readers, pos) ? nodes : std::vector<const graph::Node*>{};
  // The head merge: each result through single-reader views and clones to a slice_backward
  // along the last dim, the three slices adding up to one value.
  const graph::Node* slices[3] = {nullptr, nullptr, nullptr};
  std::vector<const graph::Node*> chains;
  const graph::Node* results[3] = {dq, dkt, dv};
  for (int r = 0; r < 3; ++r) {
    std::vector<const graph::Node*> chain;
    const graph::Node* n = only_reader(results[r]->outputs[0]);
    while (n && (n->op == OpId::view || n->op == OpId::permute || n->op == OpId::clone)) {
      chain.push_back(n);
      n = only_reader(n->outputs[0]);
    }
    if (!n || n->op != OpId::slice_backward || n->attrs.step != 1 || n->attrs.dim != 2 ||
        !merges_heads(chain, r == 1 && dk_transposed))
      return unmerged;
    slices[r] = n;
    chains.insert(chains.end(), chain.begin(), chain.end());
  }
  // add(add(s1, s2), s3) in any order, over slices that tile the last dim.
  const graph::Node* a1 = nullptr;
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
      if (sum_of(outer, inner, slices[third])) {
        a1 = inner;
        a2 = outer;
      }
    }
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
  nodes.insert(nodes.end(), chains.begin(), chains.end());
  nodes.insert(nodes.end(), {slices[0], slices[1], slices[2], a1, a2});
  out->merged = a2->outputs[0];
  for (int r = 0; r < 3; ++r) out->merged_start[r] = slices[r]->attrs.start;
  return nodes;
}

// The layer_norm backward ending in dx = mul(rstd, centered) (FusionGroup::ln_bwd), as
// grad_layer_norm (ops/norm_ops.cpp) traces it with a weight:
//   xs = x - mean, xh = xs * rstd, gw = g * w,
//   centered = (gw - mean(gw)) - xh * mean(gw * xh), dx = rstd * centered,
// with dw = sum(g * xh) and db = sum(g) over the leading dims, and an add of dx to another
// grad, taken in when present.
std::vector<const graph::Node*> match_layer_norm_backward(const graph::Node& dx,
                                                          const std::vector<int>& uses,
                                                          const Readers& readers,
                                                          const Positions& pos,
                                                          FusionGroup::LayerNormBackward* out) {
  auto one_use = [&](const graph::Value* v) { return uses[size_t(v->id)] == 1; };
  auto made_by = [](const graph::Value* v, OpId op) -> const graph::Node* {
    return v->producer && v->producer->op == op ? v->producer : nullptr;
  };
  if (dx.op != OpId::mul || dx.inputs.size() != 2) return {};
  const graph::Value* rstd = dx.inputs[0];
  const graph::Node* t = made_by(dx.inputs[1], OpId::sub);
  if (!t || !one_use(t->outputs[0])) return {};
  const graph::Node* t1 = made_by(t->inputs[0], OpId::sub);
  const graph::Node* t2 = made_by(t->inputs[1], OpId::mul);
  if (!t1 || !t2 || !one_use(t1->outputs[0]) || !one_use(t2->outputs[0])) return {};
  const graph::Value* gw = t1->inputs[0];
  const graph::Node* m1 = made_by(t1->inputs[1], OpId::mean);
  const graph::Value* xh = t2->inputs[0];
  const graph::Node* m2 = made_by(t2->inputs[1], OpId::mean);
  if (!m1 || !m2 || !one_use(m1->outputs[0]) || !one_use(m2->outputs[0]) || m1->inputs[0] != gw)
    return {};
  const graph::Node* a = made_by(m2->inputs[0], OpId::mul);
  if (!a || !one_use(a->outputs[0]) || a->inputs[0] != gw || a->inputs[1] != xh) return {};
  const graph::Node* gwn = made_by(gw, OpId::mul);
  const graph::Node* xhn = made_by(xh, OpId::mul);
  if (!gwn || !xhn || uses[size_t(gw->id)] != 3 || xhn->inputs[1] != rstd) return {};
  const graph::Node* xs = made_by(xhn->inputs[0], OpId::sub);
  if (!xs || !one_use(xs->outputs[0])) return {};
  const graph::Value* x = xs->inputs[0];
  const graph::Value* mean = xs->inputs[1];
  const graph::Value* g = gwn->inputs[0];
  const graph::Value* w = gwn->inputs[1];
  // Shapes: x, g [.., C] contiguous; mean, rstd [.., 1]; w [C]; one float dtype.
  const Shape& xsz = x->meta.sizes;
  const size_t nd = xsz.size();
  // The kernel keeps a block of column sums on the stack: up to 8192 columns.
  if (nd < 2 || g->meta.sizes != xsz || dx.outputs[0]->meta.sizes != xsz || xsz.back() > 8192)
    return {};
  const DType dt = x->meta.dtype;
  if (dt != DType::Float32 && dt != DType::Float64) return {};
  Shape stat = xsz;
  stat.back() = 1;
  for (const graph::Value* v : {x, mean, rstd, g, w})
    if (v->meta.dtype != dt || v->device != kCPU || !contiguous(*v)) return {};
  if (mean->meta.sizes != stat || rstd->meta.sizes != stat || w->meta.sizes != Shape{xsz.back()})
    return {};
  const Shape last{int64_t(nd) - 1};
  for (const graph::Node* m : {m1, m2})
    if (m->attrs.dims != last || !m->attrs.keepdim) return {};
  std::vector<const graph::Node*> nodes = {xs, xhn, gwn, a, m2, t2, m1, t1, t, &dx};
  // The weight and bias grads: sums over the leading dims of g * xh and of g.
  auto lead_sum = [&](const graph::Value* v) -> const graph::Node* {
    for (const graph::Node* r : readers[size_t(v->id)])
      if (r->op == OpId::sum && can_fuse_columns(*r) && r->inputs[0] == v) return r;
    return nullptr;
  };
  const graph::Node* dw = nullptr;
  size_t xh_readers = 2;
  for (const graph::Node* r : readers[size_t(xh->id)]) {
    if (r == a || r == t2) continue;
    if (r->op == OpId::mul && r->inputs[0] == g && r->inputs[1] == xh && one_use(r->outputs[0]))
      dw = lead_sum(r->outputs[0]);
    if (dw) {
      nodes.insert(nodes.end(), {r, dw});
      ++xh_readers;
      break;
    }
  }
  if (uses[size_t(xh->id)] != int(xh_readers)) return {};
  const graph::Node* db = lead_sum(g);
  if (db) nodes.push_back(db);
  // dx added to another grad of its shape: the kernel writes the sum.
  const graph::Node* add = nullptr;
  if (one_use(dx.outputs[0]) && readers[size_t(dx.outputs[0]->id)].size() == 1) {
    const graph::Node* r = readers[size_t(dx.outputs[0]->id)][0];
    const graph::Value* other = r->inputs[0] == dx.outputs[0] ? r->inputs[1] : r->inputs[0];
    if (r->op == OpId::add && other != dx.outputs[0] && other->meta.sizes == xsz &&
        other->meta.dtype == dt && other->device == kCPU && contiguous(*other) &&
        contiguous(*r->outputs[0]))
      add = r;
  }
  if (add) nodes.push_back(add);
  if (!contiguous(*(add ? add : &dx)->outputs[0])) return {};
  if (!read_after(nodes, {add ? add : &dx, dw, db}, readers, pos)) return {};
  const graph::Value* r = add ? add->inputs[add->inputs[0] == dx.outputs[0] ? 1 : 0] : nullptr;
  *out = {&dx, add, dw, db, x, mean, rstd, g, w, r};
  return nodes;
}

}  // namespace

void plan_pattern_groups(const graph::Graph& g, const std::vector<int>& uses,
                         const Readers& readers, std::vector<char>& taken,
                         std::vector<FusionGroup>& groups) {
  const auto& nodes = g.nodes();
  Positions pos;
  for (size_t i = 0; i < nodes.size(); ++i) pos[nodes[i].get()] = i;
  auto claim = [&](std::vector<const graph::Node*> fused) {
    bool free = !fused.empty();
    for (const graph::Node* n : fused) free = free && !taken[pos.at(n)];
    if (!free) return false;
    for (const graph::Node* n : fused) taken[pos.at(n)] = 1;
    groups.emplace_back();
    groups.back().nodes = std::move(fused);
    return true;
  };
  for (size_t i = 0; i < nodes.size(); ++i) {
    FusionGroup::AttentionBackward ab;
    if (claim(match_attention_backward(*nodes[i], uses, readers, pos, &ab)))
      groups.back().attn_bwd = ab;
    FusionGroup::LayerNormBackward lb;
    if (claim(match_layer_norm_backward(*nodes[i], uses, readers, pos, &lb)))
      groups.back().ln_bwd = lb;
  }
}

void finish_pattern_group(FusionGroup& grp, const std::vector<int>& index_of) {
  std::vector<const graph::Value*> res;
  if (grp.attn_bwd) {
    const FusionGroup::AttentionBackward& ab = *grp.attn_bwd;
    grp.inputs = {ab.dp->inputs[0], ab.dp->inputs[1], ab.p, ab.dq->inputs[1],
                  ab.dk->inputs[ab.dk_transposed ? 0 : 1]};
    if (ab.mask) grp.inputs.push_back(ab.mask);
    if (ab.merged)
      res = {ab.merged};
    else
      res = {ab.dq->outputs[0], ab.dk->outputs[0], ab.dv->outputs[0]};
  } else if (grp.ln_bwd) {
    const FusionGroup::LayerNormBackward& lb = *grp.ln_bwd;
    grp.inputs = {lb.x, lb.mean, lb.rstd, lb.g, lb.w};
    if (lb.r) grp.inputs.push_back(lb.r);
    res = {(lb.add ? lb.add : lb.dx)->outputs[0]};
    if (lb.dw) res.push_back(lb.dw->outputs[0]);
    if (lb.db) res.push_back(lb.db->outputs[0]);
  } else {
    return;
  }
  std::sort(res.begin(), res.end(), [&](const graph::Value* a, const graph::Value* b) {
    return index_of[size_t(a->id)] < index_of[size_t(b->id)];
  });
  grp.output = res.back();
  grp.extra_outputs.assign(res.begin(), res.end() - 1);
}

}  // namespace ember::compiler
