// Module: registration, traversal, modes and state dicts.
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <unordered_set>

#include "core/shape.h"
#include "dispatch/dispatcher.h"
#include "ember/autograd.h"
#include "ember/nn.h"
#include "ember/ops.h"
#include "nn/module_registry.h"

namespace ember::nn {

std::string LoadReport::str() const {
  std::ostringstream os;
  auto list = [&](const char* what, const std::vector<std::string>& v) {
    if (v.empty()) return;
    os << what << " (" << v.size() << "):";
    for (const auto& k : v) os << "\n  " << k;
    os << "\n";
  };
  list("missing keys", missing);
  list("unexpected keys", unexpected);
  list("mismatched keys", mismatched);
  return os.str();
}

namespace {
// Every live module, so that capture can find the slot a parameter it meets lives in
// (module_registry.h). Slot lists change under the same lock.
std::mutex& registry_mu() {
  static std::mutex mu;
  return mu;
}
std::unordered_set<const Module*>& registry() {
  static std::unordered_set<const Module*> live;
  return live;
}
}  // namespace

Module::Module(std::string type_name) : type_name_(std::move(type_name)) {
  std::lock_guard<std::mutex> lock(registry_mu());
  registry().insert(this);
}

Module::~Module() {
  std::lock_guard<std::mutex> lock(registry_mu());
  registry().erase(this);
}

void detail::for_each_live_module(const std::function<void(const Module&)>& f) {
  std::lock_guard<std::mutex> lock(registry_mu());
  for (const Module* m : registry()) f(*m);
}

Tensor& Module::register_parameter(const std::string& name, Tensor& slot, Tensor value) {
  EMBER_CHECK(value.defined(), type_name_, ": parameter '", name, "' is undefined");
  if (!value.requires_grad()) value.requires_grad_(true);
  slot = std::move(value);
  std::lock_guard<std::mutex> lock(registry_mu());
  params_.emplace_back(name, &slot);
  return slot;
}

Tensor& Module::register_buffer(const std::string& name, Tensor& slot, Tensor value,
                                bool persistent) {
  slot = std::move(value);
  std::lock_guard<std::mutex> lock(registry_mu());
  buffers_.emplace_back(name, &slot);
  if (!persistent) transient_.insert(&slot);
  return slot;
}

void Module::tie_parameter(const std::string& name, const Tensor& t) {
  for (auto& [n, p] : params_)
    if (n == name) {
      *p = t;
      return;
    }
  EMBER_FAIL(type_name_, ": no parameter named '", name, "' to tie");
}

void Module::convert(const std::function<bool(const Tensor&)>& wants,
                     const std::function<Tensor(const Tensor&)>& to) {
  std::map<const TensorImpl*, Tensor> done;  // tied tensors: converted once, shared again
  std::function<void(Module&)> visit = [&](Module& m) {
    auto convert_slot = [&](Tensor* slot, bool param) {
      if (!slot->defined() || !wants(*slot)) return;
      auto [it, fresh] = done.try_emplace(slot->impl());
      if (fresh) {
        NoGradGuard no_grad;
        it->second = to(slot->detach());
        if (param) it->second.requires_grad_(true);
      }
      *slot = it->second;
    };
    for (auto& [n, p] : m.params_) convert_slot(p, true);
    for (auto& [n, b] : m.buffers_) convert_slot(b, false);
    for (auto& [n, c] : m.children_) visit(*c);
  };
  visit(*this);
}

void Module::to(Device device) {
  convert([&](const Tensor& t) { return t.device() != device; },
          [&](const Tensor& t) { return t.to(device); });
}

void Module::to(DType dtype) {
  EMBER_CHECK(is_floating(dtype), "Module::to: ", dtype_name(dtype),
              " is not a floating-point dtype; parameters convert to float16, bfloat16, float32 "
              "or float64");
  convert([&](const Tensor& t) { return is_floating(t.dtype()) && t.dtype() != dtype; },
          [&](const Tensor& t) { return t.to(dtype); });
}

void Module::for_each_slot(
    const std::function<void(const std::string&, const Tensor&, bool)>& f) const {
  for (auto& [n, p] : params_) f(n, *p, false);
  for (auto& [n, b] : buffers_) f(n, *b, true);
}

void Module::collect(const std::string& prefix, StateDict& params, StateDict& buffers,
                     bool persistent_only) const {
  for (auto& [n, p] : params_) params.emplace_back(prefix + n, *p);
  for (auto& [n, b] : buffers_)
    if (!persistent_only || !transient_.count(b)) buffers.emplace_back(prefix + n, *b);
  for (auto& [n, m] : children_) m->collect(prefix + n + ".", params, buffers, persistent_only);
}

std::vector<std::pair<std::string, Tensor>> Module::named_parameters() const {
  StateDict params, buffers;
  collect("", params, buffers);
  std::set<TensorImpl*> seen;
  StateDict out;
  for (auto& [n, p] : params)
    if (seen.insert(p.impl()).second) out.emplace_back(n, p);
  return out;
}

std::vector<Tensor> Module::parameters() const {
  std::vector<Tensor> out;
  for (auto& [n, p] : named_parameters()) out.push_back(p);
  return out;
}

std::vector<std::pair<std::string, Tensor>> Module::named_buffers() const {
  StateDict params, buffers;
  collect("", params, buffers);
  return buffers;
}

std::vector<std::pair<std::string, Module*>> Module::named_modules() {
  std::vector<std::pair<std::string, Module*>> out{{"", this}};
  for (auto& [n, m] : children_)
    for (auto& [cn, cm] : m->named_modules()) out.emplace_back(cn.empty() ? n : n + "." + cn, cm);
  return out;
}

int64_t Module::num_parameters() const {
  int64_t n = 0;
  for (const Tensor& p : parameters()) n += p.numel();
  return n;
}

bool Module::is_training() const {
  if (CaptureHook* h = capture_hook()) h->on_module_state(this, training_);
  return training_;
}

void Module::train(bool on) {
  training_ = on;
  for (auto& [n, m] : children_) m->train(on);
}

void Module::zero_grad() {
  for (const Tensor& p : parameters()) p.set_grad(Tensor());
}

StateDict Module::state_dict() const {
  StateDict params, buffers;
  collect("", params, buffers, /*persistent_only=*/true);
  params.insert(params.end(), buffers.begin(), buffers.end());
  return params;
}

LoadReport Module::load_state_dict(const StateDict& dict, bool strict) {
  static const std::string kPrefix = "_orig_mod.";
  StateDict own = state_dict();
  std::map<std::string, Tensor> given;
  for (auto& [k, v] : dict) {
    std::string key = k.rfind(kPrefix, 0) == 0 ? k.substr(kPrefix.size()) : k;
    given[key] = v;
  }
  LoadReport report;
  std::set<std::string> own_names;
  std::vector<std::pair<Tensor, Tensor>> copies;
  for (auto& [name, t] : own) {
    own_names.insert(name);
    auto it = given.find(name);
    if (it == given.end()) {
      report.missing.push_back(name);
      continue;
    }
    const Tensor& src = it->second;
    if (!src.defined() || src.sizes() != t.sizes() || src.dtype() != t.dtype()) {
      report.mismatched.push_back(
          name + ": expected " + t.shape_str() + " " + std::string(dtype_name(t.dtype())) +
          ", got " +
          (src.defined() ? src.shape_str() + " " + std::string(dtype_name(src.dtype()))
                         : std::string("undefined")));
      continue;
    }
    copies.emplace_back(t, src);
  }
  for (auto& [k, v] : given)
    if (!own_names.count(k)) report.unexpected.push_back(k);
  if (strict && !report.ok())
    EMBER_FAIL("load_state_dict (", type_name_,
               "): the state dict does not match the module; "
               "nothing was loaded.\n",
               report.str(), "Pass strict=false to load the matching keys only.");
  NoGradGuard no_grad;
  for (auto& [dst, src] : copies) {
    Tensor d = dst;
    d.copy_(src);
  }
  return report;
}

void init_normal_(Tensor& t, double std) {
  NoGradGuard g;
  t.copy_(randn(t.sizes(), t.dtype()) * std);
}

void init_zeros_(Tensor& t) {
  NoGradGuard g;
  t.zero_();
}

}  // namespace ember::nn
