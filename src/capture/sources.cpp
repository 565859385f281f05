// Sources: where a replay finds each tensor a function read besides its arguments (see
// capture.h, Source). The guards resolve them on every call, before anything is replayed.
#include "capture/capture.h"
#include "core/shape.h"

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
      const Tensor& owner = owner_arg >= 0 ? f.tensors[size_t(owner_arg)]
                                           : found[size_t(owner_source)];
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

}  // namespace ember::capture
