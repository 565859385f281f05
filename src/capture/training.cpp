// Running a partitioned training graph: the forward graph runs with grad mode off, and one
// autograd node on the eager tape holds the saved tensors and runs the compiled backward graph
// when the engine reaches it.
#include <future>
#include <mutex>

#include "autograd/function.h"
#include "autograd/node.h"
#include "capture/joint.h"
#include "core/generator.h"
#include "core/make_tensor.h"
#include "ember/autograd.h"
#include "ember/ops.h"
#include "graph/graph.h"
#include "kernels/device_memory.h"

namespace ember::capture {

namespace {

// What one compiled graph needs at run time, shared by its calls and their backward nodes.
struct TrainingPlan {
  Partition part;
  std::shared_ptr<const Runnable> forward, backward;
  std::string name;  // for errors: "a compiled graph (12 forward ops)"
};

// The hoisted random graph's outputs, drawn in its node order. Where every node is an
// rng_state of one device (the draws a GPU graph's dropout and attention read under capture),
// their {seed, offset} pairs are written on the host and moved in one copy into an int64
// [N, 2] tensor, each output a row of it: one transfer a call where interpreting the graph runs
// a kernel a node. The tensor is one of the callable's own, reused once nothing holds its rows
// any more (the backward that saved them has run), so that a training loop's calls pass the
// forward graph the same memory each step, which a reduce-overhead recording then reads in
// place (compiler/cuda_graphed.h) instead of copying each row in; while the last call's rows
// are held (a second forward before the first's backward), a call takes another. Else the
// graph is interpreted (whichever it is, decided once).
class HoistedDraws {
 public:
  explicit HoistedDraws(const graph::Graph* rng) : rng_(rng), states_(rng && only_states(*rng)) {}

  std::vector<Tensor> draw() const {
    const graph::Graph& rng = *rng_;
    if (!states_) return rng.interpret({});
    const auto& nodes = rng.nodes();
    const std::vector<RandomRange> ranges = rng.reserve_draws();
    const int64_t count = int64_t(nodes.size());
    const Device device = nodes[0]->attrs.device;
    // For a GPU, in page-locked memory: a copy from pageable memory would wait for the device
    // to finish the work queued before it.
    Tensor host;
    if (device.type != DeviceType::CPU) {
      if (auto pinned = device_memory::new_pinned_storage(size_t(2 * count) * sizeof(int64_t))) {
        host = make_tensor({0}, DType::Int64);
        host.impl()->storage = std::move(pinned);
        host = make_view(host, {count, 2}, {2, 1}, 0);
      }
    }
    if (!host.defined()) host = empty({count, 2}, TensorOptions(DType::Int64));
    int64_t* p = static_cast<int64_t*>(host.impl()->data());
    for (int64_t i = 0; i < count; ++i) {
      p[2 * i] = int64_t(ranges[size_t(i)].seed);
      p[2 * i + 1] = int64_t(ranges[size_t(i)].offset);
    }
    const Tensor all = free_buffer(count, device);
    {
      NoGradGuard no_grad;
      Tensor(all).copy_(host);
    }
    std::vector<Tensor> rows;
    rows.reserve(nodes.size());
    for (int64_t i = 0; i < count; ++i) rows.push_back(all.select(0, i));
    return rows;
  }

 private:
  // Whether every node is an rng_state of one device, each an output in order.
  static bool only_states(const graph::Graph& rng) {
    const auto& nodes = rng.nodes();
    const std::vector<graph::Value*>& outs = rng.outputs();
    bool states = !nodes.empty() && outs.size() == nodes.size();
    for (size_t i = 0; states && i < nodes.size(); ++i) {
      const graph::Node& n = *nodes[i];
      states = n.op == OpId::rng_state && n.inputs.empty() && n.outputs.size() == 1 &&
               outs[i] == n.outputs[0] && n.attrs.device == nodes[0]->attrs.device;
    }
    return states;
  }

  static constexpr size_t kKept = 4;  // buffers kept; past them a held call takes a new one

