// The tracer: while a compiled function runs under capture, the dispatcher sends every op here.
// Ops become graph nodes over symbolic tensors; real tensors met on the way become graph
// inputs; in-place writes are recorded as new values (and as mutations of real tensors); a
// sync point or an op capture cannot record runs the pending segment, makes the symbolic
// tensors the program still holds real in place, and starts a new segment.
#include <algorithm>
#include <atomic>
#include <chrono>

#include "capture/capture.h"
#include "core/shape.h"
#include "ember/autograd.h"

namespace ember::capture {

namespace {

std::atomic<uint64_t> next_trace_id{1};

// What a symbolic TensorImpl stands for (TensorImpl::symbolic points at one).
struct SymInfo {
  uint64_t trace = 0;
  int segment = 0;
  graph::Value* value = nullptr;
  // Identity of the memory this tensor would live in: shared by views of one tensor; the real
  // Storage for views of real tensors.
  std::shared_ptr<void> alias;
};

SymInfo* sym_of(const TensorImpl* t) {
  return t && !t->storage ? static_cast<SymInfo*>(t->symbolic.get()) : nullptr;
}

const char* hint_for(const std::string& op) {
  if (op == "item" || op == "bool conversion")
    return "keep the value in a tensor: branch with where()/masked_fill() on tensors, or "
           "move the host-side decision outside the compiled function";
  if (op == "to_vector" || op == "data_ptr")
    return "read tensor data after the compiled function returns";
  if (op == "backward")
    return "compile the forward (the loss) and call backward() outside the compiled function";
  if (op == "printing a tensor")
    return "print outside the compiled function (or print shape_str(), which needs no data)";
  return "ops whose output shape depends on the data cannot be captured: use fixed-shape "
         "masks (where, masked_fill) or move this op outside the compiled function";
}

struct Segment {
  int index = 0;
  std::shared_ptr<graph::Graph> g = std::make_shared<graph::Graph>();
  std::unordered_map<const TensorImpl*, graph::Value*> values;    // real tensor -> current value
  std::unordered_map<const TensorImpl*, graph::Value*> original;  // real tensor -> its input
  std::vector<Tensor> inputs;  // real tensors in graph input order
  // Symbolic tensors given to the program; `detached` ones (detach()) get no autograd state.
  struct Handle {
    std::weak_ptr<TensorImpl> impl;
    bool detached = false;
  };
  std::vector<Handle> handed_out;
  std::vector<const TensorImpl*> mutated;  // real tensors written in place, first write order
  std::unordered_map<const TensorImpl*, Tensor> pristine;  // contents before the first write
  std::vector<Tensor> real_aliases;  // detach() handles of real tensors, mapped in `values`
  RngState rng_start;
  int num_captured = 0;
};

class Tracer : public CaptureHook {
 public:
  Tracer(const TraceConfig& cfg, detail::CallFrame& f, TraceResult& out)
      : cfg_(cfg), frame_(f), out_(out), id_(next_trace_id++) {}

  void begin() {
    out_.guards.add_arguments(frame_);
    out_.guards.set_globals();
    start_segment(0);
    // Arguments are the first graph inputs, one per defined slot, in slot order.
    arg_inputs_.assign(frame_.tensors.size(), -1);
    for (size_t i = 0; i < frame_.tensors.size(); ++i) {
      const Tensor& t = frame_.tensors[i];
      if (!t.defined()) continue;
      EMBER_CHECK(!t.is_symbolic(), "compile: argument ", i,
                  " is a symbolic tensor from another capture; pass real tensors");
      arguments_.emplace(t.impl(), int(i));
      arg_inputs_[i] = int32_t(seg_->inputs.size());
      std::string name = "arg";
      name += std::to_string(i);
      add_input(t, graph::InputKind::Argument, name,
                /*map=*/!seg_->values.count(t.impl()));
    }
    num_arg_inputs_ = seg_->inputs.size();
  }

  // The function returned: run the last segment, with its results as outputs.
  void finish() { flush(&frame_.outputs); }

