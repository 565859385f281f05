// ember::compile: capture ordinary C++ code that calls ember ops into graphs, guard what the
// capture assumed, cache the result and replay it; ember::explain reports what was captured.
// The templates here only flatten arguments and results; the work is in src/capture/.
#pragma once
#include <bit>
#include <cstdint>
#include <functional>
#include <iosfwd>
#include <memory>
#include <optional>
#include "ember/source_location.h"
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "ember/nn.h"
#include "ember/tensor.h"

namespace ember {

struct CompileOptions {
  // "compiler": fuse the captured graphs into generated C++ kernels (src/compiler; without a
  // C++ compiler on the machine, graphs run as under "eager", with one warning).
  // "eager": interpret the captured graphs through the eager kernels (checks capture alone).
  std::string backend = "compiler";
  // Turn the first graph break into an ember::Error naming the op and its source location.
  bool fullgraph = false;
  // Every size is traced and guarded on its own. Unset: once a size guard misses, graphs of
  // the callable at different sizes share kernels built over symbolic sizes (docs/compiling.md,
  // "Sizes that vary"); true: from the first call; false: every size is built on its own.
  std::optional<bool> dynamic;
  // Cache entries per callable (not counting those whose graphs all reused code shared over
  // sizes); a guard miss past it runs the function eagerly from then on.
  int recompile_limit = 8;
  // "default", or "reduce-overhead": on a GPU, each compiled graph's run is recorded as a CUDA
  // graph after its first call and replayed as one launch (docs/compiling.md, "CUDA graphs").
  // Inputs not read in place are copied in; outputs live in the recording's memory until the
  // next replay, which first moves those still held elsewhere. Graphs on the CPU, and graphs
  // that draw random numbers, run as in "default". Applies to the "compiler" backend.
  std::string mode = "default";
  // Shown in logs and explain output (default: the file:line where compile() was called).
  std::string name;
  // Tensors the function reads besides its arguments (MLX's `inputs=`), fetched anew on every
  // call and treated exactly like extra arguments: guarded, never frozen into a replay, and
  // written back when the function updates them in place. Tensors a lambda captures are also
  // re-read on replay when they can be (docs/compiling.md, "What a replay assumes"); `state`
  // makes it explicit and costs nothing to check.
  std::function<std::vector<Tensor>()> state;
};

// Hints for compiled callables about the sizes of one tensor, before it is passed (PyTorch's
// torch._dynamo.mark_dynamic / mark_static). mark_dynamic: dim `dim` of `t` will vary, so a
// callable given `t` shares code over symbolic sizes from its first call instead of after its
// first size guard miss (CompileOptions::dynamic unset). mark_static: a guard miss on that dim
// recompiles for the new size without making the callable's sizes dynamic, and code shared
// over sizes never makes that dim a symbol. The marks belong to this tensor (not to views or
// copies of it); a negative dim counts from the end.
void mark_dynamic(const Tensor& t, int64_t dim);
void mark_static(const Tensor& t, int64_t dim);

// Process-wide counters of mode "reduce-overhead" (tests and benchmarks read them): graphs
// recorded, replays launched, runs of such graphs without a recording (warm-up calls excluded),
// and outputs moved out of a recording's memory because they were still held at the next replay;
// and the device memory the recordings alive now keep reserved in their pools (the mode's memory
// cost: it goes back to the allocator's cache when the callables holding them are destroyed);
// and steps recorded on a side branch (a weight's grad beside the input grads, run at once).
struct CudaGraphCounters {
  int64_t recordings = 0, replays = 0, unrecorded_runs = 0, moved_outputs = 0;
  int64_t pool_bytes = 0;
  int64_t side_steps = 0;
};
// The counters so far (all zero in a build without CUDA or where nothing was recorded).
CudaGraphCounters cuda_graph_counters();

// Counters of one compiled callable (tests assert them).
struct CompileStats {
  int64_t calls = 0;
  int64_t traces = 0;              // runs of the C++ function under capture
  int64_t compiles = 0;            // graphs handed to the backend (segment cache misses)
  int64_t shared_compiles = 0;     // of which served by code built for other sizes (no build)
  int64_t deferred_compiles = 0;   // of which the first of their form at varying sizes: run
                                   // interpreted, built only if called again
  int64_t recompiles = 0;          // traces caused by a guard miss after the first entry
  int64_t breaks = 0;              // graph breaks met, over all runs
  int64_t cache_hits = 0;          // calls whose guards matched a cache entry
  int64_t replays = 0;             // hits replayed from the graph without running the function
  int64_t segmented_runs = 0;      // hits re-running a function that broke, segment by segment
  int64_t segment_cache_hits = 0;  // segments found already compiled
  int64_t eager_fallbacks = 0;     // calls run eagerly past the recompile limit
  int64_t failed_traces = 0;       // traces the function ended by throwing (no entry was made)
  std::vector<int64_t> ops_per_compile;  // op count of each graph this callable compiled
  double trace_seconds = 0;              // time spent capturing (running the graphs excluded)
};

// One graph break, as explain reports it.
struct GraphBreakInfo {
  std::string reason;    // "item() reads a value computed in the graph"
  std::string op;        // "item", "nonzero", "bool conversion" ...
  std::string location;  // "model.cpp:42", or "<unknown>"
  std::string hint;      // how to avoid it
};

struct ExplainReport {
  std::string name;
  int64_t graph_count = 0;
  std::vector<int64_t> ops_per_graph;
  std::vector<GraphBreakInfo> breaks;
  std::vector<std::string> recompile_reasons;
  std::vector<std::string> graphs;  // printed graphs, one per captured segment
  std::vector<std::string> guards;  // the first cache entry's guards, one a line
  // Ops over all graphs; the report as explain() prints it.
  int64_t total_ops() const;
  std::string str() const;
};
// Prints r.str().
std::ostream& operator<<(std::ostream& os, const ExplainReport& r);

// Drops every compiled segment shared between callables (tests use it to count compiles).
void reset_compile_caches();

namespace detail {

// For a front end that runs another language's code under capture (the Python bindings):
// while a scope lives, graph breaks met on this thread are reported at the position `fn` gives
// (that code's current "file:line") instead of the C++ call site; "" from fn keeps the C++ one.
class SourcePositionScope {
 public:
  using PositionFn = std::string (*)();
  explicit SourcePositionScope(PositionFn fn);
  ~SourcePositionScope();
  SourcePositionScope(const SourcePositionScope&) = delete;
  SourcePositionScope& operator=(const SourcePositionScope&) = delete;

