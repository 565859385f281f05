// Internals of compile(): backends, guards, the tracer and the caches (see include/ember/compile.h
// for the public side and docs/compiling.md for the behaviour).
#pragma once
#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "dispatch/dispatcher.h"
#include "ember/compile.h"
#include "ember/ops.h"
#include "ember/source_location.h"
#include "graph/graph.h"

namespace ember::capture {

// ---- backends: a captured graph in, something runnable out ----
class Runnable {
 public:
  virtual ~Runnable() = default;
  // Runs the graph on real inputs (in graph input order); applies its mutations.
  virtual std::vector<Tensor> run(const std::vector<Tensor>& inputs) const = 0;
  // The same, taking the inputs over: a runnable may drop each one as soon as nothing later
  // reads it, so memory held only by the inputs is freed during the run (a compiled backward
  // frees saved activations as it goes, as eager autograd does).
  virtual std::vector<Tensor> run_consuming(std::vector<Tensor>&& inputs) const {
    return run(inputs);
  }
  // Whether its code was built for another graph of the same program at other sizes and is
  // shared with it (then its compile built nothing new).
  virtual bool shares_compiled_code() const { return false; }
  // Whether it built nothing yet: the first graph of its form at varying sizes, interpreted
  // at its first call (compiler/compiled_graph.h).
  virtual bool defers_build() const { return false; }
};
class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  virtual std::shared_ptr<const Runnable> compile(std::shared_ptr<const graph::Graph> g) = 0;
  // Whether the backend gives eager's results bit for bit. Graphs for such a backend are not
  // rearranged in ways that change rounding (training.cpp).
  virtual bool bitwise_eager() const { return false; }
  // Whether the callables that use a compiled graph own it: the segment cache then shares it
  // between callables only while one of them holds it (it keeps resources, such as the device
  // memory of recorded CUDA graphs, that must go when they do).
  virtual bool held_by_callables() const { return false; }
};
// "eager" and whatever else was registered; throws for an unknown name.
Backend& backend(const std::string& name);
void register_backend(std::unique_ptr<Backend> b);

// ---- logs (EMBER_LOGS=graph_breaks,recompiles,guards,graph,training,dynamic,cudagraphs,
// read once) ----
enum class Log { GraphBreaks, Recompiles, Guards, Graph, Training, Dynamic, CudaGraphs };
bool log_enabled(Log what);
void log_line(Log what, const std::string& text);
// Always printed (once per callable by the caller): the recompile limit, unsupported options.
void warn(const std::string& text);
// "file.cpp:12" from a source location (the file's base name), "<unknown>" for line 0.
std::string loc_str(const ember::SourceLocation& loc);
// Where a graph break at C++ call site `loc` is reported: the front end's position when a
// detail::SourcePositionScope on this thread gives one, else loc_str(loc).
std::string break_location(const ember::SourceLocation& loc);

// ---- guards: what a cache entry assumed, as a flat list of cheap checks ----
struct TensorCheck {
  int32_t slot = 0;  // argument position among the frame's tensors
  bool defined = true;
  DType dtype = DType::Float32;
  Device device;
  bool requires_grad = false;
  bool contiguous = true;
  int32_t ndim = 0;
  int32_t dims_at = 0;  // sizes at dims_[dims_at ..], then strides when not contiguous
};
// Where a replay finds a tensor the function read besides its arguments (sources.cpp). A
// replay must read the tensor the function would read if it ran now, so nothing the function
// reached through its captures is frozen unless the function made it itself.
struct Source {
  enum Kind : uint8_t {
    Constant,  // made by the function while tracing and held by nothing else: kept (strong)
    Captured,  // reached through a lambda capture, a global or a module: held weakly; the guard
               // fails (the function is traced again) once it was freed, a handle holding it
               // was assigned another tensor, or the module slot it sat in holds another one
    GradOf,    // `owner.grad()`: re-read from the owner on each call
  };
  Kind kind = Constant;
  Tensor constant;
  std::weak_ptr<TensorImpl> weak;
  uint32_t rebinds = 0;
  std::weak_ptr<const void> module_alive;  // Captured from a module's parameter or buffer slot
  const Tensor* slot = nullptr;
  int32_t owner_arg = -1;     // GradOf: the argument slot whose grad, or
  int32_t owner_source = -1;  // the source whose grad
  std::string name;           // "c0", "fc.weight", "grad of arg0" (guard failures, logs)
  // What the trace assumed of the tensor found there.
  DType dtype = DType::Float32;
  Device device;
  bool requires_grad = false;
  Shape sizes, strides;
  int64_t offset = 0;
  // The tensor this source gives for a call (undefined when it is gone); `found` holds the
  // tensors of the sources before this one.
  Tensor resolve(const detail::CallFrame& f, const std::vector<Tensor>& found) const;
  std::string describe() const;  // "captured tensor c0 f32[3]"
};

