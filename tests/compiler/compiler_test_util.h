// Shared by the compiler tests: the cache directory they compile into and the options that
// select the generated-code backend.
#pragma once
#include <cstdlib>
#include <string>

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

}  // namespace ember::test
