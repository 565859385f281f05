// Replaying a compiled graph's run as a recorded CUDA graph (cuda_graphed.h).
#include "compiler/cuda_graphed.h"

#include <algorithm>
#include <atomic>
#include <mutex>
#include <string>
#include <unordered_map>

#include "core/make_tensor.h"
#include "dispatch/op_profile.h"
#include "ember/autograd.h"
#include "graph/graph_util.h"
#include "kernels/cuda_graph.h"

namespace ember {

namespace {
std::atomic<int64_t> g_recordings{0}, g_replays{0}, g_unrecorded{0}, g_moved{0}, g_side{0};
}  // namespace

CudaGraphCounters cuda_graph_counters() {
  return {g_recordings.load(), g_replays.load(), g_unrecorded.load(), g_moved.load(),
          int64_t(cuda_graph::live_pool_bytes()), g_side.load()};
}

namespace compiler {

void count_side_steps(int64_t n) { g_side += n; }

namespace {

constexpr size_t kMaxRecordings = 4;

const char* address_of(const Tensor& t) {
  return static_cast<const char*>(t.impl()->storage->data) +
         t.impl()->offset * int64_t(dtype_size(t.dtype()));
}

// The elements a view spans from its storage offset (its strides are non-negative).
int64_t span_of(const Tensor& t) {
  int64_t span = 1;
  for (int64_t d = 0; d < t.dim(); ++d) {
    if (t.sizes()[size_t(d)] == 0) return 0;
    span += (t.sizes()[size_t(d)] - 1) * t.strides()[size_t(d)];
  }
  return span;
}

// Whether a copy into a view of t's layout writes each element once (no stride 0 over a dim of
// more than one element, no negative stride).
bool copyable_layout(const Tensor& t) {
  for (int64_t d = 0; d < t.dim(); ++d)
    if (t.sizes()[size_t(d)] > 1 && t.strides()[size_t(d)] <= 0) return false;
  return true;
}

class CudaGraphed : public capture::Runnable {
 public:
  CudaGraphed(std::shared_ptr<const capture::Runnable> inner,
              std::shared_ptr<const graph::Graph> g, Device device)
      : inner_(std::move(inner)), g_(std::move(g)), device_(device) {
    if (graph::draws_random(*g_))
      off_why_ = "it draws random numbers (a replay would repeat the recorded draws)";
    else if (op_profile::enabled())
      off_why_ = "EMBER_PROFILE_OPS times each kernel on its own";
    for (const graph::Mutation& m : g_->mutations()) mutated_.push_back(m.target->input_index);
  }

  ~CudaGraphed() override {
    // Outputs the caller still holds must not point into pools that are about to be reused.
    try {
      for (Recording& r : recordings_) move_out_held(r);
    } catch (...) {  // the device is gone (the process is ending): nothing can read them
    }
  }

  std::vector<Tensor> run(const std::vector<Tensor>& inputs) const override {
    std::lock_guard<std::mutex> lock(mu_);
    if (!off_why_.empty()) {
      if (!warned_) {
        warned_ = true;
        capture::warn("mode \"reduce-overhead\": a graph of " + std::to_string(g_->num_ops()) +
                      " ops runs without a CUDA graph: " + off_why_);
      }
      g_unrecorded++;
      return inner_->run(inputs);
    }
    if (!warm_) return warm_up(inputs);
    if (!same_sizes(inputs)) return unrecorded(inputs, "its inputs' sizes changed");
    for (Recording& r : recordings_)
      if (matches(r, inputs)) return replay(r, inputs);
    if (recordings_.empty()) return record(inputs);
    std::vector<const char*> key = in_place_addresses(inputs);
    if (key == last_miss_) {
      if (recordings_.size() == kMaxRecordings) evict_least_recent();
      return record(inputs);
    }
    last_miss_ = std::move(key);
    return unrecorded(inputs, "an input read in place is not where the recordings read it");
  }
  bool shares_compiled_code() const override { return inner_->shares_compiled_code(); }
  bool defers_build() const override { return inner_->defers_build(); }

 private:
  struct Recording {
    std::shared_ptr<cuda_graph::Pool> pool;
    std::shared_ptr<cuda_graph::Recording> exec;
    std::vector<const char*> in_place;  // per input: the address read in place, or null
    std::vector<Tensor> buffers;        // per copied input: the view it is copied into
    std::vector<int64_t> passed_offset;  // per input: the offset of the tensor recorded
    std::vector<Tensor> outputs;  // the recorded outputs (holding the pool's blocks; an input's
                                  // view, its layout alone)
    // Per output: -1 the pool's memory, given out as a new alias each replay; i >= 0 a view of
    // input i; -2 other memory, given out as recorded.
    std::vector<int> alias;
    std::vector<std::weak_ptr<Storage>> handed;  // what the last replay gave out
    int64_t last_used = 0;
  };

  void evict_least_recent() const {
    auto oldest = std::min_element(recordings_.begin(), recordings_.end(),
                                   [](const Recording& a, const Recording& b) {
                                     return a.last_used < b.last_used;
                                   });
    move_out_held(*oldest);
    recordings_.erase(oldest);
    capture::log_line(capture::Log::CudaGraphs, "a graph of " + std::to_string(g_->num_ops()) +
                                                    " ops dropped its least recent recording");
  }