  std::vector<Tensor> on_op(OpId op, std::span<const Tensor> inputs, const Attrs& attrs) override {
    const OpInfo& info = op_info(op);
    if (info.has(kDataDependentShape) || info.has(kNeedsBreak)) {
      std::string name(info.name);
      graph_break(name,
                  info.has(kDataDependentShape)
                      ? name + " has an output shape that depends on the input values"
                      : name + " cannot be captured",
                  current_call_site());
      HookScope off(nullptr);
      return dispatch(op, std::vector<Tensor>(inputs.begin(), inputs.end()), attrs);
    }
    // A view of a real tensor written in place in this segment must alias its storage: run
    // the pending writes first.
    if (info.kind == OpKind::View && !inputs.empty() && !inputs[0].is_symbolic() &&
        was_mutated(inputs[0].impl()))
      graph_break("view", "a view of a tensor written in place earlier in the same graph", {});
    prepare_real_inputs(inputs);
    std::vector<graph::Value*> vals;
    vals.reserve(inputs.size());
    for (const Tensor& t : inputs) vals.push_back(value_of(t));
    MetaList metas = op_impl(op).infer(inputs, attrs);
    graph::Node* n = add_node(op, vals, attrs, metas);
    const bool view = info.kind == OpKind::View;
    Device dev = inputs.empty() ? attrs.device : inputs[0].device();
    std::vector<Tensor> outs;
    outs.reserve(metas.size());
    for (size_t i = 0; i < metas.size(); ++i) {
      std::shared_ptr<void> alias = view ? alias_of(inputs[0]) : std::make_shared<char>();
      outs.push_back(make_symbolic(metas[i], dev, view, n->outputs[i], std::move(alias)));
    }
    return outs;
  }

  void on_inplace(OpId op, std::span<const Tensor> inputs, const Tensor& out,
                  const Attrs& attrs) override {
    if (!in_place_capturable(out)) {
      graph_break(std::string(op_name(op)) + "_", "in-place write into a view or an aliased tensor",
                  current_call_site());
      HookScope off(nullptr);
      dispatch_inplace(op, out, std::vector<Tensor>(inputs.begin(), inputs.end()), attrs);
      return;
    }
    prepare_real_inputs(inputs);
    const bool real = !out.is_symbolic();
    if (real) add_or_find_input(out);
    std::vector<graph::Value*> vals;
    for (const Tensor& t : inputs) vals.push_back(value_of(t));
    MetaList metas = op_impl(op).infer(inputs, attrs);
    EMBER_CHECK(metas.size() == 1 && metas[0].sizes == out.sizes(), op_name(op),
                "_: the result has shape ", shape_str(metas[0].sizes),
                ", which does not match the shape ", shape_str(out.sizes()),
                " of the tensor written in place");
    EMBER_CHECK(metas[0].dtype == out.dtype(), op_name(op), "_: result dtype ",
                dtype_name(metas[0].dtype), " cannot be written into a ", dtype_name(out.dtype()),
                " tensor in place");
    graph::Node* n = add_node(op, vals, attrs, metas);
    if (!real) {
      sym_of(out.impl())->value = n->outputs[0];
      return;
    }
    const TensorImpl* key = out.impl();
    if (!was_mutated(key)) {
      seg_->mutated.push_back(key);
      // A tensor the function made itself (not an argument) keeps its first contents, in case
      // it turns out to be local to the function (see flush). Only a replay plan needs them.
      if (cfg_.want_plan && !out_.broke && !arguments_.count(key)) {
        HookScope off(nullptr);
        NoGradGuard no_grad;
        seg_->pristine[key] = out.clone();
      }
    }
    seg_->values[key] = n->outputs[0];
  }

  void on_sync(const Tensor& t, const char* why, ember::SourceLocation loc) override {
    std::string op = why;
    if (ours(t)) {
      graph_break(op, op + " needs the values of a tensor computed in the graph", loc);
      return;
    }
    if (t.is_symbolic()) return;  // another capture's: the dispatcher reports the error
    // A real tensor with in-place writes pending in this segment: run them first.
    for (const TensorImpl* m : seg_->mutated) {
      if (m->storage == t.impl()->storage) {
        graph_break(op, op + " reads a tensor written in place in the graph", loc);
        return;
      }
    }
  }

  void on_module_state(const void* module, bool training) override {
    out_.guards.add_module(static_cast<const nn::Module*>(module), training);
  }

