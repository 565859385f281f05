// Which values each step of a compiled GPU graph reads, which steps go on a recording's side
// branch, and which kernels write straight into the input they replace
// (compiled_graph_cuda.h): decided once, when the graph is compiled.
#include <algorithm>
#include <optional>

#include "compiler/compiled_graph_cuda.h"
#include "core/env.h"
#include "graph/graph_util.h"

namespace ember::compiler {

std::vector<const graph::Value*> CudaCompiledGraph::step_reads(size_t s) const {
  const auto& nodes = g_->nodes();
  std::vector<const graph::Value*> r;
  auto add = [&](const auto& vs) { r.insert(r.end(), vs.begin(), vs.end()); };
  const Step& st = steps_[s];
  if (st.casts == 1) {
    add(first_sources_);
  } else if (st.casts == 2) {
    add(last_sources_);
    for (int i : tail_views_) add(nodes[size_t(i)]->inputs);
  } else if (st.kernel >= 0) {
    add(plan_.groups[size_t(st.kernel)].inputs);
    if (const int e = embedding_fold_of_group_[size_t(st.kernel)]; e >= 0) {
      const EmbeddingFold& f = embedding_folds_[size_t(e)];
      add(std::vector<const graph::Value*>{f.a_weight, f.a_index, f.b_weight, f.b_index});
    }
  } else if (const int f = fold_of_node_[size_t(st.index)]; f >= 0) {
    add(fold_reads(folds_[size_t(f)]));
  } else if (const int b = bias_fold_of_node_[size_t(st.index)]; b >= 0) {
    add(st.node->inputs);
    const BiasFold& f = bias_folds_[size_t(b)];
    if (f.bias) r.push_back(f.bias);
    if (f.residual) r.push_back(f.residual);
    if (f.ln_node >= 0) add(nodes[size_t(f.ln_node)]->inputs);  // the layer_norm's, read by the gemv
  } else {
    add(st.node->inputs);
  }
  return r;
}

void CudaCompiledGraph::hoist_keep_steps() {
  auto op_of = [&](size_t s) {
    return steps_[s].kernel < 0 && steps_[s].node ? std::optional<OpId>(steps_[s].node->op)
                                                  : std::nullopt;
  };
  for (size_t s = 0; s < steps_.size(); ++s) {
    if (op_of(s) != OpId::attention_keep) continue;
    // The place after the last step before s that makes its input or is an attention.
    size_t to = steps_[0].casts == 1 ? 1 : 0;
    const graph::Value* in = steps_[s].node->inputs[0];
    for (size_t r = s; r-- > to;) {
      const std::optional<OpId> op = op_of(r);
      bool makes = false;
      if (steps_[r].kernel >= 0) {
        const FusionGroup& grp = plan_.groups[size_t(steps_[r].kernel)];
        makes = grp.output == in || std::find(grp.extra_outputs.begin(), grp.extra_outputs.end(),
                                              in) != grp.extra_outputs.end();
      } else if (steps_[r].node) {
        const auto& outs = steps_[r].node->outputs;
        makes = std::find(outs.begin(), outs.end(), in) != outs.end();
      }
      if (makes || op == OpId::attention || op == OpId::attention_keep) {
        to = r + 1;
        break;
      }
    }
    std::rotate(steps_.begin() + std::ptrdiff_t(to), steps_.begin() + std::ptrdiff_t(s),
                steps_.begin() + std::ptrdiff_t(s) + 1);
  }
}

// A weight's grad needs nothing after it but the grad casts: recorded beside the chain of input
// grads it hangs off, the two products of a layer's backward (and its bias grads, sums over
// rows) run at once, each too small to fill the device alone.
int CudaCompiledGraph::plan_side_steps() {
  side_.assign(steps_.size(), 0);
  join_before_.assign(steps_.size(), 0);
  fold_on_side_.assign(steps_.size(), 0);
  side_reads_.assign(steps_.size(), {});
  has_side_ = false;
  if (!g_->mutations().empty() || !env_switch("EMBER_SIDE_BRANCHES", true)) return 0;
  const auto& values = g_->values();
  std::vector<std::vector<int>> readers(values.size());
  for (size_t s = 0; s < steps_.size(); ++s)
    for (const graph::Value* v : step_reads(s)) readers[size_t(v->id)].push_back(int(s));
  auto is_view = [&](size_t s) {
    const graph::Node* n = steps_[s].node;
    return steps_[s].kernel < 0 && n && op_info(n->op).kind == OpKind::View && n->inputs.size() == 1;
  };
  auto outputs_of = [&](size_t s) {
    std::vector<const graph::Value*> outs;
    if (steps_[s].kernel >= 0) {
      const FusionGroup& grp = plan_.groups[size_t(steps_[s].kernel)];
      outs.push_back(grp.output);
      outs.insert(outs.end(), grp.extra_outputs.begin(), grp.extra_outputs.end());
    } else if (steps_[s].node) {
      outs.assign(steps_[s].node->outputs.begin(), steps_[s].node->outputs.end());
    }
    return outs;
  };
  // Whether step s may go on the branch at all: a plain fused kernel, or a matmul, a sum or a
  // view run through the dispatcher (no fold, no draws).
  auto may_branch = [&](size_t s) {
    const Step& st = steps_[s];
    if (st.casts != 0) return false;
    if (st.kernel >= 0) {
      const size_t k = size_t(st.kernel);
      return embedding_fold_of_group_[k] < 0 && append_fold_of_group_[k] < 0 &&
             ce_fold_of_group_[k] < 0 && write_into_[k] < 0;
    }
    const size_t i = size_t(st.index);
    return st.node && fold_of_node_[i] < 0 && bias_fold_of_node_[i] < 0 &&
           append_fold_of_node_[i] < 0 && !graph::is_random(st.node->op) &&
           !st.node->skipped_draws &&
           (st.node->op == OpId::matmul || st.node->op == OpId::sum ||
            st.node->op == OpId::attention_keep || is_view(s));
  };
  auto keeps = [&](size_t s) {
    return steps_[s].kernel < 0 && steps_[s].node && steps_[s].node->op == OpId::attention_keep;
  };
  // From the end: a step whose every result is read only by the grad casts or by views on the
  // branch (or by nobody: an output).
  // attention_keep's flags: whoever reads them joins the branch first.
  for (size_t s = steps_.size(); s-- > 0;) {
    bool side = may_branch(s);
    if (keeps(s)) {
      side_[s] = side;
      continue;
    }
    for (const graph::Value* v : outputs_of(s))
      for (int r : readers[size_t(v->id)])
        side &= (side_[size_t(r)] && is_view(size_t(r))) || steps_[size_t(r)].casts == 2;
    side_[s] = side;
  }
  // A view alone on the branch launches nothing: only where it views the branch's results. A
  // step off the branch that reads them joins the branch first.
  std::vector<char> made_on_side(values.size(), 0);
  int count = 0;
  for (size_t s = 0; s < steps_.size(); ++s) {
    const std::vector<const graph::Value*> reads = step_reads(s);
    if (side_[s] && is_view(s) && !made_on_side[size_t(reads[0]->id)]) side_[s] = 0;
    if (side_[s]) {
      for (const graph::Value* v : reads) side_reads_[s].push_back(v->id);
      for (const graph::Value* v : outputs_of(s)) made_on_side[size_t(v->id)] = 1;
      count += !is_view(s);
      continue;
    }
    for (const graph::Value* v : reads)
      if (made_on_side[size_t(v->id)]) join_before_[s] = 1;
    if (join_before_[s]) std::fill(made_on_side.begin(), made_on_side.end(), 0);
    // A layer_norm_backward fold's weight and bias grads: their fold on the branch.
    const Step& st = steps_[s];
    if (st.kernel < 0 && st.casts == 0 && st.node && fold_of_node_[size_t(st.index)] >= 0 &&
        st.node->outputs.size() == 3) {
      fold_on_side_[s] = 1;
      made_on_side[size_t(st.node->outputs[1]->id)] = 1;
      made_on_side[size_t(st.node->outputs[2]->id)] = 1;
      ++count;
    }
  }
  if (count == 0) {
    std::fill(side_.begin(), side_.end(), 0);
    std::fill(fold_on_side_.begin(), fold_on_side_.end(), 0);
  }
  has_side_ = count > 0;
  return count;
}

// A mutation's new contents computed by a pointwise kernel go straight into the input they
// replace (a cache written each step), not into a buffer copied over it after the run, when
// that is safe: the kernel reads the input only at the index it writes (same sizes, no other
// view of it among its inputs), nothing after it reads the old contents (the input or a view
// of it), both are laid out contiguously, and the new contents are not a graph output.
void CudaCompiledGraph::plan_writes_into_inputs(const std::vector<int>& last) {
  write_into_.assign(plan_.groups.size(), -1);
  std::vector<int> step_of(plan_.groups.size(), -1);
  for (size_t st = 0; st < steps_.size(); ++st)
    if (steps_[st].kernel >= 0) step_of[size_t(steps_[st].kernel)] = int(st);
  const auto& outs = g_->outputs();
  for (const graph::Mutation& m : g_->mutations()) {
    const graph::Value *v = m.value, *t = m.target;
    if (v == t) continue;
    // The kernel whose result it is.
    const auto it = std::find_if(plan_.groups.begin(), plan_.groups.end(),
                                 [&](const FusionGroup& grp) { return grp.output == v; });
    if (it == plan_.groups.end()) continue;
    const int k = int(it - plan_.groups.begin());
    if (step_of[size_t(k)] < 0 || ce_fold_of_group_[size_t(k)] >= 0) continue;
    const FusionGroup& grp = *it;
    if (grp.row || grp.gemm || grp.attn_qk || !grp.extra_outputs.empty()) continue;
    if (v->meta.sizes != t->meta.sizes || v->meta.dtype != t->meta.dtype || !contiguous(*t) ||
        std::find(outs.begin(), outs.end(), v) != outs.end())
      continue;
    const int at = step_of[size_t(k)];
    bool safe = std::find(grp.inputs.begin(), grp.inputs.end(), t) != grp.inputs.end();
    for (const graph::Value* in : grp.inputs)
      safe &= in == t || graph::view_root(in) != t;
    for (const auto& u : g_->values())
      if (graph::view_root(u.get()) == t) safe &= last[size_t(u->id)] <= at;
    if (safe) write_into_[size_t(k)] = t->input_index;
  }
}

}  // namespace ember::compiler
