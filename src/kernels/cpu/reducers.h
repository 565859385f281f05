// The reducers that the reduction kernels fold with (interface: see reduce_loops.h). Steps are
// branch-free selects where they can be, so the lane loops vectorize.
#pragma once
#include <cstdint>
#include <limits>
#include <type_traits>

#include "kernels/functors.h"

namespace ember::cpu {

template <class V>
inline bool is_nan(V v) {
  if constexpr (std::is_floating_point_v<V>)
    return v != v;
  else
    return false;
}

template <class A>
struct SumReducer {
  using Acc = A;
  Acc init() const { return Acc(0); }
  template <class V>
  void step(Acc& a, V v, int64_t) const {
    a += Acc(v);
  }
  void merge(Acc& a, const Acc& b) const { a += b; }
};

// Largest (Max) or smallest value; a NaN wins, as in PyTorch.
template <class A, bool Max>
struct ExtremeReducer {
  using Acc = A;
  Acc init() const {
    if constexpr (std::numeric_limits<Acc>::has_infinity)
      return Max ? -std::numeric_limits<Acc>::infinity() : std::numeric_limits<Acc>::infinity();
    else
      return Max ? std::numeric_limits<Acc>::lowest() : std::numeric_limits<Acc>::max();
  }
  template <class V>
  void step(Acc& a, V v, int64_t) const {
    Acc x = Acc(v);
    a = (Max ? a < x : x < a) ? x : a;  // one max/min instruction; a NaN already in a stays
    if (is_nan(x)) a = x;               // rare, so a well-predicted branch in scalar code
  }
  void merge(Acc& a, const Acc& b) const { step(a, b, 0); }
};

// Position of the first element equal to a known value (NaN matching NaN): the second pass of
// argmax/argmin, after the extreme itself. Two vectorized passes beat one pass that carries
// (value, index) pairs.
template <class A>
struct FirstMatchReducer {
  using Acc = int64_t;  // -1: no match yet
  A target;
  bool target_nan;
  Acc init() const { return -1; }
  template <class V>
  void step(Acc& a, V v, int64_t i) const {
    A x = A(v);
    bool hit = (x == target) | (target_nan & is_nan(x));
    a = (a < 0) & hit ? i : a;
  }
  void merge(Acc& a, const Acc& b) const { a = (a < 0) | ((b >= 0) & (b < a)) ? b : a; }
};

// Sum of squared deviations from a known mean (second pass of var/std).
template <class A>
struct SquaredDeviationReducer {
  using Acc = A;
  Acc mean;
  Acc init() const { return Acc(0); }
  template <class V>
  void step(Acc& a, V v, int64_t) const {
    Acc d = Acc(v) - mean;
    a += d * d;
  }
  void merge(Acc& a, const Acc& b) const { a += b; }
};

// Sum of exp(x - max) for a known max (second pass of logsumexp).
template <class A>
struct ExpSumReducer {
  using Acc = A;
  Acc max;
  Acc init() const { return Acc(0); }
  template <class V>
  void step(Acc& a, V v, int64_t) const {
    a += fn::ExpFtz{}(Acc(v) - max);
  }
  void merge(Acc& a, const Acc& b) const { a += b; }
};

}  // namespace ember::cpu
