// Post-accumulate-grad hooks on leaves and end-of-backward callbacks.
#include "autograd/hooks.h"

#include "ember/autograd.h"

namespace ember {

namespace autograd {
namespace {
thread_local BackwardCallbacks* tls_callbacks = nullptr;
}

void run_post_accumulate_hooks(const std::shared_ptr<TensorImpl>& leaf) {
  if (!leaf->autograd || !leaf->autograd->post_accumulate_hooks) return;
  // A copy: a hook may register or remove hooks on this leaf.
  const auto hooks = leaf->autograd->post_accumulate_hooks->hooks;
  const Tensor t(leaf);
  for (const auto& [handle, hook] : hooks) hook(t);
}

BackwardCallbacks::BackwardCallbacks() : prev_(tls_callbacks) { tls_callbacks = this; }
BackwardCallbacks::~BackwardCallbacks() { tls_callbacks = prev_; }

void BackwardCallbacks::run() {
  // By index: a callback may queue another, which runs after it.
  for (size_t i = 0; i < queued_.size(); ++i) {
    std::function<void()> fn = std::move(queued_[i]);
    fn();
  }
  queued_.clear();
}
}  // namespace autograd

uint64_t register_post_accumulate_grad_hook(const Tensor& leaf,
                                            std::function<void(const Tensor&)> hook) {
  EMBER_CHECK(leaf.defined() && leaf.requires_grad() && leaf.is_leaf(),
              "register_post_accumulate_grad_hook: the tensor",
              leaf.defined() ? " (shape " + leaf.shape_str() + ")" : std::string(),
              " must be a leaf that requires grad (no grad_fn); call requires_grad_() on a "
              "tensor made by the user");
  EMBER_CHECK(bool(hook), "register_post_accumulate_grad_hook: the hook is empty");
  AutogradMeta& m = leaf.impl()->autograd_meta();
  if (!m.post_accumulate_hooks) m.post_accumulate_hooks = std::make_shared<autograd::LeafHooks>();
  autograd::LeafHooks& h = *m.post_accumulate_hooks;
  const uint64_t handle = h.next_handle++;
  h.hooks.emplace_back(handle, std::move(hook));
  return handle;
}

void remove_post_accumulate_grad_hook(const Tensor& leaf, uint64_t handle) {
  if (!leaf.defined() || !leaf.impl()->autograd || !leaf.impl()->autograd->post_accumulate_hooks)
    return;
  auto& hooks = leaf.impl()->autograd->post_accumulate_hooks->hooks;
  std::erase_if(hooks, [&](const auto& h) { return h.first == handle; });
}

void queue_backward_callback(std::function<void()> fn) {
  EMBER_CHECK(autograd::tls_callbacks != nullptr,
              "queue_backward_callback: no backward is running on this thread; call it from a "
              "hook that backward runs (register_post_accumulate_grad_hook)");
  autograd::tls_callbacks->queued_.push_back(std::move(fn));
}

}  // namespace ember
