// The whole suite runs with EMBER_COMPILER_STRICT=1: a graph the compiler fails to build raises
// instead of falling back to eager interpretation, so compiled-versus-eager tests cannot pass
// by never running generated code. Tests of the fallback itself turn it off for their scope.
#include <cstdlib>

namespace {
const bool kStrict = [] {
  ::setenv("EMBER_COMPILER_STRICT", "1", 0);
  return true;
}();
}  // namespace