  // A kept [count, 2] buffer on `device` that nothing but this list refers to (the rows of its
  // last call dropped), else a new one (kept while fewer than kKept are).
  Tensor free_buffer(int64_t count, Device device) const {
    std::lock_guard<std::mutex> lock(mu_);
    // Free: no view of it left (its rows hold its storage) and no handle but this list's.
    for (const Tensor& b : buffers_)
      if (b.impl_ptr().use_count() == 1 && b.impl()->storage.use_count() == 1 &&
          b.device() == device && b.size(0) == count)
        return b;
    TensorOptions o(DType::Int64);
    o.device = device;
    Tensor b = empty({count, 2}, o);
    if (buffers_.size() < kKept) buffers_.push_back(b);
    return b;
  }

  const graph::Graph* rng_;  // the plan's, which outlives this
  const bool states_;
  mutable std::mutex mu_;
  mutable std::vector<Tensor> buffers_;
};

struct CompiledBackward : autograd::Node {
  std::shared_ptr<const TrainingPlan> plan;
  std::vector<autograd::SavedTensor> saved;  // saved values, then saved primals
  bool released = false;

  std::string name() const override { return "CompiledGraphBackward"; }
  void release() override {
    saved.clear();
    released = true;
  }

  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override {
    const char* what = plan->name.c_str();
    EMBER_CHECK(!released, "backward of ", what,
                ": trying to backward through the graph a second time, but its saved tensors "
                "were freed by the first backward; pass retain_graph=true to the first one");
    bool any = false;
    for (const Tensor& g : grads) any |= g.defined();
    if (!any) return std::vector<Tensor>(next_edges.size());
    std::vector<Tensor> in;
    in.reserve(saved.size() + grads.size());
    for (size_t i = 0; i < saved.size(); ++i)
      in.push_back(saved[i].unpack(
          what, i, i < plan->part.num_saved_values ? "saved value" : "saved input"));
    for (size_t k = 0; k < grads.size(); ++k) {
      const TensorMeta& m = output_meta[k];
      Tensor g = grads[k];
      // An output nobody differentiated: a zero grad (the graph takes every output's grad).
      if (!g.defined()) g = zeros(m.sizes, TensorOptions(m.dtype));
      if (g.dtype() != m.dtype) g = g.to(m.dtype);
      in.push_back(std::move(g));
    }
    NoGradGuard no_grad;
    RebindsIgnored quiet;  // the graph's buffers, not handles the user reads
    if (!released_after_apply) return plan->backward->run(in);
    // The saved tensors will not be needed again: the backward graph takes them over and frees
    // each after its last reader, as eager autograd frees a node's saved tensors after its
    // backward.
    saved.clear();
    released = true;
    return plan->backward->run_consuming(std::move(in));
  }
};

class TrainingRunnable : public Runnable {
 public:
  explicit TrainingRunnable(std::shared_ptr<const TrainingPlan> plan)
      : plan_(std::move(plan)), draws_(plan_->part.rng.get()) {}

  std::vector<Tensor> run(const std::vector<Tensor>& inputs) const override {
    const Partition& p = plan_->part;
    const bool record = is_grad_enabled();
    std::vector<Tensor> outs;
    {
      NoGradGuard no_grad;
      std::vector<Tensor> in = inputs;
      if (p.rng) {
        std::vector<Tensor> r = draws_.draw();
        in.insert(in.end(), r.begin(), r.end());
      }
      outs = plan_->forward->run(in);
      if (p.trailing_draws) reserve_random(p.trailing_draws, "graph replay");
    }
    outs.resize(p.num_outputs + p.num_saved_values);
    if (!record) {
      outs.resize(p.num_outputs);
      return outs;
    }
    auto node = std::make_shared<CompiledBackward>();
    node->plan = plan_;
    node->sequence_nr = autograd::next_sequence_nr();
    for (int i : p.grad_inputs)
      node->next_edges.push_back(autograd::gradient_edge(inputs[size_t(i)]));
    node->saved.resize(p.num_saved_values + p.saved_primals.size());
    for (size_t s = 0; s < p.num_saved_values; ++s)
      node->saved[s].save(autograd::alias_without_history(outs[p.num_outputs + s]));
    for (size_t s = 0; s < p.saved_primals.size(); ++s)
      node->saved[p.num_saved_values + s].save(
          autograd::alias_without_history(inputs[size_t(p.saved_primals[s])]));
    outs.resize(p.num_outputs);
    for (size_t k = 0; k < p.diff_outputs.size(); ++k) {
      Tensor& t = outs[size_t(p.diff_outputs[k])];
      node->output_meta.push_back(TensorMeta{t.sizes(), {}, 0, t.dtype()});
      AutogradMeta& m = t.impl()->autograd_meta();
      m.requires_grad = true;
      m.grad_fn = node;
      m.output_nr = uint32_t(k);
    }
    return outs;
  }
  bool shares_compiled_code() const override {
    return plan_->forward->shares_compiled_code() && plan_->backward->shares_compiled_code();
  }
  bool defers_build() const override {
    return plan_->forward->defers_build() || plan_->backward->defers_build();
  }

