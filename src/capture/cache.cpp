// The segment cache shared by every compiled callable: a captured graph is found again by its
// structural hash, then compared structurally (ops, attrs, wiring, input and output metadata)
// and by which inputs require grad, so a function that breaks re-traces without recompiling.
#include <mutex>
#include <unordered_map>

#include "capture/capture.h"

namespace ember::capture {

namespace {

struct Entry {
  std::vector<bool> requires_grad;
  std::shared_ptr<const graph::Graph> graph;
  std::shared_ptr<const Runnable> runnable;
};

struct SegmentCache {
  std::mutex mu;
  // (backend name, structural hash) -> entries
  std::unordered_map<std::string, std::unordered_map<size_t, std::vector<Entry>>> map;
};
SegmentCache& cache() {
  static SegmentCache c;
  return c;
}

}  // namespace

std::shared_ptr<const Runnable> lookup_or_compile(Backend& be,
                                                  std::shared_ptr<const graph::Graph> g,
                                                  const std::vector<Tensor>& inputs,
                                                  bool* compiled) {
  std::vector<bool> rg(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) rg[i] = inputs[i].requires_grad();
  const size_t h = g->structural_hash();
  SegmentCache& c = cache();
  {
    std::lock_guard<std::mutex> lock(c.mu);
    for (const Entry& e : c.map[be.name()][h]) {
      if (e.requires_grad == rg && e.graph->structurally_equal(*g)) {
        *compiled = false;
        return e.runnable;
      }
    }
  }
  // Compile outside the lock (a real compiler takes a while); two threads racing on one graph
  // both compile it and the first one stored wins.
  g->validate();
  std::shared_ptr<const Runnable> r = be.compile(g);
  std::lock_guard<std::mutex> lock(c.mu);
  auto& bucket = c.map[be.name()][h];
  for (const Entry& e : bucket) {
    if (e.requires_grad == rg && e.graph->structurally_equal(*g)) {
      *compiled = true;
      return e.runnable;
    }
  }
  bucket.push_back({rg, g, r});
  *compiled = true;
  return r;
}

void clear_segment_cache() {
  SegmentCache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  c.map.clear();
}

}  // namespace ember::capture

namespace ember {
void reset_compile_caches() {
  capture::clear_segment_cache();
}
}  // namespace ember
