// The convolution and pooling composites: errors that name the op and what to do, and results
// PyTorch users know by heart (window sums, depthwise kernels, default strides, the divisor of
// padded windows, adaptive windows, where max pooling sends its gradient).
#include <gtest/gtest.h>

#include "ember/ember.h"
#include "support/expect_error.h"

namespace ember::test {
namespace {

std::vector<float> values(const Tensor& t) { return t.to_vector<float>(); }

TEST(ConvPool, BadInputSaysWhatIsWrong) {
  const Tensor x = ones({1, 4, 5, 5});
  expect_error([&] { conv2d(x, ones({6, 2, 3, 3}), {}, {1}, {0}, {1}, 3); },
               {"conv2d", "groups = 3", "divide", "input channels (4"});
  expect_error([&] { conv2d(x, ones({6, 3, 3, 3})); },
               {"conv2d", "[6, 3, 3, 3]", "takes 3 input channels", "has 4"});
  expect_error([&] { conv2d(ones({1, 1, 2, 2}), ones({1, 1, 5, 5}), {}, {1}, {1}); },
               {"conv2d", "larger than the padded input (4 x 4)", "more padding"});
  expect_error([&] { conv2d(ones({5, 5}), ones({1, 1, 3, 3})); },
               {"conv2d", "[N, C, H, W]", "[5, 5]"});
  expect_error([&] { conv2d(x, ones({2, 4, 3, 3}), ones({3})); }, {"conv2d", "bias", "[2]", "[3]"});
  expect_error([&] { conv2d(x, ones({2, 4, 3, 3}), {}, {0}); }, {"conv2d", "stride", "at least 1"});
  expect_error([&] { conv2d(x, ones({2, 4, 3, 3}), {}, {1, 1, 1}); },
               {"conv2d", "stride", "one value or two"});
  expect_error([&] { conv2d(x.to(DType::Int64), ones({2, 4, 3, 3})); },
               {"conv2d", "floating point", "int64"});
  expect_error([&] { conv1d(ones({1, 2, 4}), ones({3, 2, 6})); },
               {"conv1d", "larger than the padded input (4)"});
  expect_error([&] { conv1d(ones({1, 2, 4}), ones({3, 2, 2}), {}, 1, 0, 1, 2); },
               {"conv1d", "groups = 2", "divide"});
  expect_error([&] { max_pool2d(x, {2}, {}, {2}); }, {"max_pool2d", "padding", "at most half"});
  expect_error([&] { avg_pool2d(ones({1, 1, 2, 2}), {3}); },
               {"avg_pool2d", "larger than the padded input"});
  expect_error([&] { max_pool2d(ones({4, 4}), {2}); }, {"max_pool2d", "[N, C, H, W]"});
  expect_error([&] { avg_pool2d(x, {0}); }, {"avg_pool2d", "kernel_size", "at least 1"});
  expect_error([&] { adaptive_avg_pool2d(x, {0, 2}); },
               {"adaptive_avg_pool2d", "output_size", "at least 1"});
  expect_error([&] { adaptive_avg_pool2d(x.to(DType::Int64), {2}); },
               {"adaptive_avg_pool2d", "floating"});
}

TEST(ConvPool, ResultsAsPyTorch) {
  const Tensor x = arange(0, 16, 1).view({1, 1, 4, 4});
  // 2x2 window sums; stride 2 takes every other window.
  EXPECT_EQ(values(conv2d(x, ones({1, 1, 2, 2}))),
            (std::vector<float>{10, 14, 18, 26, 30, 34, 42, 46, 50}));
  EXPECT_EQ(values(conv2d(x, ones({1, 1, 2, 2}), tensor({1}), {2})),
            (std::vector<float>{11, 19, 43, 51}));
  // Depthwise: each channel with its own kernel.
  const Tensor two = cat({x, x * 10.0}, 1);
  const Tensor dw = conv2d(two, ones({2, 1, 4, 4}), {}, {1}, {0}, {1}, 2);
  EXPECT_EQ(dw.sizes(), (Shape{1, 2, 1, 1}));
  EXPECT_EQ(values(dw), (std::vector<float>{120, 1200}));
  // max_pool2d's stride defaults to the kernel.
  EXPECT_EQ(values(max_pool2d(x, {2})), (std::vector<float>{5, 7, 13, 15}));
  // With padding, count_include_pad decides the corner's divisor: 4 / 9 or 4 / 4.
  const Tensor o = ones({1, 1, 3, 3});
  EXPECT_FLOAT_EQ(avg_pool2d(o, {3}, {1}, {1}).to_vector<float>()[0], 4.0f / 9.0f);
  EXPECT_EQ(values(avg_pool2d(o, {3}, {1}, {1}, false)), std::vector<float>(9, 1.0f));
  // A global window is the mean.
  EXPECT_FLOAT_EQ(adaptive_avg_pool2d(x, {1}).item<float>(), 7.5f);
  // Windows [0, 2) and [1, 3) of a length of 3 into 2: PyTorch's floor/ceil rule.
  EXPECT_EQ(values(adaptive_avg_pool2d(arange(0, 9, 1).view({1, 3, 3}), {2})),
            (std::vector<float>{2, 3, 5, 6}));
  // The gradient of max pooling lands on each window's largest element.
  Tensor leaf = x.clone().requires_grad_(true);
  max_pool2d(leaf, {2}).sum().backward();
  EXPECT_EQ(values(leaf.grad()),
            (std::vector<float>{0, 0, 0, 0, 0, 1, 0, 1, 0, 0, 0, 0, 0, 1, 0, 1}));
}

}  // namespace
}  // namespace ember::test
