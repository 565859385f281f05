// interpolate: errors that name the op and what to do, and the well-known 2x2 results of
// PyTorch's F.interpolate.
#include <gtest/gtest.h>

#include "ember/ember.h"
#include "support/expect_error.h"

namespace ember::test {
namespace {

std::vector<float> values(const Tensor& t) { return t.to_vector<float>(); }

TEST(Interpolate, BadInputSaysWhatIsWrong) {
  const Tensor img = ones({1, 1, 2, 2});
  expect_error([&] { interpolate(img, {4}, "bicubic"); }, {"interpolate", "\"bicubic\""});
  expect_error([&] { interpolate(img, {4}, "nearest", true); }, {"interpolate", "align_corners"});
  expect_error([&] { interpolate(ones({1, 2, 2}), {4}); }, {"interpolate", "[N, C, H, W]"});
  expect_error([&] { interpolate(img, {0, 3}); }, {"interpolate", "positive"});
  expect_error([&] { interpolate(img.to(DType::Int64), {4}, "bilinear"); },
               {"interpolate", "floating"});
}

TEST(Interpolate, TwoByTwoAsPyTorch) {
  const Tensor img = tensor({1, 2, 3, 4}).view({1, 1, 2, 2});
  EXPECT_EQ(values(interpolate(img, {4})),
            (std::vector<float>{1, 1, 2, 2, 1, 1, 2, 2, 3, 3, 4, 4, 3, 3, 4, 4}));
  EXPECT_EQ(values(interpolate(img, {4}, "bilinear")),
            (std::vector<float>{1, 1.25, 1.75, 2, 1.5, 1.75, 2.25, 2.5, 2.5, 2.75, 3.25, 3.5,
                                3, 3.25, 3.75, 4}));
  EXPECT_EQ(values(interpolate(img, {3}, "bilinear", true)),
            (std::vector<float>{1, 1.5, 2, 2, 2.5, 3, 3, 3.5, 4}));
  // Integers keep their dtype under nearest.
  const Tensor ints = interpolate(img.to(DType::Int64), {1, 4});
  EXPECT_EQ(ints.dtype(), DType::Int64);
  EXPECT_EQ(ints.to_vector<int64_t>(), (std::vector<int64_t>{1, 1, 2, 2}));
}

}  // namespace
}  // namespace ember::test
