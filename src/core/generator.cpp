// The global random generator state, guarded by a mutex (several threads may draw at once).
#include "core/generator.h"

#include <limits>
#include <mutex>

#include "ember/error.h"
#include "ember/ops.h"

namespace ember {

namespace {
struct Generator {
  std::mutex mutex;
  uint64_t seed = kDefaultSeed;
  uint64_t offset = 0;
};
Generator& generator() {
  static Generator g;
  return g;
}
}  // namespace

void manual_seed(uint64_t seed) {
  Generator& g = generator();
  std::lock_guard lock(g.mutex);
  g.seed = seed;
  g.offset = 0;
}

uint64_t initial_seed() {
  Generator& g = generator();
  std::lock_guard lock(g.mutex);
  return g.seed;
}

RngState get_rng_state() {
  Generator& g = generator();
  std::lock_guard lock(g.mutex);
  return RngState{g.seed, g.offset};
}

void set_rng_state(const RngState& s) {
  EMBER_CHECK(s.offset % 4 == 0, "set_rng_state: offset ", s.offset,
              " is not a multiple of 4; pass a state returned by get_rng_state()");
  Generator& g = generator();
  std::lock_guard lock(g.mutex);
  g.seed = s.seed;
  g.offset = s.offset;
}

RandomRange reserve_random(uint64_t draws, const char* op) {
  constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max() - 3;
  EMBER_CHECK(draws <= kMax, op, ": ", draws, " random draws do not fit in the generator");
  uint64_t n = round_up_to_block(draws);
  Generator& g = generator();
  std::lock_guard lock(g.mutex);
  EMBER_CHECK(g.offset <= std::numeric_limits<uint64_t>::max() - n, op,
              ": the random stream of seed ", g.seed, " is used up (offset ", g.offset,
              "); call manual_seed() with a new seed");
  RandomRange r{g.seed, g.offset};
  g.offset += n;
  return r;
}

}  // namespace ember
