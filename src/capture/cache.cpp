// The segment cache shared by every compiled callable: a captured graph is found again by its
// structural hash, then compared structurally (ops, attrs, wiring, input and output metadata)
// and by which inputs require grad, so a function that breaks re-traces without recompiling.
// With grad mode on and an input that requires grad, the compiled form is a training graph
// (joint.h): a forward and a backward graph, compiled when the forward is.
#include <mutex>
#include <unordered_map>

#include "capture/capture.h"
#include "capture/joint.h"
#include "dispatch/dispatcher.h"
#include "ember/autograd.h"

namespace ember::capture {

namespace {

struct Entry {
  bool training = false;  // compiled for grad mode on with an input that requires grad
  std::vector<bool> requires_grad;
  std::shared_ptr<const graph::Graph> graph;
  std::shared_ptr<const Runnable> runnable;  // null when the callables own it (weak)
  std::weak_ptr<const Runnable> weak;
  std::shared_ptr<const Runnable> get() const { return runnable ? runnable : weak.lock(); }
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
  bool any_rg = false;
  for (size_t i = 0; i < inputs.size(); ++i) {
    rg[i] = inputs[i].requires_grad();
    any_rg |= rg[i];
  }
  const bool training = any_rg && is_grad_enabled();
  const size_t h = g->structural_hash();
  SegmentCache& c = cache();
  {
    std::lock_guard<std::mutex> lock(c.mu);
    for (const Entry& e : c.map[be.name()][h]) {
      if (e.training == training && e.requires_grad == rg && e.graph->structurally_equal(*g)) {
        if (auto r = e.get()) {
          *compiled = false;
          return r;
        }
      }
    }
  }
  // Compile outside the lock (a real compiler takes a while); two threads racing on one graph
  // both compile it and the first one stored wins.
  g->validate();
  // A backend's own work is never captured: a compile met at a graph break runs while the
  // tracer still holds this thread's dispatches, and whatever the backend computes when it
  // builds (values it makes once, say) must be real tensors, not nodes of the next segment.
  HookScope untraced(nullptr);
  std::shared_ptr<const Runnable> r;
  if (training) {
    std::string why;
    r = compile_training(be, g, rg, &why);
    // Otherwise the graph is run as is, and autograd records each op as it runs (the eager
    // backend's interpretation; the compiler hands such runs to it).
    if (!r) log_line(Log::Training, "graph runs with per-op autograd: " + why);
  }
  if (!r) r = be.compile(g);
  std::lock_guard<std::mutex> lock(c.mu);
  auto& bucket = c.map[be.name()][h];
  std::erase_if(bucket, [](const Entry& e) { return !e.get(); });  // their callables are gone
  for (const Entry& e : bucket) {
    if (e.training == training && e.requires_grad == rg && e.graph->structurally_equal(*g)) {
      *compiled = true;
      return e.get();
    }
  }
  if (be.held_by_callables())
    bucket.push_back({training, rg, g, nullptr, r});
  else
    bucket.push_back({training, rg, g, r, {}});
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
