// Autograd controls: grad mode and explicit gradient computation.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "ember/tensor.h"

namespace ember {

// Whether ops on this thread record autograd history (true unless a guard turned it off).
bool is_grad_enabled();
// Turns recording on or off for this thread (prefer NoGradGuard / EnableGradGuard).
void set_grad_enabled(bool on);

// Disables gradient recording in a scope (like torch.no_grad()).
class NoGradGuard {
 public:
  // Turns recording off until the guard is destroyed, then restores the previous mode.
  NoGradGuard() : prev_(is_grad_enabled()) { set_grad_enabled(false); }
  ~NoGradGuard() { set_grad_enabled(prev_); }
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool prev_;
};

class EnableGradGuard {
 public:
  // Sets recording to `on` until the guard is destroyed, then restores the previous mode.
  explicit EnableGradGuard(bool on = true) : prev_(is_grad_enabled()) { set_grad_enabled(on); }
  ~EnableGradGuard() { set_grad_enabled(prev_); }
  EnableGradGuard(const EnableGradGuard&) = delete;
  EnableGradGuard& operator=(const EnableGradGuard&) = delete;

 private:
  bool prev_;
};

// Runs backward from `outputs` (seeded with `grads`, ones for scalars when empty) and
// accumulates into the .grad of leaves that require grad.
void backward(const std::vector<Tensor>& outputs, const std::vector<Tensor>& grads = {},
              bool retain_graph = false);

// Calls hook(leaf) each time a backward has accumulated a gradient into the .grad of `leaf` (a
// tensor that requires grad and has no grad_fn), after the sum, so leaf.grad() holds the new
// value (PyTorch's register_post_accumulate_grad_hook). Hooks run on the backward's thread in
// registration order, once per backward that reaches the leaf; a compiled training step's
// backward reaches its leaves when its backward graph has run. Returns a handle for
// remove_post_accumulate_grad_hook; Error when `leaf` is not such a leaf.
uint64_t register_post_accumulate_grad_hook(const Tensor& leaf,
                                            std::function<void(const Tensor&)> hook);
// Removes the hook `handle` from `leaf` (nothing happens when it is not there).
void remove_post_accumulate_grad_hook(const Tensor& leaf, uint64_t handle);
// Runs fn when the backward running on this thread has run its last node, before backward()
// returns (PyTorch's queue_callback); callbacks run in the order queued, and may queue more.
// Error when no backward is running on this thread.
void queue_backward_callback(std::function<void()> fn);

}  // namespace ember