struct ModuleCheck {
  const nn::Module* module = nullptr;
  bool training = false;
};

class Guards {
 public:
  void add_arguments(const detail::CallFrame& f);
  // A tensor the replay reads besides the arguments, and where it comes from. `as_input`: the
  // resolved tensor is the next captured graph input (f.captured); otherwise only a parent of
  // another source (a grad's owner).
  void add_source(Source s, bool as_input);
  int32_t num_sources() const { return int32_t(sources_.size()); }
  // Graph inputs (arguments, then captured tensors) that share memory are guarded to share it
  // in the same pattern on later calls; only needed when the graph writes into an input.
  void set_alias_pattern(const std::vector<Tensor>& graph_inputs);
  void add_module(const nn::Module* m, bool training);
  void set_globals();  // grad mode, default float dtype
  // The module wrapper's root: parameter and buffer identities.
  void add_module_identity(const std::shared_ptr<const nn::Module>& m);
  // True when every check passes; otherwise fills `why` (when given) with the first failure,
  // e.g. "input 0 size[1]: expected 64, got 128".
  // `passed` (when given) counts the checks that passed before the first failure, so that a
  // miss can be explained against the closest entry.
  // `size_miss` (when given) names the tensor argument slot and dim of a failure on a size,
  // and is {-1, -1} for any other failure.
  struct SizeMiss {
    int slot = -1, dim = -1;
  };
  bool check(const detail::CallFrame& f, std::string* why, int* passed = nullptr,
             SizeMiss* size_miss = nullptr) const;
  // True once a tensor the entry reads through a capture was freed or rebound: its check can
  // never pass again, so the entry is dropped instead of counting against the recompile limit.
  bool is_dead() const;
  std::string str() const;  // every guard, one a line (EMBER_LOGS=guards)

 private:
  std::vector<TensorCheck> tensors_;
  std::vector<std::pair<int32_t, int32_t>> same_;  // argument slots holding one tensor
  std::vector<detail::ScalarArg> scalars_;
  std::vector<Source> sources_;
  std::vector<int32_t> source_inputs_;  // indices of the sources that are graph inputs
  std::vector<int32_t> alias_labels_;   // per graph input: first input sharing its memory
  std::vector<ModuleCheck> modules_;
  std::shared_ptr<const nn::Module> root_;
  std::vector<TensorImpl*> root_tensors_;
  std::vector<int64_t> dims_;
  bool grad_mode_ = true;
  DType default_dtype_ = DType::Float32;
  std::optional<DType> autocast_;  // the autocast scope's dtype at trace time
};

// Decides, when a trace ends, the source of each real tensor it lifted besides the arguments
// (sources.cpp). Parents of grads are added to `guards` first, as non-input sources.
class SourceFinder {
 public:
  SourceFinder(const std::unordered_map<const TensorImpl*, int>& arguments, Guards& guards)
      : arguments_(arguments), guards_(guards) {}
  // The traced code read `owner.grad()` and got `grad`.
  void grad_read(const Tensor& owner, const Tensor& grad);
  // `results`: what the function returned (they hold references of their own).
  Source source_of(const Tensor& t, const std::string& name, const std::vector<Tensor>& results);

