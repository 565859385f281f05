// The call path of a compiled callable: guard check against each cache entry, then replay (a
// function that never broke), a segmented re-run (one that broke), a new trace (a miss), or
// eager execution (EMBER_COMPILE=0, nested inside another capture, past the recompile limit).
#include <cstdlib>
#include <shared_mutex>
#include <sstream>

#include "capture/capture.h"

namespace ember::detail {

namespace {
bool compile_enabled_by_env() {
  static const bool on = [] {
    const char* e = std::getenv("EMBER_COMPILE");
    return !(e && std::string(e) == "0");
  }();
  return on;
}
}  // namespace

struct CompiledCore::State {
  CompileOptions opts;
  std::string name;
  bool enabled = true;
  capture::Backend* backend = nullptr;
  std::shared_ptr<const nn::Module> root;

  struct Entry {
    capture::Guards guards;
    bool segmented = false;
    // Whether it counts against the recompile limit: not when every graph it compiled was
    // served by code built for the same program at other sizes.
    bool counts = true;
    std::unique_ptr<capture::ReplayPlan> plan;
    // A segmented entry's compiled graphs, which its re-traces find in the segment cache.
    std::vector<std::shared_ptr<const capture::Runnable>> segments;
  };
  mutable std::shared_mutex entries_mu;
  std::vector<std::shared_ptr<const Entry>> entries;
  std::mutex trace_mu;  // one trace at a time per callable
  std::atomic<bool> fallen_back{false};
  // Whether the graphs are marked as of a program called at varying sizes: dynamic = true, or
  // (dynamic unset) since a size guard first missed.
  bool dynamic_sizes = false;

  // Counters touched on every call are atomics; the rest sit under stats_mu.
  std::atomic<int64_t> calls{0}, cache_hits{0}, replays{0}, segmented_runs{0}, eager_fallbacks{0};
  mutable std::mutex stats_mu;
  CompileStats stats;    // traces, compiles, recompiles, breaks, segment hits, ops_per_compile
  ExplainReport report;  // from the first trace, plus recompile reasons

  std::shared_ptr<const Entry> find(const CallFrame& f, std::string* why,
                                    capture::Guards::SizeMiss* size_miss = nullptr) const {
    std::shared_lock lock(entries_mu);
    // Newest first: after a recompile the new entry is the likely one. On a miss, `why` gets
    // the failure of the entry that came closest (passed the most checks).
    int best = -1;
    for (auto it = entries.rbegin(); it != entries.rend(); ++it) {
      std::string w;
      int passed = 0;
      capture::Guards::SizeMiss sm;
      if ((*it)->guards.check(f, why ? &w : nullptr, &passed, why ? &sm : nullptr)) return *it;
      if (why && passed > best) {
        best = passed;
        *why = std::move(w);
        if (size_miss) *size_miss = sm;
      }
    }
    return nullptr;
  }

