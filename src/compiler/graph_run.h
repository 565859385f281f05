// What the compiled graphs of every device (compiled_graph.h, compiled_graph_cuda.h) share
// about running a graph: binding inputs, eager steps, write-backs, and when a call runs through
// eager interpretation instead.
#pragma once
#include <atomic>
#include <mutex>
#include <string>
#include <vector>

#include "ember/tensor.h"
#include "graph/graph.h"

namespace ember::compiler {

// The build of a compiled graph that may wait for its second call (the first graph of its form
// at varying sizes, families.h): its first call runs through eager interpretation.
class DeferredBuild {
 public:
  void defer() { state_.store(kDeferred, std::memory_order_release); }
  void built() { state_.store(kBuilt, std::memory_order_release); }
  bool pending() const { return state_.load(std::memory_order_acquire) != kBuilt; }
  // Whether this call runs interpreted: a deferred graph's first call; its second runs
  // `build` (which calls built()) first.
  template <class Build>
  bool interpret_now(Build&& build) const {
    if (state_.load(std::memory_order_acquire) == kBuilt) return false;
    std::lock_guard<std::mutex> lock(mu_);
    const int s = state_.load(std::memory_order_relaxed);
    if (s == kDeferred) {
      state_.store(kDeferredRan, std::memory_order_relaxed);
      return true;
    }
    if (s == kDeferredRan) build();
    return false;
  }

 private:
  enum State : int { kBuilt, kDeferred, kDeferredRan };
  mutable std::atomic<int> state_{kBuilt};
  mutable std::mutex mu_;
};

// Whether autograd must record the call op by op (an input requires grad with grad mode on):
// the eager interpretation does that (correct, not faster).
bool records_grad(const std::vector<Tensor>& inputs);
// One node through the dispatcher, its results put in env; a random node draws from `draws`
// (its range of this run, Graph::reserve_draws), which the others ignore.
void dispatch_node(const graph::Node& n, std::vector<Tensor>& env,
                   const RandomRange* draws = nullptr);
// A run's environment (a tensor per value id) with the inputs checked against the captured
// ones and bound.
std::vector<Tensor> bind_inputs(const graph::Graph& g, const std::vector<Tensor>& inputs);
// A view of a tensor laid out as when captured is the captured view: made directly, without
// the dispatcher's shape rules (a backward graph has a hundred views, ~2 us each otherwise).
// False when n is not such a view.
bool run_captured_view(const graph::Node& n, std::vector<Tensor>& env);
// Nodes a compiled graph may run once, when it is built, and reuse the value of at every run:
// an arange (no inputs; its sizes fixed, as the graph is not shared across sizes) whose value
// is no graph output, nor viewed by one, and which no group of a fused plan needs written
// (intermediates are never written in place). Node indices, in graph order. A backend that
// reuses dead intermediates' memory must keep these values out of that reuse.
std::vector<int> made_once(const graph::Graph& g);
// The graph's outputs, after the write-backs into the inputs.
std::vector<Tensor> finish_run(const graph::Graph& g, const std::vector<Tensor>& inputs,
                               const std::vector<Tensor>& env);

}  // namespace ember::compiler