 private:
  PositionFn prev_;
};

// A non-owning reference to a callable, for the one call the core may make into user code.
template <class Sig>
class FunctionRef;
template <class R, class... A>
class FunctionRef<R(A...)> {
 public:
  template <class G>
  FunctionRef(G&& g)  // NOLINT: implicit on purpose
      : obj_(const_cast<void*>(static_cast<const void*>(&g))), call_([](void* o, A... a) -> R {
          return (*static_cast<std::remove_reference_t<G>*>(o))(std::forward<A>(a)...);
        }) {}
  R operator()(A... a) const { return call_(obj_, std::forward<A>(a)...); }

 private:
  void* obj_;
  R (*call_)(void*, A...);
};

// A non-tensor argument, compared by value in the guards.
struct ScalarArg {
  enum Kind : uint8_t { Int, Float, Bool, String, Length } kind = Int;
  int64_t i = 0;
  double f = 0;
  std::string s;
  // Floats compare by bit pattern: 0.0 and -0.0 differ (x / 0.0), and NaN equals itself.
  bool operator==(const ScalarArg& o) const {
    return kind == o.kind && i == o.i && std::bit_cast<uint64_t>(f) == std::bit_cast<uint64_t>(o.f) &&
           s == o.s;
  }
  std::string str() const;
  static ScalarArg make(Kind k, int64_t i, double f = 0, std::string s = {}) {
    ScalarArg a;
    a.kind = k;
    a.i = i;
    a.f = f;
    a.s = std::move(s);
    return a;
  }
};

// Arguments and results of one call, flattened.
struct CallFrame {
  std::vector<Tensor> tensors;       // tensor arguments in order (vectors expanded)
  std::vector<ScalarArg> scalars;    // other arguments, and the length of each vector argument
  std::vector<Tensor> outputs;       // result tensors in order
  std::vector<int64_t> out_lengths;  // length of each vector inside the result
  // The tensors a replay reads besides the arguments, as the matching entry's guards found them
  // (lambda-captured tensors, module parameters, grads); filled by the guard check.
  mutable std::vector<Tensor> captured;
};

// The type-erased core of a compiled callable (src/capture/compiled.cpp).
class CompiledCore {
 public:
  CompiledCore(CompileOptions opts, ember::SourceLocation where);
  ~CompiledCore();
  CompiledCore(const CompiledCore&) = delete;
  CompiledCore& operator=(const CompiledCore&) = delete;

  // False when EMBER_COMPILE=0: the callable is the plain function.
  bool enabled() const;
  // Runs one call. `body` runs the user's function on the original arguments and flattens its
  // result into the frame; the core calls it zero times (replay) or once (trace, segmented
  // run, eager). Returns true when the body ran (the caller then has the result itself).
  bool call(CallFrame& frame, FunctionRef<void(CallFrame&)> body);
  // Guard check and cache lookup alone: whether a call with these arguments would hit.
  bool would_hit(const CallFrame& frame) const;
  // Guards the identity and metadata of a module's parameters and buffers, and its mode.
  void guard_module(std::shared_ptr<const nn::Module> m);
  CompileStats stats() const;
  ExplainReport explain() const;