  void count(const capture::TraceResult& r) {
    std::lock_guard<std::mutex> g(stats_mu);
    stats.breaks += int64_t(r.breaks.size());
    stats.trace_seconds += r.seconds - r.run_seconds;
    stats.compiles += r.compiles;
    stats.shared_compiles += r.shared_compiles;
    stats.deferred_compiles += r.deferred_compiles;
    stats.segment_cache_hits += r.segment_hits;
    stats.ops_per_compile.insert(stats.ops_per_compile.end(), r.ops_per_compile.begin(),
                                 r.ops_per_compile.end());
  }
};

CompiledCore::CompiledCore(CompileOptions opts, ember::SourceLocation where)
    : s_(std::make_unique<State>()) {
  s_->enabled = compile_enabled_by_env();
  s_->name = opts.name.empty() ? "function at " + capture::loc_str(where) : opts.name;
  s_->report.name = s_->name;
  EMBER_CHECK(opts.recompile_limit >= 1, "compile: recompile_limit must be at least 1, got ",
              opts.recompile_limit);
  EMBER_CHECK(opts.mode == "default" || opts.mode == "reduce-overhead", "compile: unknown mode \"",
              opts.mode, "\"; available: \"default\", \"reduce-overhead\"");
  if (opts.mode == "reduce-overhead" && opts.backend != "compiler")
    capture::warn("compile: mode \"reduce-overhead\" applies to the \"compiler\" backend; " +
                  s_->name + " uses \"" + opts.backend + "\" and runs as in mode \"default\"");
  if (s_->enabled)
    s_->backend = &capture::backend(opts.mode == "reduce-overhead" && opts.backend == "compiler"
                                        ? "compiler/reduce-overhead"
                                        : opts.backend);
  s_->dynamic_sizes = opts.dynamic.value_or(false);
  s_->opts = std::move(opts);
}

CompiledCore::~CompiledCore() = default;

bool CompiledCore::enabled() const {
  return s_->enabled;
}

void CompiledCore::guard_module(std::shared_ptr<const nn::Module> m) {
  s_->root = std::move(m);
}

// CompileOptions::state: the tensors it gives now join the arguments (after them), so the
// tracer lifts them as arguments and the guards check them like arguments.
static void add_state(const CompileOptions& opts, CallFrame& frame) {
  if (!opts.state) return;
  std::vector<Tensor> st = opts.state();
  frame.scalars.push_back(ScalarArg::make(ScalarArg::Length, int64_t(st.size())));
  for (Tensor& t : st) frame.tensors.push_back(std::move(t));
}

bool CompiledCore::would_hit(const CallFrame& frame) const {
  if (s_->fallen_back) return false;
  if (!s_->opts.state) return s_->find(frame, nullptr) != nullptr;
  CallFrame f = frame;  // the state joins a copy: the caller's frame stays as it gave it
  add_state(s_->opts, f);
  return s_->find(f, nullptr) != nullptr;
}

bool CompiledCore::call(CallFrame& frame, FunctionRef<void(CallFrame&)> body) {
  State& s = *s_;
  s.calls++;
  // Inside another capture (a compiled function calling this one): trace inline.
  if (capture_hook()) {
    body(frame);
    return true;
  }
  add_state(s.opts, frame);
  if (s.fallen_back) {
    s.eager_fallbacks++;
    body(frame);
    return true;
  }
  auto run_entry = [&](const State::Entry& e) {
    s.cache_hits++;
    if (!e.segmented) {
      s.replays++;
      e.plan->run(frame);
      return false;
    }
    s.segmented_runs++;
    capture::TraceConfig cfg{s.backend, s.opts.fullgraph, /*want_plan=*/false, s.name,
                             s.dynamic_sizes};
    capture::TraceResult r = capture::trace(cfg, frame, body);
    s.count(r);
    return true;
  };
  if (auto e = s.find(frame, nullptr)) return run_entry(*e);
  std::string why;

  std::unique_lock<std::mutex> tl(s.trace_mu);
  capture::Guards::SizeMiss size_miss;
  if (auto e = s.find(frame, &why, &size_miss)) return run_entry(*e);  // another thread traced it
  size_t n, before;  // entries counted against the limit; entries there were (a miss if any)
  {
    // Entries that read a captured tensor since freed or rebound can never hit again: the new
    // trace takes their place rather than a slot of the recompile limit.
    std::unique_lock lock(s.entries_mu);
    before = s.entries.size();
    std::erase_if(s.entries, [](const auto& e) { return e->guards.is_dead(); });
    n = size_t(std::count_if(s.entries.begin(), s.entries.end(),
                             [](const auto& e) { return e->counts; }));
  }
  // Entries that built nothing (code shared over sizes) are bounded apart, by the memory
  // their graphs hold.
  constexpr size_t kMaxEntries = 1024;
  if (n >= size_t(s.opts.recompile_limit) || before >= kMaxEntries) {
    if (!s.fallen_back.exchange(true))
      capture::warn(s.name + " reached the recompile limit (" +
                    std::to_string(s.opts.recompile_limit) +
                    " cache entries); it runs eagerly from now on. Last guard failure: " + why +
                    ". Raise CompileOptions::recompile_limit if this is expected.");
    tl.unlock();
    s.eager_fallbacks++;
    body(frame);
    return true;
  }
  if (before > 0)
    capture::log_line(capture::Log::Recompiles, s.name + ": recompiling because " + why);
  // Automatic dynamic: a size that missed makes the program's graphs from now on share code
  // over symbolic sizes (the dims that vary between them become the symbols), unless that dim
  // was marked static. A dim marked dynamic does so from the first call.
  if (!s.dynamic_sizes && !s.opts.dynamic.has_value()) {
    if (before > 0 && size_miss.slot >= 0) {
      const Tensor& t = frame.tensors[size_t(size_miss.slot)];
      if (t.impl()->static_dims >> size_miss.dim & 1) {
        capture::log_line(capture::Log::Dynamic,
                          s.name + ": input " + std::to_string(size_miss.slot) + " size[" +
                              std::to_string(size_miss.dim) +
                              "] is marked static: this size is specialized");
      } else {
        s.dynamic_sizes = true;
        capture::log_line(capture::Log::Dynamic,
                          s.name + ": input " + std::to_string(size_miss.slot) + " size[" +
                              std::to_string(size_miss.dim) + "] varies (" + why +
                              "): its graphs now share code over symbolic sizes");
      }
    } else {
      for (size_t i = 0; i < frame.tensors.size() && !s.dynamic_sizes; ++i) {
        const Tensor& t = frame.tensors[i];
        if (!t.defined() || !t.impl()->dynamic_dims) continue;
        s.dynamic_sizes = true;
        capture::log_line(capture::Log::Dynamic,
                          s.name + ": input " + std::to_string(i) +
                              " has dims marked dynamic: its graphs share code over symbolic "
                              "sizes from the first call");
      }
    }
  }
  capture::TraceConfig cfg{s.backend, s.opts.fullgraph, /*want_plan=*/true, s.name,
                           s.dynamic_sizes};
  capture::TraceResult r;
  try {
    r = capture::trace(cfg, frame, body);
  } catch (...) {
    // The function threw (or a fullgraph break): no entry is made, so the failed trace uses
    // up nothing of the recompile limit, and it is counted apart from the traces.
    std::lock_guard<std::mutex> g(s.stats_mu);
    s.stats.failed_traces++;
    throw;
  }
  s.count(r);
  if (before > 0) {
    std::lock_guard<std::mutex> g(s.stats_mu);
    s.stats.recompiles++;
    s.report.recompile_reasons.push_back(why);
  }
  auto e = std::make_shared<State::Entry>();
  e->guards = std::move(r.guards);
  if (s.root) e->guards.add_module_identity(s.root);
  e->segmented = r.broke;
  e->counts = !(r.compiles > 0 && r.shared_compiles + r.deferred_compiles == r.compiles);
  e->plan = std::move(r.plan);
  if (r.broke) e->segments = std::move(r.runnables);
  if (capture::log_enabled(capture::Log::Guards))
    capture::log_line(capture::Log::Guards, s.name + ": cache entry " + std::to_string(n) +
                                                " guards:\n" + e->guards.str());
  {
    std::lock_guard<std::mutex> g(s.stats_mu);
    s.stats.traces++;
    if (before == 0) {  // the first trace
      ExplainReport& rep = s.report;
      rep.graph_count = int64_t(r.ops_per_segment.size());
      rep.ops_per_graph = r.ops_per_segment;
      rep.graphs = r.graphs;
      for (auto& b : r.breaks) rep.breaks.push_back(b.info);
      std::istringstream lines(e->guards.str());
      for (std::string line; std::getline(lines, line);)
        rep.guards.push_back(line.substr(std::min(line.find_first_not_of(' '), line.size())));
    }
  }
  std::unique_lock lock(s.entries_mu);
  s.entries.push_back(std::move(e));
  return true;
}

CompileStats CompiledCore::stats() const {
  std::lock_guard<std::mutex> g(s_->stats_mu);
  CompileStats out = s_->stats;
  out.calls = s_->calls;
  out.cache_hits = s_->cache_hits;
  out.replays = s_->replays;
  out.segmented_runs = s_->segmented_runs;
  out.eager_fallbacks = s_->eager_fallbacks;
  return out;
}

ExplainReport CompiledCore::explain() const {
  std::lock_guard<std::mutex> g(s_->stats_mu);
  return s_->report;
}

}  // namespace ember::detail
