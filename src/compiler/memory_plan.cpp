// Peak-memory simulation of step lists (see memory_plan.h).
#include "compiler/memory_plan.h"

#include <algorithm>

#include "core/shape.h"
#include "graph/graph_util.h"

namespace ember::compiler {

int64_t peak_bytes(const graph::Graph& g, const std::vector<StepIO>& steps) {
  const size_t nv = g.values().size();
  // The buffer each value lives in: its own, or (views) its base's. -1: a graph input's.
  std::vector<int> owner(nv, -1);
  std::vector<int64_t> bytes(nv, 0);
  for (const StepIO& s : steps) {
    for (const graph::Value* v : s.produces) {
      const graph::Value* root = graph::view_root(v);
      owner[size_t(v->id)] = root->producer ? root->id : -1;
      if (root == v)
        bytes[size_t(v->id)] = shape_numel(v->meta.sizes) * int64_t(dtype_size(v->meta.dtype));
    }
  }
  // Last step reading each buffer (through any alias); outputs live to the end.
  std::vector<int> last(nv, -1);
  for (size_t i = 0; i < steps.size(); ++i) {
    for (const graph::Value* v : steps[i].reads) {
      const int o = owner[size_t(v->id)];
      if (o >= 0) last[size_t(o)] = std::max(last[size_t(o)], int(i));
    }
    for (const graph::Value* v : steps[i].produces) {  // produced but never read: freed at once
      const int o = owner[size_t(v->id)];
      if (o >= 0) last[size_t(o)] = std::max(last[size_t(o)], int(i));
    }
  }
  for (const graph::Value* v : g.outputs()) {
    const int o = owner[size_t(v->id)];
    if (o >= 0) last[size_t(o)] = int(steps.size());
  }
  std::vector<std::vector<int>> frees(steps.size() + 1);
  for (size_t o = 0; o < nv; ++o)
    if (bytes[o] > 0 && last[o] >= 0) frees[size_t(last[o])].push_back(int(o));
  int64_t live = 0, peak = 0;
  for (size_t i = 0; i < steps.size(); ++i) {
    for (const graph::Value* v : steps[i].produces)
      if (owner[size_t(v->id)] == v->id) live += bytes[size_t(v->id)];
    peak = std::max(peak, live);
    for (int o : frees[i]) live -= bytes[size_t(o)];
  }
  return peak;
}

int64_t eager_peak_bytes(const graph::Graph& g) {
  std::vector<StepIO> steps;
  for (const auto& n : g.nodes()) {
    StepIO s;
    s.produces.assign(n->outputs.begin(), n->outputs.end());
    s.reads.assign(n->inputs.begin(), n->inputs.end());
    steps.push_back(std::move(s));
  }
  return peak_bytes(g, steps);
}

}  // namespace ember::compiler
