// The global random generator: a Philox key (the seed) and a position in its stream (the
// offset, counted in 32-bit draws). Random ops reserve a range of draws when they are called
// and carry (seed, offset) in their Attrs, so the kernel, and a captured graph replaying the
// call, need nothing else. manual_seed, get_rng_state and friends are in ember/ops.h.
#pragma once
#include <cstdint>

namespace ember {

// The seed the generator starts with, so that runs are reproducible unless seeded otherwise.
inline constexpr uint64_t kDefaultSeed = 67280421310721ull;

struct RandomRange {
  uint64_t seed = 0;
  uint64_t offset = 0;  // first draw of the range; always a multiple of 4
};

// Round a draw count up to whole Philox blocks (4 draws each).
constexpr uint64_t round_up_to_block(uint64_t draws) {
  return (draws + 3) / 4 * 4;
}

// Reserves `draws` 32-bit draws for one op call (`op` names it in errors) and advances the
// offset past them, rounded up to a multiple of 4. Thread safe.
RandomRange reserve_random(uint64_t draws, const char* op);

}  // namespace ember
