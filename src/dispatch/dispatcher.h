// The dispatcher: every op call goes Autograd -> Capture -> backend kernel.
// Ops are called boxed (OpId, input tensors, Attrs), so each layer handles all ops uniformly.
#pragma once
#include "ember/source_location.h"
#include <span>
#include <vector>

#include "ops/op_impl.h"

namespace ember {

// Full dispatch: records autograd history when needed.
std::vector<Tensor> dispatch(OpId op, std::vector<Tensor> inputs, const Attrs& attrs = {});
// The single output of a one-output op.
Tensor dispatch1(OpId op, std::vector<Tensor> inputs, const Attrs& attrs = {});
// Computes op(inputs) and writes it into `self` (which must have the result's shape and
// dtype). Bumps self's version. Records autograd history when needed.
void dispatch_inplace(OpId op, const Tensor& self, std::vector<Tensor> inputs,
                      const Attrs& attrs = {});

// Below autograd: the capture hook if one is active on this thread, else the backend.
std::vector<Tensor> dispatch_below_autograd(OpId op, std::span<const Tensor> inputs,
                                            const Attrs& attrs);
// The backend alone: shape rule, output allocation, kernel.
std::vector<Tensor> run_backend(OpId op, std::span<const Tensor> inputs, const Attrs& attrs);
// The backend writing into an existing tensor (in-place form).
void run_backend_into(OpId op, std::span<const Tensor> inputs, const Tensor& out,
                      const Attrs& attrs);

// Capture plugs in here: while a hook is set on this thread, ops below autograd go to it.
class CaptureHook {
 public:
  virtual ~CaptureHook() = default;
  virtual std::vector<Tensor> on_op(OpId op, std::span<const Tensor> inputs,
                                    const Attrs& attrs) = 0;
  virtual void on_inplace(OpId op, std::span<const Tensor> inputs, const Tensor& out,
                          const Attrs& attrs) = 0;
  // A tensor's values are needed on the host (item(), printing, data_ptr()); `loc` is the
  // user's call site when known (line 0 otherwise). Called for real tensors too.
  virtual void on_sync(const Tensor& t, const char* why, ember::SourceLocation loc) = 0;
  // Code read a module's training flag while tracing (guarded by the capture).
  virtual void on_module_state(const void* module, bool training) {}
  // A new handle `alias` on the value of `of` was made outside the dispatcher (detach()); `of`
  // may be symbolic or real.
  virtual void on_alias(const Tensor& alias, const Tensor& of) {}
  // Code read `owner.grad()` (a defined grad) while tracing: a replay must read the grad the
  // owner has then, not this one.
  virtual void on_grad(const Tensor& owner, const Tensor& grad) {}
};
CaptureHook* capture_hook();
void set_capture_hook(CaptureHook* hook);
// Sets this thread's capture hook for a scope, restoring the previous one.
class HookScope {
 public:
  explicit HookScope(CaptureHook* h) : prev_(capture_hook()) { set_capture_hook(h); }
  ~HookScope() { set_capture_hook(prev_); }
  HookScope(const HookScope&) = delete;
  HookScope& operator=(const HookScope&) = delete;

 private:
  CaptureHook* prev_;
};

// The user's call site of the op being dispatched on this thread, for the front ends that take
// a ember::SourceLocation (ops that break capture, such as nonzero); line 0 when unknown.
ember::SourceLocation current_call_site();
class CallSiteScope {
 public:
  explicit CallSiteScope(ember::SourceLocation loc);
  ~CallSiteScope();
  CallSiteScope(const CallSiteScope&) = delete;
  CallSiteScope& operator=(const CallSiteScope&) = delete;

 private:
  ember::SourceLocation prev_;
};

// Called before host code reads a tensor's data: graph break under capture, errors otherwise
// if the tensor has no storage.
void sync_for_host_read(const Tensor& t, const char* why, ember::SourceLocation loc = {});

}  // namespace ember
