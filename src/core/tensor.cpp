// Tensor handle methods: metadata, host data access, autograd accessors.
#include "ember/tensor.h"

#include <cstring>

#include "autograd/node.h"
#include "core/make_tensor.h"
#include "core/shape.h"
#include "dispatch/dispatcher.h"
#include "ember/autograd.h"
#include "kernels/cpu/dtype_visit.h"
#include "kernels/device_memory.h"

namespace ember {

// wrap_dim lets a 0-dim tensor take dim 0 (as reductions do), but it has no size to read.
int64_t Tensor::size(int64_t d) const {
  EMBER_CHECK(dim() > 0, "size: dim ", d, " of a 0-dim tensor; it has no dims");
  return sizes()[wrap_dim(d, dim(), "size")];
}
int64_t Tensor::stride(int64_t d) const {
  EMBER_CHECK(dim() > 0, "stride: dim ", d, " of a 0-dim tensor; it has no dims");
  return strides()[wrap_dim(d, dim(), "stride")];
}
uint32_t Tensor::version() const {
  return impl_->storage ? impl_->storage->version.load() : 0;
}
std::string Tensor::shape_str() const { return ember::shape_str(sizes()); }

void* Tensor::data_ptr(ember::SourceLocation loc) const {
  EMBER_CHECK(defined(), "data_ptr: undefined tensor");
  sync_for_host_read(*this, "data_ptr", loc);
  return impl_->data();
}

double Tensor::item(ember::SourceLocation loc) const {
  EMBER_CHECK(defined(), "item: undefined tensor");
  EMBER_CHECK(numel() == 1, "item: a tensor with ", numel(), " elements (shape ", shape_str(),
              ") cannot be converted to a scalar; only one-element tensors can");
  sync_for_host_read(*this, "item", loc);
  if (device().type != DeviceType::CPU) return detach().cpu().item(loc);
  double v = 0;
  cpu::visit_all(dtype(), "item", [&]<class T>() {
    v = double(cpu::compute_t<T>(*static_cast<const T*>(impl_->data())));
  });
  return v;
}

Tensor::operator bool() const {
  EMBER_CHECK(defined(), "bool: undefined tensor");
  EMBER_CHECK(numel() == 1, "bool: the truth value of a tensor with ", numel(),
              " elements (shape ", shape_str(), ") is ambiguous");
  // Named as its own sync site: a conversion operator cannot take the caller's location.
  sync_for_host_read(*this, "bool conversion");
  return item() != 0;
}

template <class T>
std::vector<T> Tensor::to_vector(ember::SourceLocation loc) const {
  EMBER_CHECK(defined(), "to_vector: undefined tensor");
  sync_for_host_read(*this, "to_vector", loc);
  if (device().type != DeviceType::CPU) return detach().cpu().to_vector<T>(loc);
  Tensor c;
  {
    NoGradGuard g;
    // The copy is host-side work on real data: it runs eagerly even under capture.
    CaptureHook* hook = capture_hook();
    set_capture_hook(nullptr);
    try {
      c = detach().to(dtype_of<T>::value).contiguous();
    } catch (...) {
      set_capture_hook(hook);
      throw;
    }
    set_capture_hook(hook);
  }
  std::vector<T> out(size_t(c.numel()));
  if (!out.empty()) std::memcpy(out.data(), c.impl()->data(), out.size() * sizeof(T));
  return out;
}
template std::vector<float> Tensor::to_vector(ember::SourceLocation) const;
template std::vector<double> Tensor::to_vector(ember::SourceLocation) const;
template std::vector<int32_t> Tensor::to_vector(ember::SourceLocation) const;
template std::vector<int64_t> Tensor::to_vector(ember::SourceLocation) const;

Tensor& Tensor::requires_grad_(bool on) {
  EMBER_CHECK(defined(), "requires_grad_: undefined tensor");
  EMBER_CHECK(!on || is_floating(dtype()), "requires_grad_: only floating-point tensors can "
              "require gradients, got ", dtype_name(dtype()));
  EMBER_CHECK(on || is_leaf(), "requires_grad_(false): only leaf tensors can drop requires_grad; "
              "use detach()");
  impl_->autograd_meta().requires_grad = on;
  return *this;
}

bool Tensor::is_leaf() const { return !impl_->autograd || !impl_->autograd->grad_fn; }

Tensor Tensor::grad() const {
  if (!impl_->autograd || !impl_->autograd->grad) return Tensor();
  Tensor g(impl_->autograd->grad);
  if (CaptureHook* h = capture_hook()) h->on_grad(*this, g);
  return g;
}

void Tensor::set_grad(const Tensor& g) const {
  if (g.defined())
    EMBER_CHECK(g.sizes() == sizes(), "set_grad: gradient of shape ", g.shape_str(),
                " for a tensor of shape ", shape_str());
  impl_->autograd_meta().grad = g.defined() ? g.impl_ptr() : nullptr;
}

std::shared_ptr<autograd::Node> Tensor::grad_fn() const {
  return impl_->autograd ? impl_->autograd->grad_fn : nullptr;
}

void Tensor::backward(const Tensor& gradient, bool retain_graph) const {
  std::vector<Tensor> grads;
  if (gradient.defined()) grads.push_back(gradient);
  CaptureHook* hook = capture_hook();
  if (!hook) {
    ember::backward({*this}, grads, retain_graph);
    return;
  }
  // Under capture, backward is a graph break: the pending graph runs (so this tensor gets
  // its autograd history) and the backward pass runs eagerly.
  sync_for_host_read(*this, "backward");
  if (gradient.defined()) sync_for_host_read(gradient, "backward");
  set_capture_hook(nullptr);
  try {
    ember::backward({*this}, grads, retain_graph);
  } catch (...) {
    set_capture_hook(hook);
    throw;
  }
  set_capture_hook(hook);
}

Tensor Tensor::to(Device d) const {
  EMBER_CHECK(defined(), "to(", d.str(), "): undefined tensor");
  if (device() == d) return *this;
  EMBER_CHECK(!(requires_grad() && is_grad_enabled()), "to(", d.str(),
              "): copying a tensor that requires grad between devices is not differentiable "
              "yet; move it before setting requires_grad, or copy under NoGradGuard");
  sync_for_host_read(*this, "to(device)");
  Tensor src = is_contiguous() ? *this : contiguous();
  Tensor out = make_tensor(sizes(), dtype(), d);
  device_memory::copy_bytes(out.impl()->data(), d, src.impl()->data(), device(),
                            size_t(numel()) * dtype_size(dtype()));
  return out;
}

namespace {
thread_local bool tls_rebinds_ignored = false;
}  // namespace

RebindsIgnored::RebindsIgnored() : prev_(tls_rebinds_ignored) { tls_rebinds_ignored = true; }
RebindsIgnored::~RebindsIgnored() { tls_rebinds_ignored = prev_; }
bool Tensor::rebinds_ignored() noexcept { return tls_rebinds_ignored; }

Tensor Tensor::detach() const {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = impl_->storage;
  impl->symbolic = impl_->symbolic;
  impl->sizes = impl_->sizes;
  impl->strides = impl_->strides;
  impl->offset = impl_->offset;
  impl->dtype = impl_->dtype;
  impl->device = impl_->device;
  impl->is_view = impl_->is_view;
  Tensor t(std::move(impl));
  if (CaptureHook* h = capture_hook()) h->on_alias(t, *this);
  return t;
}

}  // namespace ember
