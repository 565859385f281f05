// Every op of the op table through the "compiler" backend against eager: all cases of the
// table-driven op test (tests/ops/*_cases.cpp) run inside ONE compiled program per dtype, so
// the whole table costs a couple of C++ compilations. The random op cases reseed the generator
// inside the function (a side effect replay does not repeat), so random ops get a program of
// their own here, which must match eager bit for bit from the same seed.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "compiler/compiler_test_util.h"
#include "compiler/toolchain.h"
#include "ember/autograd.h"
#include "ember/ember.h"
#include "support/op_cases.h"

namespace ember {
namespace {

using test::OpCase;

// Tolerances of compiled against eager results: fused float32 code may contract a*b+c into one
// FMA and sums in another order (row reductions; a matmul run single-threaded beside another
// one blocks its sums differently from a threaded one), so float32 agrees to rtol 1e-5 with
// atol 1e-5 for sums that cancel to near zero (inputs are of magnitude ~1), float64 to rtol
// 1e-12 (atol 1e-13), both times the case's tol_scale (long sums: the large matmuls);
// integers and bools exactly. NaN matches NaN.
std::string mismatch(const Tensor& got, const Tensor& want, double scale = 1) {
  if (got.sizes() != want.sizes() || got.dtype() != want.dtype())
    return "metadata: " + got.shape_str() + " " + std::string(dtype_name(got.dtype())) + " vs " +
           want.shape_str() + " " + std::string(dtype_name(want.dtype()));
  const bool f32 = got.dtype() == DType::Float32, f64 = got.dtype() == DType::Float64;
  const double rtol = scale * (f64 ? 1e-12 : f32 ? 1e-5 : 0),
               atol = scale * (f64 ? 1e-13 : f32 ? 1e-5 : 0);
  std::vector<double> x = got.to_vector<double>(), y = want.to_vector<double>();
  for (size_t i = 0; i < x.size(); ++i) {
    if (x[i] == y[i] || (std::isnan(x[i]) && std::isnan(y[i]))) continue;  // also infinities
    if (!(std::abs(x[i] - y[i]) <= atol + rtol * std::abs(y[i])))
      return "element " + std::to_string(i) + ": " + std::to_string(x[i]) + " vs " +
             std::to_string(y[i]);
  }
  return "";
}

std::string bits_differ(const Tensor& a, const Tensor& b) {
  if (a.sizes() != b.sizes() || a.dtype() != b.dtype()) return "metadata differs";
  std::vector<double> x = a.to_vector<double>(), y = b.to_vector<double>();
  for (size_t i = 0; i < x.size(); ++i)
    if (std::memcmp(&x[i], &y[i], sizeof(double)) != 0)
      return "element " + std::to_string(i) + ": " + std::to_string(x[i]) + " vs " +
             std::to_string(y[i]);
  return "";
}

bool draws_random(const OpCase& c) {
  for (OpId op : c.covers)
    if (op_info(op).kind == OpKind::Random) return true;
  return false;
}

// One case at one shape set: its inputs (made once, from the test's seed) and where its
// inputs and outputs sit in the program's flat lists.
struct Item {
  const OpCase* c;
  test::Inputs inputs;
  size_t first_input = 0, num_outputs = 0;
};

std::vector<Item> items_for(DType dtype) {
  std::vector<Item> items;
  size_t at = 0;
  for (const OpCase& c : test::all_op_cases()) {
    if (draws_random(c)) continue;
    if (std::find(c.dtypes.begin(), c.dtypes.end(), dtype) == c.dtypes.end()) continue;
    for (const test::Shapes& shapes : c.shapes) {
      Item it{&c, {}, at, 0};
      if (c.make_inputs) {
        it.inputs = c.make_inputs(shapes, dtype);
      } else {
        for (const Shape& s : shapes) it.inputs.push_back(test::random_tensor(s, dtype));
      }
      at += it.inputs.size();
      items.push_back(std::move(it));
    }
  }
  return items;
}

void check_program(DType dtype) {
  std::vector<Item> items = items_for(dtype);
  ASSERT_FALSE(items.empty());
  std::vector<Tensor> flat;
  for (const Item& it : items) flat.insert(flat.end(), it.inputs.begin(), it.inputs.end());
  auto program = [&items](const std::vector<Tensor>& all) {
    std::vector<Tensor> outs;
    for (const Item& it : items) {
      test::Inputs in(all.begin() + long(it.first_input),
                      all.begin() + long(it.first_input + it.inputs.size()));
      test::Inputs o = it.c->run(in);
      outs.insert(outs.end(), o.begin(), o.end());
    }
    return outs;
  };
  auto compiled = compile(program, test::compiler_opts());
  compiled(flat);  // trace and compile; the second call replays the compiled graphs
  std::vector<Tensor> got = compiled(flat);
  size_t k = 0;
  for (const Item& it : items) {  // eager, case by case, in the program's order
    test::Inputs want = it.c->run(it.inputs);
    for (size_t j = 0; j < want.size(); ++j, ++k) {
      ASSERT_LT(k, got.size());
      EXPECT_EQ(mismatch(got[k], want[j], it.c->tol_scale), "") << it.c->name << " output " << j << " (" << dtype_name(dtype) << ")";
    }
  }
  EXPECT_EQ(k, got.size());
}

class EveryOpCompiled : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(compiler::compiler_available()); }
  test::CacheDir dir{test::kSharedCompilerCache};
  NoGradGuard no_grad;
};

TEST_F(EveryOpCompiled, Float32MatchesEager) { check_program(DType::Float32); }
TEST_F(EveryOpCompiled, Float64MatchesEager) { check_program(DType::Float64); }
TEST_F(EveryOpCompiled, Int64MatchesEager) { check_program(DType::Int64); }

TEST_F(EveryOpCompiled, RandomOpsMatchEagerBitForBit) {
  auto program = [](const Tensor& x, const Tensor& probs) {
    return std::vector<Tensor>{rand({5, 3}), randn({7}) * x.sum(), randint(0, 9, {4, 2}),
                               bernoulli({3, 4}, 0.4), multinomial(probs, 3, true),
                               dropout(x, 0.3, true)};
  };
  Tensor x = randn({4, 6}), probs = rand({2, 5}) + 0.1;
  auto compiled = compile(program, test::compiler_opts());
  compiled(x, probs);  // trace; the calls below replay
  for (uint64_t seed : {7u, 8u}) {
    manual_seed(seed);
    std::vector<Tensor> got = compiled(x, probs);
    manual_seed(seed);
    std::vector<Tensor> want = program(x, probs);
    ASSERT_EQ(got.size(), want.size());
    for (size_t k = 0; k < got.size(); ++k)
      EXPECT_EQ(bits_differ(got[k], want[k]), "") << "output " << k << " seed " << seed;
  }
}

}  // namespace
}  // namespace ember