 private:
  struct State;
  std::unique_ptr<State> s_;
};

// ---- flattening arguments ----
inline void flatten_arg(CallFrame& f, const Tensor& t) {
  f.tensors.push_back(t);
}
inline void flatten_arg(CallFrame& f, const std::vector<Tensor>& v) {
  f.scalars.push_back(ScalarArg::make(ScalarArg::Length, int64_t(v.size())));
  for (const Tensor& t : v) f.tensors.push_back(t);
}
inline void flatten_arg(CallFrame& f, bool b) {
  f.scalars.push_back(ScalarArg::make(ScalarArg::Bool, b));
}
inline void flatten_arg(CallFrame& f, const std::string& s) {
  f.scalars.push_back(ScalarArg::make(ScalarArg::String, 0, 0, s));
}
inline void flatten_arg(CallFrame& f, const char* s) {
  flatten_arg(f, std::string(s));
}
template <class T>
requires std::is_integral_v<T> &&(!std::is_same_v<T, bool>)void flatten_arg(CallFrame& f, T v) {
  f.scalars.push_back(ScalarArg::make(ScalarArg::Int, int64_t(v)));
}
template <class T>
requires std::is_floating_point_v<T>
void flatten_arg(CallFrame& f, T v) {
  f.scalars.push_back(ScalarArg::make(ScalarArg::Float, 0, double(v)));
}
template <class... T>
void flatten_arg(CallFrame& f, const std::tuple<T...>& t) {
  std::apply([&](const auto&... e) { (flatten_arg(f, e), ...); }, t);
}
template <class A, class B>
void flatten_arg(CallFrame& f, const std::pair<A, B>& p) {
  flatten_arg(f, p.first);
  flatten_arg(f, p.second);
}

// ---- results: flatten after a run, rebuild after a replay ----
template <class R>
struct ResultCodec {
  static_assert(sizeof(R) == 0,
                "ember::compile: a compiled function must return a Tensor, a std::vector<Tensor>, "
                "or a std::tuple/std::pair of those");
};
template <>
struct ResultCodec<Tensor> {
  static void flatten(CallFrame& f, const Tensor& t) { f.outputs.push_back(t); }
  static Tensor rebuild(const CallFrame& f, size_t& pos, size_t&) { return f.outputs[pos++]; }
};
template <>
struct ResultCodec<std::vector<Tensor>> {
  static void flatten(CallFrame& f, const std::vector<Tensor>& v) {
    f.out_lengths.push_back(int64_t(v.size()));
    for (const Tensor& t : v) f.outputs.push_back(t);
  }
  static std::vector<Tensor> rebuild(const CallFrame& f, size_t& pos, size_t& len) {
    size_t n = size_t(f.out_lengths[len++]);
    std::vector<Tensor> v(f.outputs.begin() + int64_t(pos), f.outputs.begin() + int64_t(pos + n));
    pos += n;
    return v;
  }
};
template <class... T>
struct ResultCodec<std::tuple<T...>> {
  static void flatten(CallFrame& f, const std::tuple<T...>& t) {
    std::apply(
        [&](const auto&... e) { (ResultCodec<std::decay_t<decltype(e)>>::flatten(f, e), ...); }, t);
  }
  static std::tuple<T...> rebuild(const CallFrame& f, size_t& pos, size_t& len) {
    // Braced initialization evaluates the elements in order.
    return std::tuple<T...>{ResultCodec<T>::rebuild(f, pos, len)...};
  }
};
template <class A, class B>
struct ResultCodec<std::pair<A, B>> {
  static void flatten(CallFrame& f, const std::pair<A, B>& p) {
    ResultCodec<A>::flatten(f, p.first);
    ResultCodec<B>::flatten(f, p.second);
  }
  static std::pair<A, B> rebuild(const CallFrame& f, size_t& pos, size_t& len) {
    A a = ResultCodec<A>::rebuild(f, pos, len);
    B b = ResultCodec<B>::rebuild(f, pos, len);
    return {std::move(a), std::move(b)};
  }
};

template <class M>
struct ForwardCall {
  std::shared_ptr<M> m;
  template <class... A>
  auto operator()(A&&... a) const {
    return m->forward(std::forward<A>(a)...);
  }
};

}  // namespace detail

// A compiled callable. Copies share one cache. Safe to call from several threads at once.
template <class F>
class CompiledFunction {
 public:
  // Made by compile(); `where` names the callable in logs when opts.name is empty.
  CompiledFunction(F fn, CompileOptions opts, ember::SourceLocation where)
      : fn_(std::make_shared<F>(std::move(fn))),
        core_(std::make_shared<detail::CompiledCore>(std::move(opts), where)) {}

