// Switches read from the environment (the kernels' and the compiler's EMBER_* settings).
#pragma once
#include <cstdlib>
#include <cstring>

namespace ember {

// With on_by_default, on unless `name` is "0"; else on only where it is "1". It reads the
// environment at each call: a caller on a hot path keeps the answer in a static.
inline bool env_switch(const char* name, bool on_by_default) {
  const char* v = std::getenv(name);
  return on_by_default ? !(v && std::strcmp(v, "0") == 0) : (v && std::strcmp(v, "1") == 0);
}

}  // namespace ember
