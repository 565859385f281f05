// cumsum, sort and argsort: errors that name the op, and PyTorch's conventions (a stable sort,
// NaN as the largest value, bools summed in int64).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "ember/ember.h"
#include "support/expect_error.h"

namespace ember::test {
namespace {

TEST(ScanSort, BadInputSaysWhatIsWrong) {
  expect_error([&] { sort(ones({3}).to(DType::Bool)); }, {"sort", "bool"});
  expect_error([&] { sort(ones({3}), 1); }, {"sort", "dim 1"});
  expect_error([&] { argsort(ones({3}), -2); }, {"sort", "dim -2"});
  expect_error([&] { cumsum(ones({3}), 2); }, {"cumsum", "dim 2"});
}

TEST(ScanSort, PyTorchConventions) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const Tensor x = from_vector<double>({3, 1, nan, 1, 2}, {5}, DType::Float32);
  // Stable: equal values keep their order; NaN sorts as the largest.
  auto [up, up_i] = sort(x);
  EXPECT_EQ(up_i.to_vector<int64_t>(), (std::vector<int64_t>{1, 3, 4, 0, 2}));
  EXPECT_TRUE(std::isnan(up.to_vector<float>()[4]));
  auto [down, down_i] = sort(x, 0, true);
  EXPECT_EQ(down_i.to_vector<int64_t>(), (std::vector<int64_t>{2, 0, 4, 1, 3}));
  EXPECT_EQ(argsort(tensor({2, 0, 1}), -1, true).to_vector<int64_t>(),
            (std::vector<int64_t>{0, 2, 1}));
  // cumsum of bools counts in int64.
  const Tensor c = cumsum(tensor({1, 0, 1, 1}).to(DType::Bool), 0);
  EXPECT_EQ(c.dtype(), DType::Int64);
  EXPECT_EQ(c.to_vector<int64_t>(), (std::vector<int64_t>{1, 1, 2, 3}));
}

}  // namespace
}  // namespace ember::test
