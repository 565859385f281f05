// Hooks on leaves (run after backward accumulates into .grad) and callbacks run at the end of a
// backward: the engine's side of register_post_accumulate_grad_hook and queue_backward_callback.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "ember/autograd.h"
#include "ember/tensor.h"

namespace ember::autograd {

struct LeafHooks {
  uint64_t next_handle = 0;
  std::vector<std::pair<uint64_t, std::function<void(const Tensor&)>>> hooks;
};

// Runs the post-accumulate hooks of `leaf` (none when it has no hooks).
void run_post_accumulate_hooks(const std::shared_ptr<TensorImpl>& leaf);

// While alive, queue_backward_callback on this thread queues into this scope; run() calls what
// was queued (a backward's last step). Scopes nest: a backward inside a callback has its own.
class BackwardCallbacks {
 public:
  BackwardCallbacks();
  ~BackwardCallbacks();
  BackwardCallbacks(const BackwardCallbacks&) = delete;
  BackwardCallbacks& operator=(const BackwardCallbacks&) = delete;
  void run();

 private:
  friend void ember::queue_backward_callback(std::function<void()> fn);
  std::vector<std::function<void()>> queued_;
  BackwardCallbacks* prev_;
};

}  // namespace ember::autograd