  // detach(): the handle gets a value of its own, an alias made by a node that records no
  // history, so gradients do not flow through it (sharing the original's value would let the
  // replayed graph differentiate through the detach). The detached handle of a real tensor (an
  // argument) reads the same value as it in the graph, instead of being lifted as a constant.
  void on_alias(const Tensor& alias, const Tensor& of) override {
    if (alias.is_symbolic() && !ours(alias)) return;
    graph::Value* src = alias.is_symbolic() ? sym_of(alias.impl())->value : value_of(of);
    Attrs a;
    a.shape = alias.sizes();
    a.strides = alias.strides();
    a.start = alias.storage_offset();
    const Tensor in[1] = {alias};
    MetaList metas = op_impl(OpId::as_strided).infer(std::span<const Tensor>(in, 1), a);
    graph::Node* n = add_node(OpId::as_strided, {src}, a, metas);
    n->no_grad = true;
    if (!alias.is_symbolic()) {
      seg_->values[alias.impl()] = n->outputs[0];
      seg_->real_aliases.push_back(alias);  // keeps the key's address from being reused
      return;
    }
    auto fresh = std::make_shared<SymInfo>(*sym_of(alias.impl()));
    fresh->value = n->outputs[0];
    alias.impl()->symbolic = std::move(fresh);
    seg_->handed_out.push_back({alias.impl_ptr(), true});
  }

  void on_grad(const Tensor& owner, const Tensor& grad) override {
    if (!owner.is_symbolic()) sources_.grad_read(owner, grad);
  }

 private:
  void start_segment(int index) {
    seg_ = std::make_unique<Segment>();
    seg_->index = index;
    seg_->g->set_dynamic_sizes(cfg_.dynamic_sizes);
    seg_->rng_start = get_rng_state();
  }

  graph::Node* add_node(OpId op, std::vector<graph::Value*> vals, const Attrs& attrs,
                        const MetaList& metas) {
    ember::SourceLocation l = current_call_site();
    graph::SourceLoc loc =
        l.line() ? graph::SourceLoc{l.file_name(), l.line()} : graph::SourceLoc{};
    graph::Node* n = seg_->g->add_node(op, std::move(vals), attrs, metas, loc);
    // Ops run under NoGradGuard (dropout's mask, a no-grad block in the function) replay
    // without history.
    n->no_grad = !is_grad_enabled();
    return n;
  }

  bool ours(const Tensor& t) const {
    const SymInfo* s = sym_of(t.impl());
    return s && s->trace == id_ && s->segment == seg_->index;
  }

  bool was_mutated(const TensorImpl* t) const {
    for (const TensorImpl* m : seg_->mutated)
      if (m == t) return true;
    return false;
  }

  std::shared_ptr<void> alias_of(const Tensor& t) const {
    if (const SymInfo* s = sym_of(t.impl())) return s->alias;
    return t.impl()->storage;
  }

  // Whether any symbolic tensor still held by the program, other than `except`, shares
  // memory identity `alias`.
  bool live_alias(const void* alias, const TensorImpl* except) const {
    for (const auto& h : seg_->handed_out) {
      std::shared_ptr<TensorImpl> p = h.impl.lock();
      if (!p || p.get() == except) continue;
      const SymInfo* s = sym_of(p.get());
      if (s && s->trace == id_ && s->segment == seg_->index && s->alias.get() == alias) return true;
    }
    return false;
  }

  // In-place writes are recorded only where no other handle can observe the old value.
  bool in_place_capturable(const Tensor& out) const {
    const TensorImpl* o = out.impl();
    if (o->is_view) return false;
    if (out.is_symbolic()) {
      if (!ours(out)) return false;
      const SymInfo* s = sym_of(o);
      if (live_alias(s->alias.get(), o)) return false;
      for (const Tensor& in : seg_->inputs)
        if (in.impl()->storage.get() == s->alias.get()) return false;
      return true;
    }
    for (const Tensor& in : seg_->inputs)
      if (in.impl() != o && in.impl()->storage == o->storage) return false;
    return !live_alias(o->storage.get(), nullptr);
  }

