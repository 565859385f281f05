// Dispatcher: autograd layer, capture hook, backend.
#include "dispatch/dispatcher.h"

#include <chrono>

#include "dispatch/op_profile.h"

#include "autograd/function.h"
#include "core/make_tensor.h"
#include "core/shape.h"
#include "ember/autograd.h"
#include "kernels/device_kernels.h"

namespace ember {

namespace {
thread_local CaptureHook* tls_capture_hook = nullptr;

void check_arity(OpId op, size_t n) {
  const OpInfo& info = op_info(op);
  EMBER_CHECK(info.num_inputs < 0 || size_t(info.num_inputs) == n, info.name, ": expected ",
              int(info.num_inputs), " tensor inputs, got ", n);
}

void check_inputs(OpId op, std::span<const Tensor> inputs) {
  for (size_t i = 0; i < inputs.size(); ++i) {
    EMBER_CHECK(inputs[i].defined(), op_name(op), ": input ", i, " is an undefined tensor");
    EMBER_CHECK(inputs[i].device() == inputs[0].device(), op_name(op),
                ": all inputs must be on the same device, got ", inputs[0].device().str(),
                " and ", inputs[i].device().str(), " (input ", i, ")");
  }
}
}  // namespace

CaptureHook* capture_hook() { return tls_capture_hook; }
void set_capture_hook(CaptureHook* hook) { tls_capture_hook = hook; }

namespace {
thread_local ember::SourceLocation tls_call_site{};
}
ember::SourceLocation current_call_site() { return tls_call_site; }
CallSiteScope::CallSiteScope(ember::SourceLocation loc) : prev_(tls_call_site) {
  tls_call_site = loc;
}
CallSiteScope::~CallSiteScope() { tls_call_site = prev_; }

void sync_for_host_read(const Tensor& t, const char* why, ember::SourceLocation loc) {
  // Real tensors go to the hook too: capture may have pending in-place writes to them.
  if (tls_capture_hook) tls_capture_hook->on_sync(t, why, loc);
  EMBER_CHECK(!t.is_symbolic(), why, ": the tensor has no data (it is symbolic, from capture)");
}

namespace {
// The CPU's kernel from the op table, or the device backend's.
KernelFn kernel_for(OpId op, Device dev) {
  if (dev.type == DeviceType::CPU) return op_impl(op).cpu;
  KernelFn k = device_kernel(op, dev);
  EMBER_CHECK(k, op_name(op), ": no kernel for ", dev.str(),
              " tensors yet; move the inputs to the CPU with .cpu()");
  return k;
}

// Runs a kernel, timed per op under EMBER_PROFILE_OPS (op_profile.h).
void run_kernel(KernelFn kernel, OpId op, Device dev, std::span<const Tensor> inputs,
                std::span<Tensor> outs, const Attrs& attrs) {
  if (!op_profile::enabled()) {
    kernel(inputs, outs, attrs);
    return;
  }
  if (dev.type != DeviceType::CPU) {
    const op_profile::GpuMark mark = op_profile::gpu_begin(dev);
    kernel(inputs, outs, attrs);
    op_profile::gpu_end(mark, op_profile::row_key(op, inputs), dev);
    return;
  }
  const auto t0 = std::chrono::steady_clock::now();
  kernel(inputs, outs, attrs);
  const auto t1 = std::chrono::steady_clock::now();
  op_profile::record(op_profile::row_key(op, inputs), dev,
                     std::chrono::duration<double, std::milli>(t1 - t0).count());
}
}  // namespace

std::vector<Tensor> run_backend(OpId op, std::span<const Tensor> inputs, const Attrs& attrs) {
  const OpInfo& info = op_info(op);
  const OpImpl& impl = op_impl(op);
  MetaList metas = impl.infer(inputs, attrs);
  std::vector<Tensor> outs;
  outs.reserve(metas.size());
  if (info.kind == OpKind::View) {
    for (const TensorMeta& m : metas) outs.push_back(make_view(inputs[0], m.sizes, m.strides, m.offset));
    return outs;
  }
  Device dev = inputs.empty() ? attrs.device : inputs[0].device();
  KernelFn kernel = kernel_for(op, dev);
  for (const TensorMeta& m : metas) outs.push_back(make_tensor(m.sizes, m.dtype, dev));
  bool any_work = false;
  for (const Tensor& o : outs) any_work |= o.numel() > 0;
  if (any_work) run_kernel(kernel, op, dev, inputs, outs, attrs);
  return outs;
}

void run_backend_into(OpId op, std::span<const Tensor> inputs, const Tensor& out,
                      const Attrs& attrs) {
  const OpInfo& info = op_info(op);
  EMBER_CHECK(info.has(kInplaceable), info.name, " has no in-place form");
  const OpImpl& impl = op_impl(op);
  MetaList metas = impl.infer(inputs, attrs);
  EMBER_CHECK(metas.size() == 1 && metas[0].sizes == out.sizes(), info.name,
              "_: the result has shape ", shape_str(metas[0].sizes),
              ", which does not match the shape ", shape_str(out.sizes()),
              " of the tensor written in place");
  EMBER_CHECK(metas[0].dtype == out.dtype(), info.name, "_: result dtype ",
              dtype_name(metas[0].dtype), " cannot be written into a ", dtype_name(out.dtype()),
              " tensor in place");
  for (size_t i = 0; i < inputs.size(); ++i)
    EMBER_CHECK(inputs[i].device() == out.device(), info.name, "_: the tensor written in place is on ",
                out.device().str(), " but input ", i, " is on ", inputs[i].device().str(),
                "; move one of them with to()");
  if (out.numel() == 0) return;
  KernelFn kernel = kernel_for(op, out.device());
  // An input that overlaps the output in a different layout would be read after being
  // written: compute out of place, then copy.
  bool overlap = false;
  for (const Tensor& in : inputs) {
    if (in.impl()->storage != out.impl()->storage) continue;
    if (in.storage_offset() != out.storage_offset() || in.strides() != out.strides() ||
        in.sizes() != out.sizes())
      overlap = true;
  }
  Tensor target = overlap ? make_tensor(out.sizes(), out.dtype(), out.device()) : out;
  Tensor outs[1] = {target};
  run_kernel(kernel, op, out.device(), inputs, std::span<Tensor>(outs, 1), attrs);
  if (overlap) {
    Tensor ins[1] = {target};
    Tensor dst[1] = {out};
    kernel_for(OpId::clone, out.device())(std::span<const Tensor>(ins, 1),
                                          std::span<Tensor>(dst, 1), Attrs{});
  }
}

std::vector<Tensor> dispatch_below_autograd(OpId op, std::span<const Tensor> inputs,
                                            const Attrs& attrs) {
  if (tls_capture_hook) return tls_capture_hook->on_op(op, inputs, attrs);
  return run_backend(op, inputs, attrs);
}

std::vector<Tensor> dispatch(OpId op, std::vector<Tensor> inputs, const Attrs& attrs) {
  check_arity(op, inputs.size());
  check_inputs(op, inputs);
  // Under capture, ops are recorded without autograd: replaying the graph through this
  // dispatcher records the history then.
  if (tls_capture_hook) return tls_capture_hook->on_op(op, inputs, attrs);
  if (autograd::needs_history(op, inputs)) return autograd::record(op, inputs, attrs);
  return dispatch_below_autograd(op, inputs, attrs);
}

Tensor dispatch1(OpId op, std::vector<Tensor> inputs, const Attrs& attrs) {
  return dispatch(op, std::move(inputs), attrs)[0];
}

void dispatch_inplace(OpId op, const Tensor& self, std::vector<Tensor> inputs,
                      const Attrs& attrs) {
  check_arity(op, inputs.size());
  check_inputs(op, inputs);
  EMBER_CHECK(self.defined(), op_name(op), "_: the tensor written in place is undefined");
  if (tls_capture_hook) {
    tls_capture_hook->on_inplace(op, inputs, self, attrs);
    return;
  }
  bool history = autograd::needs_history(op, inputs) ||
                 (self.requires_grad() && is_grad_enabled());
  if (history) {
    autograd::record_inplace(op, self, inputs, attrs);
  } else if (tls_capture_hook) {
    tls_capture_hook->on_inplace(op, inputs, self, attrs);
  } else {
    run_backend_into(op, inputs, self, attrs);
  }
  if (self.impl()->storage) self.impl()->storage->version++;
}

}  // namespace ember
