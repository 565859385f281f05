// Finding the casts to batch, the layer_norm_backward neighbours and the bias adds to fold
// (cuda_folds.h).
#include "compiler/cuda_folds.h"

#include <algorithm>
#include <optional>
#include <unordered_map>

#include "core/shape.h"
#include "graph/graph_util.h"
#include "kernels/gemm_bias.h"

namespace ember::compiler {

namespace {

// grp's one node when it is a lone `op` node (no row, gemm or column part, one output).
const graph::Node* lone(const FusionGroup& grp, OpId op) {
  if (grp.nodes.size() != 1 || grp.row || grp.gemm || grp.col || !grp.extra_outputs.empty() ||
      grp.nodes[0]->op != op)
    return nullptr;
  return grp.nodes[0];
}

// Who reads each value of a graph: its nodes, and `kept` for the values handed out or written
// back (they are read after the graph).
struct Readers {
  std::unordered_map<const graph::Node*, int> index;
  std::vector<std::vector<const graph::Node*>> of;
  std::vector<char> kept;
  explicit Readers(const graph::Graph& g) : of(g.values().size()), kept(g.values().size(), 0) {
    const auto& nodes = g.nodes();
    for (size_t i = 0; i < nodes.size(); ++i) index[nodes[i].get()] = int(i);
    for (const auto& n : nodes)
      for (const graph::Value* v : n->inputs) of[size_t(v->id)].push_back(n.get());
    for (const graph::Value* v : g.outputs()) kept[size_t(v->id)] = 1;
    for (const graph::Mutation& m : g.mutations()) kept[size_t(m.value->id)] = 1;
  }
  // v's one reader, when it has one and is not kept.
  const graph::Node* sole(const graph::Value* v) const {
    const auto& r = of[size_t(v->id)];
    return !kept[size_t(v->id)] && r.size() == 1 ? r[0] : nullptr;
  }
  // Whether v exists before node i runs (a graph input, or made by an earlier node).
  bool before(const graph::Value* v, int i) const {
    return !v->producer || index.at(v->producer) < i;
  }
};

}  // namespace

const graph::Value* parameter_cast(const FusionGroup& grp) {
  const graph::Node* n = lone(grp, OpId::cast);
  if (!n || grp.inputs.size() != 1) return nullptr;
  const graph::Value& in = *grp.inputs[0];
  const graph::Value* root = graph::view_root(&in);
  if (root->producer || root->meta.sizes != in.meta.sizes ||
      root->meta.strides != in.meta.strides || root->meta.offset != in.meta.offset)
    return nullptr;
  const bool ok = in.meta.dtype == DType::Float32 && is_16bit_float(n->outputs[0]->meta.dtype) &&
                  contiguous(in) && contiguous(*n->outputs[0]) && shape_numel(in.meta.sizes) > 0;
  return ok ? root : nullptr;
}

bool grad_cast(const FusionGroup& grp, const graph::Graph& g,
               std::vector<const graph::Node*>* views) {
  const graph::Node* n = lone(grp, OpId::cast);
  if (!n || grp.inputs.size() != 1) return false;
  const graph::Value& in = *grp.inputs[0];
  if (n->outputs[0]->meta.dtype != DType::Float32 || !is_16bit_float(in.meta.dtype) ||
      !contiguous(in) || !contiguous(*n->outputs[0]) || shape_numel(in.meta.sizes) == 0)
    return false;
  // The values from the cast's result through views: each read by views alone, and at least
  // one handed out; none written back.
  std::vector<const graph::Value*> reached = {n->outputs[0]};
  std::vector<const graph::Node*> found;
  bool handed_out = false;
  for (size_t i = 0; i < reached.size(); ++i) {
    const graph::Value* v = reached[i];
    handed_out |= std::find(g.outputs().begin(), g.outputs().end(), v) != g.outputs().end();
    for (const graph::Mutation& m : g.mutations())
      if (m.value == v || m.target == v) return false;
    for (const auto& other : g.nodes()) {
      if (std::find(other->inputs.begin(), other->inputs.end(), v) == other->inputs.end()) continue;
      if (op_info(other->op).kind != OpKind::View || other->inputs.size() != 1) return false;
      found.push_back(other.get());
      reached.insert(reached.end(), other->outputs.begin(), other->outputs.end());
    }
  }
  if (!handed_out) return false;
  views->insert(views->end(), found.begin(), found.end());
  return true;
}

std::vector<LayerNormFold> layer_norm_folds(const graph::Graph& g, const FusionPlan& plan) {
  const auto& nodes = g.nodes();
  const Readers readers(g);
  auto group_of = [&](const graph::Node* n) {
    return plan.group_of_node[size_t(readers.index.at(n))];
  };
  std::vector<LayerNormFold> folds;
  for (size_t i = 0; i < nodes.size(); ++i) {
    const graph::Node& n = *nodes[i];
    if (n.op != OpId::layer_norm_backward || plan.group_of_node[i] >= 0 || n.inputs.size() != 5)
      continue;
    const graph::Value *dy = n.inputs[0], *x = n.inputs[1], *dx = n.outputs[0];
    if (x->meta.dtype != DType::Float32 || dy->meta.dtype != DType::Float32) continue;
    LayerNormFold f;
    f.node = int(i);
    f.grad = dy;
    if (dy->producer && readers.sole(dy) == &n) {
      const int k = group_of(dy->producer);
      if (k >= 0 && lone(plan.groups[size_t(k)], OpId::cast) &&
          plan.groups[size_t(k)].inputs.size() == 1 &&
          is_16bit_float(plan.groups[size_t(k)].inputs[0]->meta.dtype) &&
          contiguous(*plan.groups[size_t(k)].inputs[0])) {
        f.cast_group = k;
        f.grad = plan.groups[size_t(k)].inputs[0];
      }
    }
    if (const graph::Node* r = readers.sole(dx)) {
      const int k = group_of(r);
      if (k >= 0 && lone(plan.groups[size_t(k)], OpId::add) && r->inputs.size() == 2 &&
          r->inputs[0] != r->inputs[1]) {
        const graph::Value* other = r->inputs[r->inputs[0] == dx ? 1 : 0];
        // The residual must exist when the node runs: the sum is computed then.
        if (readers.before(other, int(i)) && other->meta.dtype == DType::Float32 &&
            other->meta.sizes == dx->meta.sizes && contiguous(*other) &&
            r->outputs[0]->meta.dtype == DType::Float32) {
          f.add_group = k;
          f.residual = other;
          f.sum = r->outputs[0];
        }
      }
    }
    if (f.cast_group >= 0 || f.add_group >= 0) folds.push_back(f);
  }
  return folds;
}

std::vector<BiasFold> bias_folds(const graph::Graph& g, const FusionPlan& plan,
                                 const std::vector<int>& at_start) {
  const auto& nodes = g.nodes();
  const Readers readers(g);
  // A layer_norm before a product the gemv kernel takes joins it: no launch of its own, and
  // its result never goes through memory. Sets f's ln_node and ln_x where it does.
  auto layer_norm_in = [&](BiasFold* f) {
    const graph::Node& n = *nodes[size_t(f->node)];
    const graph::Value* p = n.outputs[0];
    const DType t = p->meta.dtype;
    const graph::Value* a = n.inputs[0];
    const graph::Node* l = a->producer;
    if (!l || l->op != OpId::layer_norm || l->inputs.size() != 3 || l->outputs.size() != 3 ||
        l->outputs[0] != a || readers.sole(a) != &n ||
        plan.group_of_node[size_t(readers.index.at(l))] >= 0)
      return false;
    const int64_t K = a->meta.sizes.empty() ? 0 : a->meta.sizes.back();
    const int64_t rows = K > 0 ? shape_numel(a->meta.sizes) / K : 0;
    const graph::Value *x = l->inputs[0], *w = l->inputs[1], *b = l->inputs[2];
    auto unread = [&](const graph::Value* v) {
      return readers.of[size_t(v->id)].empty() && !readers.kept[size_t(v->id)];
    };
    auto vector_of_k = [&](const graph::Value* v) {
      return v->meta.dtype == t && v->meta.sizes == Shape{K} && contiguous(*v);
    };
    if (!(l->attrs.shape == Shape{K} && K > 512 && K <= 4096 && x->meta.dtype == t &&
          a->meta.dtype == t && contiguous(*x) && vector_of_k(w) && vector_of_k(b) &&
          unread(l->outputs[1]) && unread(l->outputs[2]) &&
          gemm_bias::rounds_product_first(rows, K, p->meta.sizes.back(),
                                          n.inputs[1]->meta.strides)))
      return false;
    f->ln_node = readers.index.at(l);
    f->ln_x = x;
    return true;
  };
  std::vector<BiasFold> folds;
  std::vector<char> folded(nodes.size(), 0);
  for (size_t i = 0; i < nodes.size(); ++i) {
    const graph::Node& n = *nodes[i];
    if (n.op != OpId::matmul || plan.group_of_node[i] >= 0 || n.inputs.size() != 2) continue;
    const graph::Value* p = n.outputs[0];
    const DType t = p->meta.dtype;
    if (!is_16bit_float(t) || n.inputs[1]->meta.sizes.size() != 2 || p->meta.sizes.empty())
      continue;
    const graph::Node* r = readers.sole(p);
    if (!r) continue;
    const int k = plan.group_of_node[size_t(readers.index.at(r))];
    if (k < 0 || r->op != OpId::add || r->inputs.size() != 2 || r->inputs[0] == r->inputs[1])
      continue;
    // The group: the bias add alone, or the bias add then a second add of a residual to it, or
    // then the gelu of the biased product.
    const FusionGroup& grp = plan.groups[size_t(k)];
    const graph::Node* second = nullptr;
    bool gelu = false;
    if (!lone(grp, OpId::add)) {
      if (grp.nodes.size() != 2 || grp.row || grp.gemm || grp.col || !grp.extra_outputs.empty() ||
          grp.nodes[0] != r || (grp.nodes[1]->op != OpId::add && grp.nodes[1]->op != OpId::gelu))
        continue;
      second = grp.nodes[1];
      // Whether the gemm rounds the product before its epilogue as the matmul op stores it (a
      // few rows: gemm_bias::rounds_product_first), so that its sums are the fused group's.
      const int64_t cols = p->meta.sizes.back(), k_dim = n.inputs[0]->meta.sizes.back();
      const bool rounds = gemm_bias::rounds_product_first(
          shape_numel(p->meta.sizes) / std::max<int64_t>(cols, 1), k_dim, cols,
          n.inputs[1]->meta.strides);
      if (second->op == OpId::gelu) {
        // The exact gelu (not the tanh form) of the biased product, which nothing else reads:
        // only the few-rows gemm takes it (cuBLASLt's gelu epilogue is the tanh form).
        if (!rounds || second->attrs.flag || second->inputs.size() != 1 ||
            second->inputs[0] != r->outputs[0] || readers.sole(r->outputs[0]) != second)
          continue;
        gelu = true;
      } else {
        // Recorded without grad (inference), only where the gemm rounds the product first, so
        // a compiled decode step keeps its logits and greedy decoding its tokens. A graph
        // autograd differentiates agrees with eager to rounding either way.
        if (second->no_grad && !rounds) continue;
        const auto& in = second->inputs;
        if (in.size() != 2 || in[0] == in[1] ||
            (in[0] != r->outputs[0] && in[1] != r->outputs[0]))
          continue;
      }
    }
    const graph::Value* bias = r->inputs[r->inputs[0] == p ? 1 : 0];
    const graph::Value* residual =
        second && !gelu ? second->inputs[second->inputs[0] == r->outputs[0] ? 1 : 0] : nullptr;
    const graph::Value* sum = (second ? second : r)->outputs[0];
    // The bias and the residual must exist when the matmul runs: the sum is computed then.
    auto ready = [&](const graph::Value* v) {
      return readers.before(v, int(i)) ||
             std::find(at_start.begin(), at_start.end(),
                       plan.group_of_node[size_t(readers.index.at(v->producer))]) != at_start.end();
    };
    if (bias->meta.dtype != t || bias->meta.sizes != Shape{p->meta.sizes.back()} ||
        !contiguous(*bias) || !ready(bias) || sum->meta.dtype != t ||
        sum->meta.sizes != p->meta.sizes || !contiguous(*sum))
      continue;
    if (residual && (residual->meta.dtype != t || residual->meta.sizes != p->meta.sizes ||
                     !contiguous(*residual) || !ready(residual)))
      continue;
    BiasFold f{int(i), k, bias, sum, residual, gelu};
    layer_norm_in(&f);
    folds.push_back(f);
    folded[i] = 1;
  }
  // A product without a bias (a GPT's logits after ln_f) is a fold only to take its layer_norm.
  for (size_t i = 0; i < nodes.size(); ++i) {
    const graph::Node& n = *nodes[i];
    if (folded[i] || n.op != OpId::matmul || plan.group_of_node[i] >= 0 || n.inputs.size() != 2)
      continue;
    const graph::Value* p = n.outputs[0];
    if (!is_16bit_float(p->meta.dtype) || n.inputs[1]->meta.sizes.size() != 2 ||
        p->meta.sizes.empty() || !contiguous(*p))
      continue;
    BiasFold f;
    f.node = int(i);
    f.sum = p;
    if (layer_norm_in(&f)) folds.push_back(f);
  }
  return folds;
}

std::vector<CrossEntropyGradFold> cross_entropy_grad_folds(const FusionPlan& plan) {
  std::vector<CrossEntropyGradFold> folds;
  for (size_t k = 0; k < plan.groups.size(); ++k) {
    const FusionGroup& grp = plan.groups[k];
    if (grp.row || grp.gemm || grp.col || !grp.extra_outputs.empty() || grp.nodes.size() != 8)
      continue;
    // The node of the group that makes v (null for the group's inputs), when it is an `op`.
    auto made = [&](const graph::Value* v, OpId op) -> const graph::Node* {
      for (const graph::Node* n : grp.nodes)
        if (n->outputs[0] == v) return n->op == op ? n : nullptr;
      return nullptr;
    };
    auto input = [&](const graph::Value* v) {
      return std::find(grp.inputs.begin(), grp.inputs.end(), v) != grp.inputs.end();
    };
    auto per_row = [](const graph::Value* v, int64_t rows, DType t) {
      return v->meta.dtype == t && v->meta.sizes == Shape{rows, 1};
    };
    const graph::Value* o = grp.output;
    const graph::Node* out_cast = made(o, OpId::cast);
    if (!out_cast || !is_16bit_float(o->meta.dtype) || o->meta.sizes.size() != 2 || !contiguous(*o))
      continue;
    const int64_t rows = o->meta.sizes[0], classes = o->meta.sizes[1];
    const graph::Node* mul = made(out_cast->inputs[0], OpId::mul);
    if (!mul) continue;
    const size_t d_at = made(mul->inputs[0], OpId::sub) ? 0 : 1;
    const graph::Node* diff = made(mul->inputs[d_at], OpId::sub);
    const graph::Value* scale = mul->inputs[1 - d_at];
    if (!diff || !input(scale) || !per_row(scale, rows, DType::Float32)) continue;
    const graph::Node* ex = made(diff->inputs[0], OpId::exp);
    const graph::Node* hot = made(diff->inputs[1], OpId::cast);
    if (!ex || !hot || hot->outputs[0]->meta.dtype != DType::Float32) continue;
    const graph::Node* shifted = made(ex->inputs[0], OpId::sub);
    const graph::Node* eq = made(hot->inputs[0], OpId::eq);
    if (!shifted || !eq) continue;
    const graph::Node* widen = made(shifted->inputs[0], OpId::cast);
    const graph::Value* lse = shifted->inputs[1];
    if (!widen || !input(lse) || !per_row(lse, rows, DType::Float32)) continue;
    const graph::Value* logits = widen->inputs[0];
    if (!input(logits) || logits->meta.dtype != o->meta.dtype ||
        logits->meta.sizes != o->meta.sizes || !contiguous(*logits))
      continue;
    // targets [N, 1] against the class index, an arange [C] (either side).
    const size_t t_at = eq->inputs[0]->meta.sizes == Shape{rows, 1} ? 0 : 1;
    const graph::Value* targets = eq->inputs[t_at];
    const graph::Value* classes_v = eq->inputs[1 - t_at];
    const graph::Node* ar = classes_v->producer;
    if (!input(targets) || !per_row(targets, rows, DType::Int64) || !input(classes_v) || !ar ||
        ar->op != OpId::arange || classes_v->meta.sizes != Shape{classes} ||
        classes_v->meta.dtype != DType::Int64 || ar->attrs.value != 0 || ar->attrs.value2 != 1)
      continue;
    folds.push_back({int(k), logits, lse, targets, scale});
  }
  return folds;
}

std::vector<AppendFold> append_folds(const graph::Graph& g, const FusionPlan& plan,
                                     const std::vector<int>& write_into,
                                     const std::vector<char>& changes_only) {
  std::vector<AppendFold> folds;
  const Readers readers(g);
  // Group k as a cache write: its where's put and new operands and the cache it writes.
  struct Write {
    const graph::Value *put = nullptr, *fresh = nullptr, *cache = nullptr;
  };
  auto write_of = [&](int k) -> std::optional<Write> {
    if (k < 0 || !changes_only[size_t(k)] || write_into[size_t(k)] < 0) return std::nullopt;
    const FusionGroup& grp = plan.groups[size_t(k)];
    const graph::Node* where = nullptr;
    for (const graph::Node* n : grp.nodes) {
      if (n->op == OpId::where && !where)
        where = n;
      else if (n->op != OpId::clone)
        return std::nullopt;
    }
    if (!where) return std::nullopt;
    const graph::Value* cache = g.inputs()[size_t(write_into[size_t(k)])];
    const graph::Value *put = where->inputs[0], *fresh = where->inputs[1];
    auto outside = [&](const graph::Value* v) {
      return std::find(grp.inputs.begin(), grp.inputs.end(), v) != grp.inputs.end();
    };
    if (where->inputs[2] != cache || !outside(put) || !outside(fresh)) return std::nullopt;
    // put a bool per slot (dim -2) of the cache, new one slot of it.
    const Shape& cs = cache->meta.sizes;
    const size_t nd = cs.size();
    if (nd < 2 || put->meta.dtype != DType::Bool || !contiguous(*put) ||
        put->meta.sizes.size() > nd || fresh->meta.sizes.size() != nd ||
        fresh->meta.dtype != cache->meta.dtype)
      return std::nullopt;
    const Shape& ps = put->meta.sizes;
    for (size_t d = 0; d < ps.size(); ++d) {
      const size_t at = nd - ps.size() + d;  // put's dim d aligns with the cache's dim `at`
      if (ps[d] != (at == nd - 2 ? cs[at] : 1)) return std::nullopt;
    }
    if (shape_numel(ps) != cs[nd - 2]) return std::nullopt;
    for (size_t d = 0; d < nd; ++d)
      if (fresh->meta.sizes[d] != (d == nd - 2 ? 1 : cs[d])) return std::nullopt;
    return Write{put, fresh, cache};
  };
  const auto& nodes = g.nodes();
  for (size_t i = 0; i < nodes.size(); ++i) {
    const graph::Node& n = *nodes[i];
    if (n.op != OpId::cached_attention || n.inputs.size() != 4) continue;
    const graph::Value *kv = n.inputs[1], *vv = n.inputs[2];
    if (!kv->producer || !vv->producer || kv == vv) continue;
    const int kg = plan.group_of_node[size_t(readers.index.at(kv->producer))];
    const int vg = plan.group_of_node[size_t(readers.index.at(vv->producer))];
    if (kg < 0 || vg < 0 || kg == vg || plan.groups[size_t(kg)].output != kv ||
        plan.groups[size_t(vg)].output != vv)
      continue;
    const auto kw = write_of(kg), vw = write_of(vg);
    if (!kw || !vw || kw->put != vw->put || kw->cache == vw->cache) continue;
    // Nothing else reads the written caches' new values in the graph.
    auto only_here = [&](const graph::Value* v) {
      const auto& r = readers.of[size_t(v->id)];
      return std::all_of(r.begin(), r.end(), [&](const graph::Node* x) { return x == &n; });
    };
    if (!only_here(kv) || !only_here(vv)) continue;
    folds.push_back({int(i), kg, vg, kw->put, kw->fresh, vw->fresh, kw->cache, vw->cache});
  }
  return folds;
}

std::vector<EmbeddingFold> embedding_folds(const graph::Graph& g, const FusionPlan& plan) {
  std::vector<EmbeddingFold> folds;
  const Readers readers(g);
  for (size_t k = 0; k < plan.groups.size(); ++k) {
    const FusionGroup& grp = plan.groups[k];
    if (!lone(grp, OpId::add)) continue;  // a lone add: no row, gemm or column part
    const graph::Node* add = grp.nodes[0];
    const graph::Value* sum = add->outputs[0];
    if (add->inputs.size() != 2 || add->inputs[0] == add->inputs[1] || !contiguous(*sum) ||
        sum->meta.sizes.empty())
      continue;
    const int64_t C = sum->meta.sizes.back(), rows = C > 0 ? shape_numel(sum->meta.sizes) / C : 0;
    // The lookup behind one operand of the add: its weight, index and row count, and the nodes
    // it takes (the index_select, and the view after it, if any).
    struct Lookup {
      const graph::Value *weight = nullptr, *index = nullptr;
      int64_t n = 0;
      std::vector<int> nodes;
    };
    auto lookup = [&](const graph::Value* v, Lookup* l) {
      if (readers.sole(v) != add || !v->producer) return false;
      const graph::Node* p = v->producer;
      if (p->op == OpId::view) {  // the lookup's rows reshaped: nothing but the add reads them
        const graph::Value* src = p->inputs[0];
        if (plan.group_of_node[size_t(readers.index.at(p))] >= 0 || readers.sole(src) != p ||
            !src->producer)
          return false;
        l->nodes.push_back(readers.index.at(p));
        v = src;
        p = v->producer;
      }
      if (p->op != OpId::index_select || p->attrs.dim != 0 || p->inputs.size() != 2 ||
          plan.group_of_node[size_t(readers.index.at(p))] >= 0)
        return false;
      const graph::Value *w = p->inputs[0], *i = p->inputs[1];
      if (w->meta.dtype != sum->meta.dtype || w->meta.sizes.size() != 2 || w->meta.sizes[1] != C ||
          !contiguous(*w) || i->meta.sizes.size() != 1 || !contiguous(*i) ||
          (i->meta.dtype != DType::Int64 && i->meta.dtype != DType::Int32) || !contiguous(*v))
        return false;
      l->nodes.push_back(readers.index.at(p));
      l->weight = w;
      l->index = i;
      l->n = i->meta.sizes[0];
      return true;
    };
    Lookup a, b;
    if (!lookup(add->inputs[0], &a) || !lookup(add->inputs[1], &b)) continue;
    // One operand has the sum's rows, laid out as the sum; the other those or one row.
    const graph::Value* in_a = add->inputs[0];
    const graph::Value* in_b = add->inputs[1];
    if (a.n != rows || in_a->meta.sizes != sum->meta.sizes) {
      std::swap(a, b);
      std::swap(in_a, in_b);
    }
    if (a.n != rows || in_a->meta.sizes != sum->meta.sizes ||
        !(b.n == 1 || (b.n == rows && in_b->meta.sizes == sum->meta.sizes)))
      continue;
    EmbeddingFold f{int(k), a.weight, a.index, b.weight, b.index, {}};
    f.nodes = a.nodes;
    f.nodes.insert(f.nodes.end(), b.nodes.begin(), b.nodes.end());
    folds.push_back(std::move(f));
  }
  return folds;
}

}  // namespace ember::compiler