  // A real tensor not yet in the graph that shares memory with one written in place here
  // would read stale contents: run the pending writes first.
  void prepare_real_inputs(std::span<const Tensor> inputs) {
    if (seg_->mutated.empty()) return;
    for (const Tensor& t : inputs) {
      if (!t.defined() || t.is_symbolic() || seg_->values.count(t.impl())) continue;
      for (const TensorImpl* m : seg_->mutated) {
        if (m->storage == t.impl()->storage) {
          graph_break("read", "a tensor sharing memory with one written in place in the graph", {});
          return;
        }
      }
    }
  }

  graph::Value* add_input(const Tensor& t, graph::InputKind kind, const std::string& name,
                          bool map) {
    TensorMeta m{t.sizes(), t.strides(), t.storage_offset(), t.dtype()};
    if (const uint64_t marks = t.impl()->static_dims) {  // mark_static: flat dim positions
      int at = 0;
      for (const graph::Value* in : seg_->g->inputs()) at += int(in->meta.sizes.size());
      std::vector<int> fixed = seg_->g->static_dims();
      for (int d = 0; d < t.dim() && d < 64; ++d)
        if (marks >> d & 1) fixed.push_back(at + d);
      seg_->g->set_static_dims(std::move(fixed));
    }
    graph::Value* v = seg_->g->add_input(m, t.device(), kind, name);
    if (map) {
      seg_->values[t.impl()] = v;
      seg_->original[t.impl()] = v;
    }
    seg_->inputs.push_back(t);
    return v;
  }

  graph::Value* add_or_find_input(const Tensor& t) {
    auto it = seg_->values.find(t.impl());
    if (it != seg_->values.end()) return it->second;
    auto arg_slot = arguments_.find(t.impl());
    const bool arg = arg_slot != arguments_.end();
    // (appending avoids a GCC 12 -Wrestrict false positive)
    std::string name = arg ? "arg" : "c";
    name += std::to_string(arg ? arg_slot->second : seg_->num_captured++);
    return add_input(t, arg ? graph::InputKind::Argument : graph::InputKind::Captured, name, true);
  }

  graph::Value* value_of(const Tensor& t) {
    EMBER_CHECK(t.defined(), "compile: an op received an undefined tensor");
    if (t.is_symbolic()) {
      EMBER_CHECK(ours(t),
                  "compile: a symbolic tensor from another capture (another thread, "
                  "or a compiled call that failed) was used; only tensors made in "
                  "this call can be used while it is captured");
      return sym_of(t.impl())->value;
    }
    return add_or_find_input(t);
  }

  Tensor make_symbolic(const TensorMeta& m, Device dev, bool view, graph::Value* v,
                       std::shared_ptr<void> alias) {
    auto impl = std::make_shared<TensorImpl>();
    impl->sizes = m.sizes;
    impl->strides = view ? m.strides : contiguous_strides(m.sizes);
    impl->offset = view ? m.offset : 0;
    impl->dtype = m.dtype;
    impl->device = dev;
    impl->is_view = view;
    auto s = std::make_shared<SymInfo>();
    s->trace = id_;
    s->segment = seg_->index;
    s->value = v;
    s->alias = std::move(alias);
    impl->symbolic = std::move(s);
    seg_->handed_out.push_back({impl, false});
    return Tensor(std::move(impl));
  }

  void graph_break(const std::string& op, const std::string& reason, ember::SourceLocation loc) {
    GraphBreakInfo b{reason, op, break_location(loc), hint_for(op)};
    EMBER_CHECK(!cfg_.fullgraph, "compile(fullgraph=true): graph break in ", cfg_.name, " at ",
                b.location, ": ", b.reason, " (", b.op, "). Hint: ", b.hint);
    log_line(Log::GraphBreaks,
             cfg_.name + ": graph break at " + b.location + ": " + reason + " (" + op + ")");
    out_.broke = true;
    out_.breaks.push_back({std::move(b)});
    flush(nullptr);
  }

  static void become_real(TensorImpl& impl, const Tensor& t, bool detached) {
    EMBER_CHECK(impl.sizes == t.sizes() && impl.dtype == t.dtype(),
                "compile: internal error: a captured value has shape ", shape_str(t.sizes()), " ",
                dtype_name(t.dtype()), " but was traced as ", shape_str(impl.sizes), " ",
                dtype_name(impl.dtype));
    impl.storage = t.impl()->storage;
    impl.strides = t.strides();
    impl.offset = t.storage_offset();
    impl.is_view = t.impl()->is_view;
    if (t.impl()->autograd && !detached)
      impl.autograd = std::make_unique<AutogradMeta>(*t.impl()->autograd);
    impl.symbolic.reset();
  }

