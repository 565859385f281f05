// The model-family composites' bad input and edge cases: errors that name the op and what to
// do, and results PyTorch users expect (roll without dims, a pad that crops, inferred classes).
#include <gtest/gtest.h>

#include "ember/ember.h"
#include "support/expect_error.h"

namespace ember::test {
namespace {

TEST(Composites, BadInputSaysWhatIsWrong) {
  const Tensor a = ones({2, 3}), b = ones({4, 5});
  expect_error([&] { einsum("ij,jk->ik", {a, b}); }, {"einsum", "letter 'j'", "3", "4"});
  expect_error([&] { einsum("ii->i", {ones({3, 3})}); }, {"einsum", "twice", "diagonals"});
  expect_error([&] { einsum("...ij->ij", {a}); }, {"einsum", "ellipsis"});
  expect_error([&] { einsum("ij,jk,kl->il", {a, a, a}); }, {"einsum", "one or two operands"});
  expect_error([&] { einsum("ij->ik", {a}); }, {"einsum", "output letter 'k'"});
  expect_error([&] { one_hot(from_vector<int64_t>({0, 5}, {2}, DType::Int64), 3); }, {"one_hot", "5", "[0, 3)"});
  expect_error([&] { one_hot(ones({2})); }, {"one_hot", "int64"});
  expect_error([&] { pad(a, {1}); }, {"pad", "(left, right) pair"});
  expect_error([&] { pad(a, {-2, -2}); }, {"pad", "cropping"});
  expect_error([&] { roll(a, {1, 2}, {0}); }, {"roll", "2 shifts for 1 dims"});
  expect_error([&] { rms_norm(a, {2}); }, {"rms_norm", "trailing dims"});
}

TEST(Composites, PyTorchConventions) {
  const Tensor x = arange(0, 6, 1).view({2, 3});
  // roll without dims rolls the flattened tensor.
  EXPECT_EQ(roll(x, {1}).to_vector<float>(), (std::vector<float>{5, 0, 1, 2, 3, 4}));
  // Two dims at once.
  EXPECT_EQ(roll(x, {1, 1}, {0, 1}).to_vector<float>(), (std::vector<float>{5, 3, 4, 2, 0, 1}));
  // pad: the last dim first, then the one before; negative amounts crop.
  const Tensor p = pad(x, {1, -1, 0, 1}, 9);
  EXPECT_EQ(p.sizes(), (Shape{3, 3}));
  EXPECT_EQ(p.to_vector<float>(), (std::vector<float>{9, 0, 1, 9, 3, 4, 9, 9, 9}));
  // one_hot infers the classes from the largest index.
  const Tensor h = one_hot(from_vector<int64_t>({2, 0}, {2}, DType::Int64));
  EXPECT_EQ(h.sizes(), (Shape{2, 3}));
  EXPECT_EQ(h.to_vector<int64_t>(), (std::vector<int64_t>{0, 0, 1, 1, 0, 0}));
  // einsum's implicit output: the letters that appear once, alphabetically.
  EXPECT_EQ(einsum("ba", {x}).sizes(), (Shape{3, 2}));
  // rms_norm's default eps is float32's machine epsilon: a zero row stays zero.
  EXPECT_EQ(rms_norm(zeros({2, 4}), {4}).abs().amax().item(), 0.0);
}

}  // namespace
}  // namespace ember::test