  std::vector<Tensor> warm_up(const std::vector<Tensor>& inputs) const {
    const bool deferred = inner_->defers_build();
    std::vector<Tensor> outs = inner_->run(inputs);
    if (deferred) return outs;  // its first call was interpreted: the kernels come next call
    sizes_.clear();
    warm_storages_.clear();
    for (const Tensor& t : inputs) {
      if (!t.defined() || !t.impl()->storage || t.device() != device_ || !copyable_layout(t)) {
        off_why_ = "an input is " + std::string(!t.defined() ? "undefined" :
                                                t.device() != device_ ? "on another device" :
                                                "laid out with repeated elements");
        return outs;
      }
      sizes_.push_back(t.sizes());
      warm_storages_.push_back(t.impl()->storage);
    }
    warm_ = true;
    return outs;
  }

  bool same_sizes(const std::vector<Tensor>& inputs) const {
    if (inputs.size() != sizes_.size()) return false;
    for (size_t i = 0; i < inputs.size(); ++i)
      if (!inputs[i].defined() || inputs[i].sizes() != sizes_[i] ||
          inputs[i].device() != device_)
        return false;
    return true;
  }

  std::vector<const char*> in_place_addresses(const std::vector<Tensor>& inputs) const {
    std::vector<const char*> out(inputs.size(), nullptr);
    for (size_t i = 0; i < inputs.size(); ++i)
      if (in_place_[i]) out[i] = address_of(inputs[i]);
    return out;
  }

  bool matches(const Recording& r, const std::vector<Tensor>& inputs) const {
    for (size_t i = 0; i < inputs.size(); ++i)
      if (r.in_place[i] && r.in_place[i] != address_of(inputs[i])) return false;
    return true;
  }

  std::vector<Tensor> unrecorded(const std::vector<Tensor>& inputs, const char* why) const {
    g_unrecorded++;
    capture::log_line(capture::Log::CudaGraphs,
                      "a graph of " + std::to_string(g_->num_ops()) + " ops runs unrecorded: " +
                          why);
    return inner_->run(inputs);
  }

  // t's sizes, strides, offset and type, with no storage.
  static Tensor layout_only(const Tensor& t) {
    const TensorImpl& m = *t.impl();
    auto impl = std::make_shared<TensorImpl>();
    impl->sizes = m.sizes;
    impl->strides = m.strides;
    impl->offset = m.offset;
    impl->dtype = m.dtype;
    impl->device = m.device;
    impl->is_view = m.is_view;
    return Tensor(std::move(impl));
  }

  // Outputs of r's last replay the caller still holds get memory of their own.
  static void move_out_held(Recording& r) {
    for (auto& w : r.handed)
      if (auto s = w.lock()) {
        cuda_graph::move_out(*s);
        g_moved++;
      }
    r.handed.clear();
  }

  void copy_in(const Recording& r, const std::vector<Tensor>& inputs) const {
    NoGradGuard no_grad;
    for (size_t i = 0; i < inputs.size(); ++i)
      if (!r.in_place[i]) Tensor(r.buffers[i]).copy_(inputs[i]);
  }

  // After a run: copied inputs the graph writes get its contents back; inputs it writes count a
  // new version (as the graph's own run counts them).
  void write_back(const Recording& r, const std::vector<Tensor>& inputs) const {
    NoGradGuard no_grad;
    for (int i : mutated_) {
      const Tensor& t = inputs[size_t(i)];
      if (!r.in_place[size_t(i)]) Tensor(t).copy_(r.buffers[size_t(i)]);
      else t.impl()->storage->version++;
    }
  }

  std::vector<Tensor> hand_out(Recording& r, const std::vector<Tensor>& inputs) const {
    std::unordered_map<const Storage*, std::shared_ptr<Storage>> fresh;
    std::vector<Tensor> outs;
    outs.reserve(r.outputs.size());
    for (size_t k = 0; k < r.outputs.size(); ++k) {
      const Tensor& o = r.outputs[k];
      if (!o.defined() || r.alias[k] == -2) {
        outs.push_back(o);
        continue;
      }
      const TensorImpl& m = *o.impl();
      if (r.alias[k] >= 0) {
        const Tensor& in = inputs[size_t(r.alias[k])];
        outs.push_back(
            make_view(in, m.sizes, m.strides,
                      m.offset - r.passed_offset[size_t(r.alias[k])] + in.impl()->offset));
        continue;
      }
      std::shared_ptr<Storage>& s = fresh[m.storage.get()];
      if (!s) {
        s = std::make_shared<Storage>();
        s->data = m.storage->data;
        s->nbytes = m.storage->nbytes;
        s->device = m.storage->device;
        r.handed.push_back(s);
      }
      Tensor t = layout_only(o);
      t.impl()->storage = s;
      outs.push_back(std::move(t));
    }
    return outs;
  }

