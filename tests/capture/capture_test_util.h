// Helpers shared by the capture tests: bit-exact comparison of tensors, the eager backend, a
// tiny GPT.
#pragma once
#include <gtest/gtest.h>

#include <cstring>

#include "ember/compile.h"
#include "ember/ember.h"
#include "ember/nn.h"

namespace ember::test {

// A GPT small enough for tests: 2 layers, 2 heads, 16 embd, block 8, vocab 11.
inline nn::GPTConfig tiny_gpt(double dropout = 0.0) {
  nn::GPTConfig c;
  c.block_size = 8;
  c.vocab_size = 11;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 16;
  c.dropout = dropout;
  return c;
}

// The "eager" backend: tests that compare a compiled function with eager code bit for bit use
// it, since generated kernels may round differently (FMA contraction, summation order).
inline CompileOptions eager_backend() {
  CompileOptions o;
  o.backend = "eager";
  return o;
}

// Same shape, dtype and bit pattern of every element.
inline ::testing::AssertionResult bits_equal(const Tensor& a, const Tensor& b) {
  if (a.sizes() != b.sizes() || a.dtype() != b.dtype())
    return ::testing::AssertionFailure()
           << "metadata differs: " << a.shape_str() << " " << dtype_name(a.dtype()) << " vs "
           << b.shape_str() << " " << dtype_name(b.dtype());
  std::vector<double> x = a.to_vector<double>(), y = b.to_vector<double>();
  for (size_t i = 0; i < x.size(); ++i)
    if (std::memcmp(&x[i], &y[i], sizeof(double)) != 0)
      return ::testing::AssertionFailure() << "element " << i << ": " << x[i] << " vs " << y[i];
  return ::testing::AssertionSuccess();
}

}  // namespace ember::test
