// The random draws of the program generator (program_gen.h), shared by its files.
#pragma once
#include <cstdint>
#include <random>
#include <vector>

namespace ember::testgen {

using Rng = std::mt19937_64;

inline int64_t uniform(Rng& r, int64_t lo, int64_t hi) {  // inclusive
  return std::uniform_int_distribution<int64_t>(lo, hi)(r);
}
inline bool coin(Rng& r, double p = 0.5) {
  return std::uniform_real_distribution<double>(0, 1)(r) < p;
}
template <class T>
const T& pick(Rng& r, const std::vector<T>& v) {
  return v[size_t(uniform(r, 0, int64_t(v.size()) - 1))];
}

}  // namespace ember::testgen
