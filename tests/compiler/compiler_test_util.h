// Shared by the compiler tests: the cache directory they compile into, the options that
// select the generated-code backend, and a backend that keeps the generated source.
#pragma once
#include <cstdlib>
#include <string>

#include "capture/capture.h"
#include "compiler/compiled_graph.h"
#include "ember/compile.h"

namespace ember::test {

// Every compiler test compiles into this directory (kept between runs, so reruns hit the
// cache) unless it sets a fresh one for itself.
inline const char* kSharedCompilerCache = "/tmp/ember-compiler-tests";

// Sets EMBER_CACHE_DIR for a scope and restores the previous value.
struct CacheDir {
  std::string old;
  bool had = false;
  explicit CacheDir(const std::string& dir) {
    const char* o = std::getenv("EMBER_CACHE_DIR");
    had = o != nullptr;
    old = o ? o : "";
    ::setenv("EMBER_CACHE_DIR", dir.c_str(), 1);
  }
  ~CacheDir() {
    if (had)
      ::setenv("EMBER_CACHE_DIR", old.c_str(), 1);
    else
      ::unsetenv("EMBER_CACHE_DIR");
  }
};

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
class SpyBackend : public capture::Backend {
 public:
  std::string name() const override { return "compiler-spy"; }
  std::shared_ptr<const capture::Runnable> compile(std::shared_ptr<const graph::Graph> g) override {
    auto r = capture::backend("compiler").compile(std::move(g));
    auto cg = std::dynamic_pointer_cast<const compiler::CompiledGraph>(r);
    last_source() = cg ? cg->source() : "";
    all_sources() += last_source();
    return r;
  }
};
inline CompileOptions spy_opts() {
  static const bool registered = [] {
    capture::register_backend(std::make_unique<SpyBackend>());
    return true;
  }();
  (void)registered;
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
