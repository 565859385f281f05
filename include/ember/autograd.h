// Autograd controls: grad mode and explicit gradient computation.
#pragma once
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

}  // namespace ember