 private:
  std::shared_ptr<const TrainingPlan> plan_;
  HoistedDraws draws_;
};

// A graph none of whose outputs needs grad: the forward alone, with grad mode off (so the
// compiler runs it) after the draws it would make.
class NoHistoryRunnable : public Runnable {
 public:
  explicit NoHistoryRunnable(std::shared_ptr<const Runnable> r) : r_(std::move(r)) {}
  std::vector<Tensor> run(const std::vector<Tensor>& inputs) const override {
    NoGradGuard no_grad;
    return r_->run(inputs);
  }
  bool shares_compiled_code() const override { return r_->shares_compiled_code(); }
  bool defers_build() const override { return r_->defers_build(); }

 private:
  std::shared_ptr<const Runnable> r_;
};

}  // namespace

std::shared_ptr<const Runnable> compile_training(Backend& be, std::shared_ptr<const graph::Graph> g,
                                                 const std::vector<bool>& input_rg,
                                                 std::string* why) {
  JointGraph j;
  auto plan = std::make_shared<TrainingPlan>();
  try {
    if (!build_joint(*g, input_rg, &j, why)) return nullptr;
    if (j.diff_outputs.empty()) return std::make_shared<NoHistoryRunnable>(be.compile(g));
    plan->part = partition_joint(j, !be.bitwise_eager());
  } catch (const std::exception& e) {
    // A grad formula that fails on these shapes fails the same way under per-op autograd, at
    // backward time, as it would in eager mode.
    *why = std::string("tracing the backward failed: ") + e.what();
    return nullptr;
  }
  Partition& p = plan->part;
  for (const graph::Mutation& m : g->mutations())
    for (int i : p.saved_primals)
      if (m.target->input_index == i) {
        *why = "the backward reads input " + std::to_string(i) + " (\"" +
               g->input_names()[size_t(i)] + "\"), which the graph writes in place";
        return nullptr;
      }
  plan->name = "a compiled graph (" + std::to_string(g->num_ops()) + " forward ops)";
  if (log_enabled(Log::Training))
    log_line(Log::Training,
             "joint graph: " + std::to_string(j.num_forward_nodes) + " forward ops, " +
                 std::to_string(j.g->num_ops() - j.num_forward_nodes) +
                 " backward ops traced; partition: " + std::to_string(p.num_saved_values) +
                 " saved values (" + std::to_string(p.saved_bytes) + " bytes) + " +
                 std::to_string(p.saved_primals.size()) + " saved inputs, " +
                 std::to_string(p.recomputed) + " ops recomputed, backward graph " +
                 std::to_string(p.backward->num_ops()) + " ops" +
                 (p.rng ? ", " + std::to_string(p.rng->num_ops()) + " random ops hoisted" : "") +
                 "\nforward graph:\n" + p.forward->str() + "backward graph:\n" + p.backward->str());
  // The two graphs build side by side (a code-generating backend runs a compiler process for
  // each: on two cores this nearly halves a cold compile).
  auto backward = std::async(std::launch::async, [&be, g = p.backward] { return be.compile(g); });
  plan->forward = be.compile(p.forward);
  plan->backward = backward.get();
  return std::make_shared<TrainingRunnable>(std::move(plan));
}

}  // namespace ember::capture
