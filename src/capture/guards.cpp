// Guards: what a cache entry assumed about its call, flattened into plain vectors so that a
// cache hit costs a few comparisons per input; and the text of the first failing check.
#include <sstream>

#include "capture/capture.h"
#include "core/shape.h"
#include "ember/autocast.h"
#include "ember/autograd.h"

namespace ember::capture {

namespace {
std::string device_str(Device d) {
  return d.str();
}
}  // namespace

void Guards::add_arguments(const detail::CallFrame& f) {
  for (size_t i = 0; i < f.tensors.size(); ++i) {
    const Tensor& t = f.tensors[i];
    TensorCheck c;
    c.slot = int32_t(i);
    c.defined = t.defined();
    if (c.defined) {
      c.dtype = t.dtype();
      c.device = t.device();
      c.requires_grad = t.requires_grad();
      c.contiguous = t.is_contiguous();
      c.ndim = int32_t(t.dim());
      c.dims_at = int32_t(dims_.size());
      dims_.insert(dims_.end(), t.sizes().begin(), t.sizes().end());
      if (!c.contiguous) dims_.insert(dims_.end(), t.strides().begin(), t.strides().end());
      for (size_t j = 0; j < i; ++j) {
        if (f.tensors[j].impl() == t.impl()) {
          same_.push_back({int32_t(j), int32_t(i)});
          break;
        }
      }
    }
    tensors_.push_back(c);
  }
  scalars_ = f.scalars;
}

void Guards::add_source(Source src, bool as_input) {
  if (as_input) source_inputs_.push_back(int32_t(sources_.size()));
  sources_.push_back(std::move(src));
}

void Guards::set_alias_pattern(const std::vector<Tensor>& graph_inputs) {
  alias_labels_.assign(graph_inputs.size(), 0);
  for (size_t i = 0; i < graph_inputs.size(); ++i) {
    size_t j = 0;
    while (graph_inputs[j].impl()->storage != graph_inputs[i].impl()->storage) ++j;
    alias_labels_[i] = int32_t(j);
  }
}

void Guards::add_module(const nn::Module* m, bool training) {
  for (const ModuleCheck& c : modules_)
    if (c.module == m) return;
  modules_.push_back({m, training});
}

void Guards::set_globals() {
  grad_mode_ = is_grad_enabled();
  default_dtype_ = default_float_dtype();
  autocast_ = autocast_dtype();
}

void Guards::add_module_identity(const std::shared_ptr<const nn::Module>& m) {
  root_ = m;
  root_tensors_.clear();
  for (const Tensor& p : m->parameters()) root_tensors_.push_back(p.impl());
  for (auto& [n, b] : m->named_buffers()) root_tensors_.push_back(b.impl());
}

bool Guards::check(const detail::CallFrame& f, std::string* why, int* passed,
                   SizeMiss* size_miss) const {
  int ok = 0;
  if (size_miss) *size_miss = {};
  auto fail = [&](auto&&... parts) {
    if (why) *why = detail::cat_str(parts...);
    if (passed) *passed = ok;
    return false;
  };
  if (f.tensors.size() != tensors_.size())
    return fail("number of tensor arguments: expected ", tensors_.size(), ", got ",
                f.tensors.size());
  if (!(f.scalars == scalars_)) {
    if (f.scalars.size() != scalars_.size())
      return fail("number of non-tensor arguments: expected ", scalars_.size(), ", got ",
                  f.scalars.size());
    for (size_t i = 0; i < scalars_.size(); ++i)
      if (!(f.scalars[i] == scalars_[i]))
        return fail("non-tensor argument ", i, ": expected ", scalars_[i].str(), ", got ",
                    f.scalars[i].str());
  }
  ++ok;
  const int64_t* dims = dims_.data();
  for (const TensorCheck& c : tensors_) {
    const Tensor& t = f.tensors[size_t(c.slot)];
    if (t.defined() != c.defined)
      return fail("input ", c.slot, ": expected ", c.defined ? "a tensor" : "an undefined tensor",
                  ", got ", t.defined() ? "a tensor" : "an undefined tensor");
    if (!c.defined) continue;
    const TensorImpl* ti = t.impl();
    if (ti->dtype != c.dtype)
      return fail("input ", c.slot, " dtype: expected ", dtype_name(c.dtype), ", got ",
                  dtype_name(ti->dtype));
    ++ok;
    if (int32_t(ti->sizes.size()) != c.ndim)
      return fail("input ", c.slot, " dims: expected ", c.ndim, ", got ", ti->sizes.size());
    const int64_t* want = dims + c.dims_at;
    for (int32_t d = 0; d < c.ndim; ++d)
      if (ti->sizes[size_t(d)] != want[d]) {
        if (size_miss) *size_miss = {int(c.slot), int(d)};
        return fail("input ", c.slot, " size[", d, "]: expected ", want[d], ", got ",
                    ti->sizes[size_t(d)]);
      }
    ok += 2;
    if (c.contiguous) {
      if (!ti->is_contiguous())
        return fail("input ", c.slot, " strides: expected contiguous, got ",
                    shape_str(ti->strides));
    } else {
      for (int32_t d = 0; d < c.ndim; ++d)
        if (ti->strides[size_t(d)] != want[c.ndim + d])
          return fail("input ", c.slot, " stride[", d, "]: expected ", want[c.ndim + d], ", got ",
                      ti->strides[size_t(d)]);
    }
    ++ok;
    if (!(ti->device == c.device))
      return fail("input ", c.slot, " device: expected ", device_str(c.device), ", got ",
                  device_str(ti->device));
    ++ok;
    if (ti->requires_grad() != c.requires_grad)
      return fail("input ", c.slot, " requires_grad: expected ", c.requires_grad ? "true" : "false",
                  ", got ", c.requires_grad ? "false" : "true");
  }
  ok += 1;
  for (auto [a, b] : same_)
    if (f.tensors[size_t(a)].impl() != f.tensors[size_t(b)].impl())
      return fail("inputs ", a, " and ", b, ": expected the same tensor, got different ones");
  ++ok;
  if (is_grad_enabled() != grad_mode_)
    return fail("grad mode: expected ", grad_mode_ ? "enabled" : "disabled", ", got ",
                grad_mode_ ? "disabled" : "enabled");
  if (default_float_dtype() != default_dtype_)
    return fail("default float dtype: expected ", dtype_name(default_dtype_), ", got ",
                dtype_name(default_float_dtype()));
  if (autocast_dtype() != autocast_) {
    auto name = [](std::optional<DType> d) {
      return d ? std::string(dtype_name(*d)) : std::string("off");
    };
    return fail("autocast: expected ", name(autocast_), ", got ", name(autocast_dtype()));
  }
  ++ok;
  for (const ModuleCheck& m : modules_)
    if (m.module->is_training() != m.training)
      return fail("module ", m.module->type_name(), " training: expected ",
                  m.training ? "true" : "false", ", got ", m.training ? "false" : "true");
  // Tensors read besides the arguments: where the function would find them now.
  std::vector<Tensor> found;
  found.reserve(sources_.size());
  f.captured.clear();
  f.captured.reserve(source_inputs_.size());
  for (const Source& src : sources_) {
    Tensor t = src.resolve(f, found);
    if (!t.defined())
      return fail(src.describe(), ": ",
                  src.kind == Source::Captured
                      ? "freed or replaced since the trace (a handle holding it was assigned "
                        "another tensor, or its module slot holds another one)"
                      : "the grad is undefined now");
    const TensorImpl* ti = t.impl();
    bool same =
        ti->dtype == src.dtype && ti->sizes == src.sizes && ti->device == src.device &&
        ti->requires_grad() == src.requires_grad &&
        (src.kind == Source::Constant || (ti->strides == src.strides && ti->offset == src.offset));
    if (!same)
      return fail(src.describe(), ": now ", dtype_name(ti->dtype), shape_str(ti->sizes),
                  ti->requires_grad() ? " requires_grad" : "",
                  " (its dtype, sizes, strides, device or requires_grad changed)");
    found.push_back(std::move(t));
  }
  ++ok;
  for (int32_t k : source_inputs_) f.captured.push_back(found[size_t(k)]);
  if (!alias_labels_.empty()) {
    // The graph writes into an input: inputs must share memory exactly as when traced.
    std::vector<const Storage*> mem;
    mem.reserve(alias_labels_.size());
    for (const Tensor& t : f.tensors)
      if (t.defined()) mem.push_back(t.impl()->storage.get());
    for (const Tensor& t : f.captured) mem.push_back(t.impl()->storage.get());
    if (mem.size() != alias_labels_.size()) return fail("internal: graph input count changed");
    for (size_t i = 0; i < mem.size(); ++i) {
      size_t j = 0;
      while (mem[j] != mem[i]) ++j;
      if (int32_t(j) != alias_labels_[i])
        return fail("graph input ", i, " shares memory with input ", j, " now, and with input ",
                    alias_labels_[i],
                    " when traced (the graph writes into an input, so aliasing is guarded)");
    }
  }
  if (root_) {
    size_t i = 0;
    bool same = true;
    for (const Tensor& p : root_->parameters())
      same &= i < root_tensors_.size() && root_tensors_[i++] == p.impl();
    for (auto& [n, b] : root_->named_buffers())
      same &= i < root_tensors_.size() && root_tensors_[i++] == b.impl();
    if (!same || i != root_tensors_.size())
      return fail("module ", root_->type_name(),
                  ": its parameters or buffers were replaced by other tensors");
  }
  return true;
}

bool Guards::is_dead() const {
  for (const Source& src : sources_) {
    if (src.kind != Source::Captured) continue;
    std::shared_ptr<TensorImpl> p = src.weak.lock();
    if (!p || p->rebinds.load(std::memory_order_relaxed) != src.rebinds) return true;
  }
  return false;
}

std::string Guards::str() const {
  std::ostringstream os;
  for (const TensorCheck& c : tensors_) {
    os << "  input " << c.slot << ": ";
    if (!c.defined) {
      os << "undefined\n";
      continue;
    }
    Shape s(dims_.begin() + c.dims_at, dims_.begin() + c.dims_at + c.ndim);
    os << dtype_name(c.dtype) << shape_str(s) << (c.contiguous ? " contiguous" : " strided") << " "
       << device_str(c.device) << (c.requires_grad ? " requires_grad" : "") << "\n";
  }
  for (auto [a, b] : same_) os << "  inputs " << a << " and " << b << " are one tensor\n";
  for (size_t i = 0; i < scalars_.size(); ++i)
    os << "  argument " << i << " == " << scalars_[i].str() << "\n";
  os << "  grad mode " << (grad_mode_ ? "enabled" : "disabled") << ", default float dtype "
     << dtype_name(default_dtype_) << "\n";
  for (const ModuleCheck& m : modules_)
    os << "  module " << m.module->type_name() << " training == " << (m.training ? "true" : "false")
       << "\n";
  for (const Source& src : sources_) os << "  " << src.describe() << "\n";
  if (!alias_labels_.empty()) os << "  graph inputs share memory as when traced\n";
  if (root_) os << "  module " << root_->type_name() << " parameter identities\n";
  return os.str();
}

}  // namespace ember::capture

namespace ember::detail {
std::string ScalarArg::str() const {
  switch (kind) {
    case Int:
      return std::to_string(i);
    case Float: {
      std::string v = cat_str(f);  // "2" for 2.0: spelled "2.0", so that it reads as a float
      return v.find_first_not_of("-0123456789") == std::string::npos ? v + ".0" : v;
    }
    case Bool:
      return i ? "true" : "false";
    case String:
      return "\"" + s + "\"";
    case Length:
      return cat_str("a vector of ", i, " tensors");
  }
  return "?";
}
}  // namespace ember::detail