  // Runs fn through the cache (capturing it on a miss); throws what fn throws, or Error for
  // a break under fullgraph.
  template <class... A>
  auto operator()(A&&... args) const {
    using R = std::decay_t<std::invoke_result_t<F&, A&...>>;
    if (!core_->enabled()) return R((*fn_)(args...));
    detail::CallFrame frame;
    (detail::flatten_arg(frame, args), ...);
    std::optional<R> result;
    auto body = [&](detail::CallFrame& f) {
      result.emplace((*fn_)(args...));
      f.outputs.clear();
      f.out_lengths.clear();
      detail::ResultCodec<R>::flatten(f, *result);
    };
    core_->call(frame, body);
    if (result) return std::move(*result);
    size_t pos = 0, len = 0;
    return detail::ResultCodec<R>::rebuild(frame, pos, len);
  }

  // Whether a call with these arguments would be served from the cache (guards alone).
  template <class... A>
  bool would_hit(A&&... args) const {
    detail::CallFrame frame;
    (detail::flatten_arg(frame, args), ...);
    return core_->would_hit(frame);
  }
  // The counters, a report of what was captured, the shared cache (for ember's own tests).
  CompileStats stats() const { return core_->stats(); }
  ExplainReport explain() const { return core_->explain(); }
  detail::CompiledCore& core() const { return *core_; }

 private:
  std::shared_ptr<F> fn_;
  std::shared_ptr<detail::CompiledCore> core_;
};

namespace detail {
template <class T>
struct is_module_ptr : std::false_type {};
template <class M>
struct is_module_ptr<std::shared_ptr<M>> : std::is_base_of<nn::Module, M> {};
}  // namespace detail

// compile(fn): fn takes tensors (and vectors of them, integers, floats, bools, strings) and
// returns a Tensor, a std::vector<Tensor> or a tuple/pair of those.
template <class F>
requires(!detail::is_module_ptr<std::decay_t<F>>::value) CompiledFunction<std::decay_t<F>> compile(
    F&& fn, CompileOptions opts = {},
    ember::SourceLocation where = ember::SourceLocation::current()) {
  return CompiledFunction<std::decay_t<F>>(std::forward<F>(fn), std::move(opts), where);
}

// A compiled module: calls run orig().forward(...) through capture; state_dict() keys are the
// module's own, and load_state_dict also accepts keys prefixed "_orig_mod.".
template <class M>
class CompiledModule {
 public:
  // Made by compile(module): guards the module's train/eval mode and parameters.
  CompiledModule(std::shared_ptr<M> m, CompileOptions opts, ember::SourceLocation where)
      : m_(m), fn_(detail::ForwardCall<M>{m}, std::move(opts), where) {
    fn_.core().guard_module(m_);
  }
  // Runs orig().forward(args...) through the cache, as CompiledFunction::operator().
  template <class... A>
  auto operator()(A&&... args) const {
    return fn_(std::forward<A>(args)...);
  }
  // The wrapped module, and the shared pointer holding it.
  M& orig() const { return *m_; }
  const std::shared_ptr<M>& orig_ptr() const { return m_; }
  // The module's own state_dict, load_state_dict (see nn::Module), parameters, modes.
  nn::StateDict state_dict() const { return m_->state_dict(); }
  nn::LoadReport load_state_dict(const nn::StateDict& dict, bool strict = true) {
    return m_->load_state_dict(dict, strict);
  }
  std::vector<Tensor> parameters() const { return m_->parameters(); }
  void train(bool on = true) { m_->train(on); }
  void eval() { m_->eval(); }
  // Counters and report, as CompiledFunction's.
  CompileStats stats() const { return fn_.stats(); }
  ExplainReport explain() const { return fn_.explain(); }

 private:
  std::shared_ptr<M> m_;
  CompiledFunction<detail::ForwardCall<M>> fn_;
};

// compile(module): a CompiledModule calling module->forward through capture.
template <class M>
requires std::is_base_of_v<nn::Module, M> CompiledModule<M> compile(
    std::shared_ptr<M> m, CompileOptions opts = {},
    ember::SourceLocation where = ember::SourceLocation::current()) {
  return CompiledModule<M>(std::move(m), std::move(opts), where);
}

// Compiles fn, calls it once with args, and reports what was captured: graphs, ops per graph,
// graph breaks with their locations and hints, recompile reasons.
template <class F, class... A>
ExplainReport explain(F&& fn, A&&... args) {
  CompileOptions opts;
  opts.name = "the function given to explain()";
  auto c = compile(std::forward<F>(fn), std::move(opts));
  c(std::forward<A>(args)...);
  return c.explain();
}

}  // namespace ember
