// Shared by the compiler tests: the cache directory they compile into, the options that
// select the generated-code backend, and a backend that keeps the generated source.
#pragma once
#include <mutex>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <memory>
#include <string>

#include "capture/capture.h"
#include "compiler/compiled_graph.h"
#include "compiler/families.h"
#include "compiler/toolchain.h"
#include "ember/compile.h"
#include "ember/tensor.h"

namespace ember::test {

// |a - b| <= atol + rtol |b| elementwise, same shapes; NaN matches NaN.
inline ::testing::AssertionResult close(const Tensor& a, const Tensor& b, double rtol,
                                        double atol) {
  if (a.sizes() != b.sizes()) return ::testing::AssertionFailure() << "shapes differ";
  std::vector<double> x = a.to_vector<double>(), y = b.to_vector<double>();
  for (size_t i = 0; i < x.size(); ++i) {
    if (std::isnan(x[i]) && std::isnan(y[i])) continue;
    if (!(std::abs(x[i] - y[i]) <= atol + rtol * std::abs(y[i])))
      return ::testing::AssertionFailure() << "element " << i << ": " << x[i] << " vs " << y[i];
  }
  return ::testing::AssertionSuccess();
}

// Every compiler test compiles into this directory (kept between runs, so reruns hit the
// cache) unless it sets a fresh one for itself.
inline const char* kSharedCompilerCache = "/tmp/ember-compiler-tests";

// Sets an environment variable for a scope and restores the previous value.
struct ScopedEnv {
  std::string name, old;
  bool had = false;
  ScopedEnv(std::string n, const std::string& value) : name(std::move(n)) {
    const char* o = std::getenv(name.c_str());
    had = o != nullptr;
    old = o ? o : "";
    ::setenv(name.c_str(), value.c_str(), 1);
  }
  ~ScopedEnv() {
    if (had)
      ::setenv(name.c_str(), old.c_str(), 1);
    else
      ::unsetenv(name.c_str());
  }
};

// EMBER_CACHE_DIR for a scope.
struct CacheDir : ScopedEnv {
  explicit CacheDir(const std::string& dir) : ScopedEnv("EMBER_CACHE_DIR", dir) {}
};

// x.relu().add(1).mul(2) over f32 of `sizes`, built directly: full() nodes for the constants.
inline std::shared_ptr<graph::Graph> relu_add_mul_graph(const Shape& sizes = {64, 8}) {
  using graph::Value;
  auto g = std::make_shared<graph::Graph>();
  TensorMeta m;
  m.sizes = sizes;
  Value* x = g->add_input(m, kCPU, graph::InputKind::Argument, "x");
  Attrs one, two;
  one.value = 1;
  two.value = 2;
  one.dtype = two.dtype = DType::Float32;
  Value* r = g->add_node(OpId::relu, {x}, {}, {})->outputs[0];
  Value* c1 = g->add_node(OpId::full, {}, one, {})->outputs[0];
  Value* a = g->add_node(OpId::add, {r, c1}, {}, {})->outputs[0];
  Value* c2 = g->add_node(OpId::full, {}, two, {})->outputs[0];
  Value* y = g->add_node(OpId::mul, {a, c2}, {}, {})->outputs[0];
  g->set_outputs({y});
  return g;
}

// A graph through the "compiler" backend, as its CompiledGraph (null, and a failure, if the
// backend handed back something else).
inline std::shared_ptr<const compiler::CompiledGraph> compile_graph(
    std::shared_ptr<graph::Graph> g) {
  auto r = capture::backend("compiler").compile(std::move(g));
  auto cg = std::dynamic_pointer_cast<const compiler::CompiledGraph>(r);
  EXPECT_TRUE(cg) << "the compiler backend did not compile the graph";
  return cg;
}

// Libraries the calls since `before` needed that no earlier graph of this process had built or
// loaded (C++ compiler runs and disk cache loads).
inline int64_t new_libraries(const compiler::ToolchainStats& before) {
  const compiler::ToolchainStats now = compiler::toolchain_stats();
  return (now.compiler_runs - before.compiler_runs) + (now.disk_hits - before.disk_hits);
}

// Forgets the code shared over sizes, the loaded libraries and the compiled segments, so that
// a test of code sharing counts its own builds.
inline void forget_shared_code() {
  compiler::clear_families();
  compiler::clear_memory_cache();
  capture::clear_segment_cache();
}

inline CompileOptions compiler_opts() {
  CompileOptions o;
  o.backend = "compiler";
  return o;
}

// The "compiler" backend registered again as "compiler-spy", keeping the source it generated
// last, so tests can check which kernels a graph got (from the kernel comments).
inline std::string& last_source() {
  static std::string s;
  return s;
}
// Every source it generated, one after the other (training compiles two graphs per call).
inline std::string& all_sources() {
  static std::string s;
  return s;
}
// The CompiledGraph it made last.
inline std::shared_ptr<const compiler::CompiledGraph>& last_compiled() {
  static std::shared_ptr<const compiler::CompiledGraph> g;
  return g;
}
class SpyBackend : public capture::Backend {
 public:
  std::string name() const override { return "compiler-spy"; }
  std::shared_ptr<const capture::Runnable> compile(std::shared_ptr<const graph::Graph> g) override {
    auto r = capture::backend("compiler").compile(std::move(g));
    auto cg = std::dynamic_pointer_cast<const compiler::CompiledGraph>(r);
    static std::mutex mu;  // a training graph's forward and backward compile at once
    std::lock_guard<std::mutex> lock(mu);
    last_source() = cg ? cg->source() : "";
    last_compiled() = cg;
    all_sources() += last_source();
    return r;
  }
};
// Also empties the compile caches and the kept sources, so the next compile reaches the spy
// (a segment cache hit would leave the source of an earlier test to be checked).
inline CompileOptions spy_opts() {
  static const bool registered = [] {
    capture::register_backend(std::make_unique<SpyBackend>());
    return true;
  }();
  (void)registered;
  reset_compile_caches();
  last_source().clear();
  all_sources().clear();
  CompileOptions o;
  o.backend = "compiler-spy";
  return o;
}

inline bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}
inline int count(const std::string& text, const std::string& part) {
  int n = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

}  // namespace ember::test