 private:
  struct ModuleSlotRef {
    const Tensor* slot;
    std::weak_ptr<const void> alive;
    std::string name;
  };
  const ModuleSlotRef* module_slot(const TensorImpl* t);

  const std::unordered_map<const TensorImpl*, int>& arguments_;  // argument -> first slot
  Guards& guards_;
  // A grad read while tracing -> (that grad, whose grad it is).
  std::unordered_map<const TensorImpl*, std::pair<Tensor, Tensor>> grad_owner_;
  bool slots_built_ = false;
  std::unordered_map<const TensorImpl*, ModuleSlotRef> slots_;  // built on first use
};

// ---- the segment cache, shared by every callable: structural hash + input metadata ----
struct SegmentKey {
  std::string backend;
  size_t hash = 0;
  std::vector<bool> requires_grad;  // per graph input
};
// Returns the compiled form of g (compiling it on a miss; `compiled` says which happened).
std::shared_ptr<const Runnable> lookup_or_compile(Backend& be,
                                                  std::shared_ptr<const graph::Graph> g,
                                                  const std::vector<Tensor>& inputs,
                                                  bool* compiled);
void clear_segment_cache();

// ---- what a trace produced ----
struct BreakRecord {
  GraphBreakInfo info;
};

// A graph that replays the whole function: inputs are the arguments then the captured tensors.
// The captured graph inputs come from the guards' sources (CallFrame::captured).
struct ReplayPlan {
  std::shared_ptr<const graph::Graph> graph;
  std::shared_ptr<const Runnable> runnable;
  std::vector<int32_t> arg_inputs;  // per argument slot: its graph input, or -1 (undefined)
  std::vector<Tensor> pristine;     // per captured: initial contents when the graph mutates a
                                    // tensor the function created itself (cloned per replay)
  std::vector<bool> fresh;          // per graph output: shares memory with a tensor the function
                                    // created itself, so each replay returns a copy
  // Per result tensor: a graph output index; -1: undefined; -2 - i: argument slot i itself.
  std::vector<int32_t> outputs;
  std::vector<int64_t> out_lengths;
  std::vector<Tensor> run(detail::CallFrame& f) const;
};

struct TraceResult {
  bool broke = false;
  Guards guards;
  std::unique_ptr<ReplayPlan> plan;  // when the function never broke
  // Each segment's compiled graph, in order, from a first trace (want_plan): a callable whose
  // function breaks keeps them (see Backend::held_by_callables).
  std::vector<std::shared_ptr<const Runnable>> runnables;
  std::vector<BreakRecord> breaks;
  std::vector<int64_t> ops_per_segment;
  std::vector<std::string> graphs;
  int64_t compiles = 0;
  int64_t shared_compiles = 0;  // of which served by code built for other sizes
  int64_t deferred_compiles = 0;  // of which built nothing yet (Runnable::defers_build)
  int64_t segment_hits = 0;
  std::vector<int64_t> ops_per_compile;
  double seconds = 0;      // the whole trace
  double run_seconds = 0;  // of which running the captured segments
};

struct TraceConfig {
  Backend* backend = nullptr;
  bool fullgraph = false;
  bool want_plan = true;  // first trace: build a replay plan if the function never breaks
  std::string name;
  bool dynamic_sizes = false;  // the graphs are marked so (graph::Graph::dynamic_sizes)
};

// Runs body(frame) under capture on this thread and returns what was captured; the frame's
// outputs hold the (now real) results.
TraceResult trace(const TraceConfig& cfg, detail::CallFrame& frame,
                  detail::FunctionRef<void(detail::CallFrame&)> body);

}  // namespace ember::capture