  // Runs the pending segment and makes the symbolic tensors still held real. `results` (the
  // function's return values) are outputs of the last segment.
  void flush(std::vector<Tensor>* results) {
    Segment& s = *seg_;
    // Each live handle and the graph output holding its value (one output per value).
    std::vector<std::pair<std::shared_ptr<TensorImpl>, bool>> live;
    std::vector<int32_t> live_out;
    std::vector<graph::Value*> outs;
    std::unordered_map<const graph::Value*, int32_t> out_of;
    auto output = [&](graph::Value* v) {
      auto [it, fresh] = out_of.emplace(v, int32_t(outs.size()));
      if (fresh) outs.push_back(v);
      return it->second;
    };
    for (const auto& h : s.handed_out) {
      std::shared_ptr<TensorImpl> p = h.impl.lock();
      const SymInfo* si = p ? sym_of(p.get()) : nullptr;
      if (!si || si->trace != id_ || si->segment != s.index) continue;
      live_out.push_back(output(si->value));
      live.emplace_back(std::move(p), h.detached);
    }
    std::vector<int32_t> result_index;
    if (results) {
      for (const Tensor& r : *results) {
        if (!r.defined()) {
          result_index.push_back(-1);
        } else if (r.is_symbolic()) {
          EMBER_CHECK(ours(r),
                      "compile: the function returned a symbolic tensor from another "
                      "capture");
          result_index.push_back(output(sym_of(r.impl())->value));
        } else if (auto a = arguments_.find(r.impl()); a != arguments_.end()) {
          // An argument returned (perhaps written in place): the same tensor, as in eager.
          result_index.push_back(-2 - a->second);
        } else {
          result_index.push_back(output(add_or_find_input(r)));
        }
      }
    }
    for (const TensorImpl* m : s.mutated) s.g->add_mutation(s.original.at(m), s.values.at(m));
    const bool empty = s.g->num_ops() == 0 && outs.empty() && s.mutated.empty();
    std::shared_ptr<const Runnable> runnable;
    if (!empty) {
      s.g->set_outputs(outs);
      // Removed random ops still reserve their draws at each run (graph.h), so the stream
      // stays where eager leaves it.
      s.g->eliminate_dead_code();
      // Work repeated with the same inputs (a mask or a position table each layer builds) is
      // done once. Not in a graph autograd differentiates: merged uses would sum their grads in
      // another order than eager (the training compile merges its backward's on its own).
      const bool differentiated =
          is_grad_enabled() && std::any_of(s.inputs.begin(), s.inputs.end(),
                                           [](const Tensor& t) { return t.requires_grad(); });
      if (!differentiated) s.g->eliminate_common_subexpressions();
      bool compiled = false;
      runnable = lookup_or_compile(*cfg_.backend, s.g, s.inputs, &compiled);
      if (cfg_.want_plan) out_.runnables.push_back(runnable);  // a new entry keeps them
      out_.ops_per_segment.push_back(int64_t(s.g->num_ops()));
      if (compiled) {
        out_.compiles++;
        if (runnable->shares_compiled_code()) out_.shared_compiles++;
        if (runnable->defers_build()) out_.deferred_compiles++;
        out_.ops_per_compile.push_back(int64_t(s.g->num_ops()));
      } else {
        out_.segment_hits++;
      }
      if (cfg_.want_plan || (compiled && log_enabled(Log::Graph))) {
        std::string text = s.g->str();
        if (compiled)
          log_line(Log::Graph, cfg_.name + ": graph " + std::to_string(s.index) + " (" +
                                   std::to_string(s.g->num_ops()) + " ops)\n" + text);
        if (cfg_.want_plan) out_.graphs.push_back(std::move(text));
      }
      // Replay the segment's random ops from where tracing started them, then leave the
      // generator where eager execution would have (ops run eagerly at a break may already
      // have drawn past the segment).
      RngState now = get_rng_state();
      std::vector<Tensor> real;
      {
        HookScope off(nullptr);
        set_rng_state(s.rng_start);
        auto t0 = std::chrono::steady_clock::now();
        try {
          RebindsIgnored quiet;
          real = runnable->run(s.inputs);
        } catch (...) {
          set_rng_state(now);
          throw;
        }
        out_.run_seconds +=
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        set_rng_state(now);
      }
      for (size_t i = 0; i < live.size(); ++i)
        become_real(*live[i].first, real[size_t(live_out[i])], live[i].second);
      if (results && !out_.broke && cfg_.want_plan) {
        auto plan = std::make_unique<ReplayPlan>();
        plan->graph = s.g;
        plan->runnable = runnable;
        plan->arg_inputs = arg_inputs_;
        plan->outputs = result_index;
        plan->out_lengths = frame_.out_lengths;
        std::vector<const Storage*> constants;
        for (size_t i = num_arg_inputs_; i < s.inputs.size(); ++i) {
          const Tensor& c = s.inputs[i];
          Source src = sources_.source_of(c, s.g->input_names()[i], *results);
          Tensor pristine;
          if (src.kind == Source::Constant) {
            // Made by the function itself: each replay starts from its first contents, as
            // each eager call would, and hands out copies of it.
            auto it = s.pristine.find(c.impl());
            if (it != s.pristine.end())
              pristine = it->second;
            else
              constants.push_back(c.impl()->storage.get());
          }
          plan->pristine.push_back(pristine);
          out_.guards.add_source(std::move(src), /*as_input=*/true);
        }
        plan->fresh.assign(real.size(), false);
        for (size_t k = 0; k < real.size(); ++k)
          for (const Storage* m : constants)
            if (real[k].impl()->storage.get() == m) plan->fresh[k] = true;
        if (!s.mutated.empty()) out_.guards.set_alias_pattern(s.inputs);
        out_.plan = std::move(plan);
      }
    } else if (results && !out_.broke && cfg_.want_plan) {
      // Nothing captured: a replay returns the arguments the function returned (if any).
      auto plan = std::make_unique<ReplayPlan>();
      plan->arg_inputs = arg_inputs_;
      plan->outputs = result_index;
      plan->out_lengths = frame_.out_lengths;
      out_.plan = std::move(plan);
    }
    start_segment(s.index + 1);
  }

