// The first position of the extreme among a thread's N values (argmax, argmin), in two passes
// over values the caller gives again by index (kept in registers, unpacked on each pass): the
// extreme (NaN where any value is one: argmax and argmin take NaN as the extreme), then the
// first index holding it. Two compares a value, where folding (value, position) pairs takes
// five to ten (kernels/cuda/reduce.cu's ArgBest); the result is the fold's: the extreme, ties
// and NaN going to the first position. Floating-point values only. Host and device alike, so
// tests/kernels checks it on the CPU.
#pragma once
#include <limits>

#include "kernels/functors.h"

namespace ember::fn {

// valid(k): whether index k holds a value; value(k): that value. Gives the extreme in *best and
// its first index in *at (-1 where no index holds a value; *best is then unspecified).
template <class A, bool Max, int N, class Valid, class Value>
EMBER_FN void first_extreme(const Valid& valid, const Value& value, A* best, int* at) {
  A m = Max ? -std::numeric_limits<A>::infinity() : std::numeric_limits<A>::infinity();
  bool nan = false;
#if defined(__CUDACC__)
#pragma unroll
#endif
  for (int k = 0; k < N; ++k)
    if (valid(k)) {
      const A v = value(k);
      nan |= v != v;
      m = Max ? (v > m ? v : m) : (v < m ? v : m);  // a NaN compares false: m stays
    }
  int first = -1;
#if defined(__CUDACC__)
#pragma unroll
#endif
  for (int k = N - 1; k >= 0; --k)  // backwards: the last index found is the first
    if (valid(k)) {
      const A v = value(k);
      if (nan ? v != v : v == m) first = k;
    }
  *best = nan ? std::numeric_limits<A>::quiet_NaN() : m;
  *at = first;
}

}  // namespace ember::fn
