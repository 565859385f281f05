// Attrs: the non-tensor arguments of an op call. One struct for all ops, so graphs can store,
// hash, compare and print any node uniformly; each op's entry says which fields it reads.
#pragma once
#include <cmath>
#include <cstdint>
#include <string>

#include "ember/dtype.h"
#include "ember/tensor_impl.h"

namespace ember {

struct Attrs {
  Shape dims;     // reduction dims, permutation, split sizes
  Shape shape;    // target shape (view, expand, factories, backward-of-view input sizes)
  Shape strides;  // as_strided
  int64_t dim = 0;    // single dim (softmax, select, slice, gather, cat, topk ...)
  int64_t start = 0;  // slice start, select index, tril/triu diagonal, topk k, offset
  int64_t end = 0;    // slice end, randint high, ignore_index
  int64_t step = 1;   // slice step
  double value = 0;   // fill value, exponent, eps, clamp min, dropout p, randint low
  double value2 = 0;  // clamp max, arange step
  bool keepdim = false;
  bool flag = false;  // gelu tanh form, multinomial replacement, topk largest ...
  DType dtype = DType::Float32;  // cast target, factory dtype
  uint64_t seed = 0;    // random ops: Philox key
  uint64_t offset = 0;  // random ops: Philox counter start
  Device device{};      // factories and random ops (no tensor inputs): where the result lives

  bool operator==(const Attrs&) const = default;
  size_t hash() const;
  std::string str() const;  // non-default fields, for printing graphs and errors
};

}  // namespace ember