  std::vector<Tensor> replay(Recording& r, const std::vector<Tensor>& inputs) const {
    r.last_used = ++uses_;
    move_out_held(r);
    copy_in(r, inputs);
    cuda_graph::launch(*r.exec);
    g_replays++;
    write_back(r, inputs);
    return hand_out(r, inputs);
  }

  std::vector<Tensor> record(const std::vector<Tensor>& inputs) const {
    const int dev = device_.index;
    if (in_place_.empty()) {
      // Read in place: a tensor the warm-up call was given too (the same storage, alive since:
      // a parameter, a cache), and what lies in another recording's pool (a recorded forward's
      // saved activations, for a backward). A new tensor at a recycled address is copied.
      in_place_.resize(inputs.size());
      for (size_t i = 0; i < inputs.size(); ++i) {
        const std::shared_ptr<Storage>& st = inputs[i].impl()->storage;
        in_place_[i] = warm_storages_[i].lock() == st || cuda_graph::in_a_pool(st->data);
      }
      warm_storages_.clear();
    }
    Recording r;
    r.pool = cuda_graph::new_pool(dev);
    r.in_place = in_place_addresses(inputs);
    r.buffers.resize(inputs.size());
    r.passed_offset.resize(inputs.size());
    std::vector<Tensor> passed = inputs;
    {
      cuda_graph::PoolScope scope(r.pool.get());
      for (size_t i = 0; i < inputs.size(); ++i) {
        r.passed_offset[i] = inputs[i].impl()->offset;
        if (in_place_[i]) continue;
        const Tensor& t = inputs[i];
        Tensor base = make_tensor({std::max<int64_t>(span_of(t), 1)}, t.dtype(), device_);
        r.buffers[i] = make_view(base, t.sizes(), t.strides(), 0);
        r.passed_offset[i] = 0;
        passed[i] = r.buffers[i];
      }
    }
    copy_in(r, inputs);
    std::vector<Tensor> outs;
    try {
      cuda_graph::PoolScope scope(r.pool.get());
      cuda_graph::begin(dev);
      try {
        outs = inner_->run(passed);
      } catch (...) {
        cuda_graph::abort(dev);
        throw;
      }
      r.exec = cuda_graph::end(dev);
    } catch (const Error& e) {
      off_why_ = std::string("recording it failed: ") + e.what();
      warned_ = true;
      capture::warn("mode \"reduce-overhead\": a graph of " + std::to_string(g_->num_ops()) +
                    " ops runs without a CUDA graph from now on: " + off_why_);
      g_unrecorded++;
      return inner_->run(inputs);
    }
    g_recordings++;
    capture::log_line(capture::Log::CudaGraphs,
                      "recorded a graph of " + std::to_string(g_->num_ops()) + " ops as " +
                          std::to_string(cuda_graph::nodes(*r.exec)) + " CUDA graph nodes, " +
                          std::to_string(cuda_graph::pool_bytes(*r.pool) >> 20) +
                          " MiB in its pool");
    r.alias.assign(outs.size(), -2);
    for (size_t k = 0; k < outs.size(); ++k) {
      if (!outs[k].defined() || !outs[k].impl()->storage) continue;
      const Storage* s = outs[k].impl()->storage.get();
      for (size_t i = 0; i < passed.size() && r.alias[k] == -2; ++i)
        if (passed[i].impl()->storage.get() == s) r.alias[k] = int(i);
      if (r.alias[k] == -2 && cuda_graph::in_a_pool(s->data)) r.alias[k] = -1;
      // A view of an input keeps its layout only: holding the input would keep alive what the
      // caller means to free or reuse (a training step's random states, drawn into a buffer
      // reused once nothing holds it).
      if (r.alias[k] >= 0) outs[k] = layout_only(outs[k]);
    }
    r.outputs = std::move(outs);
    r.last_used = ++uses_;
    recordings_.push_back(std::move(r));
    Recording& rec = recordings_.back();
    cuda_graph::launch(*rec.exec);
    write_back(rec, inputs);
    return hand_out(rec, inputs);
  }

  std::shared_ptr<const capture::Runnable> inner_;
  std::shared_ptr<const graph::Graph> g_;
  Device device_;
  std::vector<int> mutated_;  // graph inputs the graph writes

  mutable std::mutex mu_;
  mutable std::string off_why_;  // set: runs unrecorded, for this reason
  mutable bool warned_ = false;
  mutable bool warm_ = false;
  mutable std::vector<Shape> sizes_;
  mutable std::vector<std::weak_ptr<Storage>> warm_storages_;
  mutable std::vector<bool> in_place_;  // per input, decided at the first recording
  mutable std::vector<const char*> last_miss_;
  mutable std::vector<Recording> recordings_;
  mutable int64_t uses_ = 0;
};

}  // namespace

std::shared_ptr<const capture::Runnable> record_cuda_graphs(
    std::shared_ptr<const capture::Runnable> inner, std::shared_ptr<const graph::Graph> g,
    Device device) {
  if (!cuda_graph::available()) return inner;
  return std::make_shared<CudaGraphed>(std::move(inner), std::move(g), device);
}

}  // namespace compiler
}  // namespace ember