  const TraceConfig& cfg_;
  detail::CallFrame& frame_;
  TraceResult& out_;
  uint64_t id_;
  std::unique_ptr<Segment> seg_;
  std::unordered_map<const TensorImpl*, int> arguments_;  // argument tensor -> first slot
  SourceFinder sources_{arguments_, out_.guards};
  std::vector<int32_t> arg_inputs_;
  size_t num_arg_inputs_ = 0;
};

}  // namespace

std::vector<Tensor> ReplayPlan::run(detail::CallFrame& f) const {
  std::vector<Tensor> in;
  in.reserve(f.tensors.size() + f.captured.size());
  for (size_t i = 0; i < arg_inputs.size(); ++i)
    if (arg_inputs[i] >= 0) in.push_back(f.tensors[i]);
  for (size_t i = 0; i < f.captured.size(); ++i)
    in.push_back(pristine[i].defined() ? pristine[i].clone() : f.captured[i]);
  std::vector<Tensor> outs;
  if (runnable) {
    RebindsIgnored quiet;
    outs = runnable->run(in);
  }
  for (size_t k = 0; k < fresh.size(); ++k)
    if (fresh[k]) outs[k] = outs[k].clone();
  f.outputs.clear();
  f.outputs.reserve(outputs.size());
  for (int32_t k : outputs)
    f.outputs.push_back(k >= 0 ? outs[size_t(k)] : k == -1 ? Tensor() : f.tensors[size_t(-2 - k)]);
  f.out_lengths = out_lengths;
  return outs;
}

TraceResult trace(const TraceConfig& cfg, detail::CallFrame& frame,
                  detail::FunctionRef<void(detail::CallFrame&)> body) {
  auto t0 = std::chrono::steady_clock::now();
  TraceResult r;
  Tracer t(cfg, frame, r);
  t.begin();
  {
    HookScope on(&t);
    body(frame);
  }
  t.finish();
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

}  // namespace ember::capture
