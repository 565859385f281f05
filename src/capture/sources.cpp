// Sources: where a replay finds each tensor a function read besides its arguments (see
// capture.h, Source): which kind each lifted tensor is, decided when a trace ends, and how the
// guards resolve them on every call, before anything is replayed.
#include "capture/capture.h"
#include "core/shape.h"
#include "nn/module_registry.h"

namespace ember::capture {

Tensor Source::resolve(const detail::CallFrame& f, const std::vector<Tensor>& found) const {
  switch (kind) {
    case Constant:
      return constant;
    case Captured: {
      std::shared_ptr<TensorImpl> p = weak.lock();
      if (!p || p->rebinds.load(std::memory_order_relaxed) != rebinds) return Tensor();
      if (slot && (module_alive.expired() || slot->impl() != p.get())) return Tensor();
      return Tensor(std::move(p));
    }
    case GradOf: {
      const Tensor& owner =
          owner_arg >= 0 ? f.tensors[size_t(owner_arg)] : found[size_t(owner_source)];
      // Read the grad without telling a capture hook: guards run outside any trace.
      if (!owner.defined() || !owner.impl()->autograd || !owner.impl()->autograd->grad)
        return Tensor();
      return Tensor(owner.impl()->autograd->grad);
    }
  }
  return Tensor();
}

std::string Source::describe() const {
  std::string what;
  switch (kind) {
    case Constant:
      what = "constant " + name;
      break;
    case Captured:
      what = (slot ? "module tensor " : "captured tensor ") + name;
      break;
    case GradOf:
      what = name;
      break;
  }
  return what + " " + std::string(dtype_name(dtype)) + shape_str(sizes);
}

void SourceFinder::grad_read(const Tensor& owner, const Tensor& grad) {
  grad_owner_[grad.impl()] = {grad, owner};
}

Source SourceFinder::source_of(const Tensor& t, const std::string& name,
                               const std::vector<Tensor>& results) {
  Source src;
  src.name = name;
  src.dtype = t.dtype();
  src.device = t.device();
  src.requires_grad = t.requires_grad();
  src.sizes = t.sizes();
  src.strides = t.strides();
  src.offset = t.storage_offset();
  if (auto g = grad_owner_.find(t.impl()); g != grad_owner_.end()) {
    const Tensor& owner = g->second.second;
    src.kind = Source::GradOf;
    if (auto a = arguments_.find(owner.impl()); a != arguments_.end()) {
      src.owner_arg = a->second;
      src.name = "grad of argument " + std::to_string(a->second);
    } else {
      Source o = source_of(owner, name + ".owner", results);
      src.name = "grad of " + o.describe();
      src.owner_source = guards_.num_sources();
      guards_.add_source(std::move(o), /*as_input=*/false);
    }
    return src;
  }
  // Held by nothing but this trace (and the results): made by the function, a constant.
  // Returned tensors are held twice: by the frame and by the result object.
  long held = t.impl_ptr().use_count() - 1;
  for (const Tensor& r : results) held -= 2 * (r.impl() == t.impl());
  for (const auto& [key, read] : grad_owner_) held -= read.second.impl() == t.impl();
  if (held <= 0) {
    src.kind = Source::Constant;
    src.constant = t;
    return src;
  }
  src.kind = Source::Captured;
  src.weak = t.impl_ptr();
  t.impl()->watched.store(true, std::memory_order_relaxed);
  src.rebinds = t.impl()->rebinds.load(std::memory_order_relaxed);
  if (const ModuleSlotRef* m = module_slot(t.impl())) {
    src.slot = m->slot;
    src.module_alive = m->alive;
    src.name = m->name;
  }
  return src;
}

// The module slot holding t, if any live module has it as a parameter or buffer.
const SourceFinder::ModuleSlotRef* SourceFinder::module_slot(const TensorImpl* t) {
  if (!slots_built_) {
    slots_built_ = true;
    nn::detail::for_each_live_module([&](const nn::Module& m) {
      m.for_each_slot([&](const std::string& n, const Tensor& slot, bool) {
        if (slot.defined())
          slots_.emplace(slot.impl(),
                         ModuleSlotRef{&slot, m.alive_token(), m.type_name() + "." + n});
      });
    });
  }
  auto it = slots_.find(t);
  return it == slots_.end() ? nullptr : &it->second;
}

}  // namespace ember::capture
