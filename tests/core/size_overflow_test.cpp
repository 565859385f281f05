// Sizes that do not fit: element and byte counts past int64, negative sizes, and shapes whose
// bytes fit but cannot be had. Each is an ember::Error naming the op, the shape and the
// limit, raised before anything is allocated or written (a count that wrapped used to
// allocate a tiny block, or none, and the kernel then wrote far past it).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>

#include "core/allocator.h"
#include "ember/ember.h"
#include "support/expect_error.h"

namespace ember {
namespace {

using test::expect_error;

constexpr int64_t k31 = int64_t(1) << 31, k32 = int64_t(1) << 32, k40 = int64_t(1) << 40,
                  k62 = int64_t(1) << 62;
const std::string kLimit = "9223372036854775807";      // INT64_MAX, named by every overflow error
const std::string kHuge = "[2147483648, 2147483648]";  // 2^62 elements: 2^64 bytes of float32

// ---- fresh tensors whose byte count wraps ----

TEST(SizeOverflow, FactoriesWhoseBytesWrapAreErrors) {
  // 2^62 elements fit in int64; their 2^64 bytes of float32 wrap to 0.
  expect_error([] { zeros({k31, k31}); }, {"zeros", kHuge, "too many elements", kLimit});
  expect_error([] { ones({k31, k31}); }, {"ones", kHuge, kLimit});
  expect_error([] { full({k31, k31}, 2.0); }, {"full", kHuge, kLimit});
  expect_error([] { empty({k31, k31}); }, {"empty", kHuge, "float32", kLimit});
  // One byte an element fits; eight do not.
  expect_error([] { zeros({k31, k31, 2}, DType::Float64); }, {"zeros", "float64", kLimit});
  // The element count itself past int64.
  expect_error([] { zeros({k32, k32}); }, {"zeros", "[4294967296, 4294967296]", kLimit});
}

TEST(SizeOverflow, EmptyThenFillNeverWrites) {
  // empty used to hand back a 0-byte block for 2^62 floats, which fill_ then wrote.
  expect_error([] { empty({k31, k31}).fill_(1); }, {"empty", kHuge});
}

TEST(SizeOverflow, RandomOpsCheckBeforeDrawing) {
  expect_error([] { randn({k31, k31}); }, {"randn", kHuge, kLimit});
  expect_error([] { rand({k31, k31}); }, {"rand", kHuge});
  expect_error([] { randint(0, 5, {k31, k31}); }, {"randint", kHuge});
  expect_error([] { bernoulli({k31, k31}, 0.5); }, {"bernoulli", kHuge});
  // The failed call reserved no draws: the stream goes on as if it had not been made.
  manual_seed(7);
  std::vector<float> want = randn({8}).to_vector<float>();
  manual_seed(7);
  expect_error([] { randn({k31, k31}); }, "randn");
  EXPECT_EQ(randn({8}).to_vector<float>(), want);
}

TEST(SizeOverflow, NegativeSizesAreErrors) {
  expect_error([] { zeros({2, -1}); }, {"zeros", "negative size -1", "[2, -1]"});
  expect_error([] { empty({-5}); }, {"empty", "negative size"});
  expect_error([] { randn({3, -3}); }, {"randn", "negative size"});
  expect_error([] { full({-1}, 1.0); }, {"full", "negative size"});
  expect_error([] { ones({1}).expand({-2}); }, "expand");
  expect_error([] { zeros({4}).view({-2, -2}); }, "view");
  expect_error([] { zeros({4}).reshape({2, -4}); }, {"reshape", "invalid size -4"});
  expect_error([] { zeros({4}).as_strided({-1}, {1}, 0); }, {"as_strided", "negative size"});
  expect_error([] { zeros({4}).as_strided({2}, {-1}, 0); }, {"as_strided", "negative stride"});
}

// ---- views are free; materialising them is not ----

TEST(SizeOverflow, ExpandedViewsFitButTheirCopiesDoNot) {
  Tensor v = ones({1, 1}).expand({k31, k31});  // a view: no memory
  EXPECT_EQ(v.numel(), k62);
  expect_error([&] { v.contiguous(); }, {"contiguous", kHuge, "float32", kLimit});
  expect_error([&] { v.clone(); }, {"clone", kHuge, kLimit});
  expect_error([&] { (void)(v + 1.0); }, {"add", kHuge, kLimit});
  expect_error([&] { v.to(DType::Float64); }, {kHuge, "float64", kLimit});
  // A view whose element count does not fit is refused as it is made.
  expect_error(
      [] {
        ones({1, 1, 1}).expand({k32, k32, 2});
      },
      {"expand", "[4294967296, 4294967296, 2]", "too many elements", kLimit});
}

TEST(SizeOverflow, BroadcastResultsThatOverflow) {
  Tensor col = ones({1, 1}).expand({k32, 1}), row = ones({1, 1}).expand({1, k32});
  expect_error([&] { (void)(col * row); }, {"mul", "[4294967296, 4294967296]", kLimit});
  expect_error(
      [&] {
        where(ones({1, 1}).gt(0.0), col, row);
      },
      {"[4294967296, 4294967296]", kLimit});
  expect_error([] { broadcast_shapes({k32, 1}, {1, k32}); }, {"broadcast", kLimit});
}

TEST(SizeOverflow, MatmulOutputsThatOverflow) {
  Tensor a = ones({1, 1}).expand({k32, 1}), b = ones({1, 1}).expand({1, k32});
  expect_error([&] { matmul(a, b); }, {"matmul", "[4294967296, 4294967296]", kLimit});
  // Fits in elements, not in bytes: 2^62 floats.
  Tensor c = ones({1, 1}).expand({k31, 1}), d = ones({1, 1}).expand({1, k31});
  expect_error([&] { matmul(c, d); }, {"matmul", kHuge, kLimit});
  // Through the batch dims.
  Tensor e = ones({1, 1, 1}).expand({k31, 1, 1}), f = ones({1, 1, 1}).expand({1, 1, k32});
  expect_error([&] { matmul(e, f); }, {"matmul", kLimit});
}

TEST(SizeOverflow, CatWhoseTotalOverflows) {
  Tensor a = ones({1}).expand({k62});
  // 2^63 elements: the dim's size itself wraps.
  expect_error([&] { cat({a, a}); }, {"cat", "dim 0", kLimit});
  expect_error([&] { cat({a, a, a, a, a}); }, {"cat", kLimit});
  // The total fits in int64, its bytes do not.
  Tensor b = ones({1}).expand({k62 / 2});
  expect_error([&] { cat({b, b}); }, {"cat", "[4611686018427387904]", kLimit});
  expect_error([&] { stack({b, b}); }, {"cat", kLimit});
}

TEST(SizeOverflow, ReshapeAndViewToShapesThatOverflow) {
  // No element either way, but [2^32, 2^32] counts 2^64, which wrapped to 0 and passed.
  expect_error([] { zeros({0}).reshape({k32, k32}); }, {"reshape", "too many elements", kLimit});
  expect_error([] { zeros({0}).view({k32, k32, 0}); }, {"view", kLimit});
  expect_error([] { zeros({0}).reshape({-1, k62, 4}); }, {"reshape", kLimit});
  expect_error([] { zeros({4}).view({-1, k32, k32}); }, {"view", kLimit});
  // Sizes that fit are still fine around an empty dim.
  EXPECT_EQ(zeros({0}).reshape({k31, 0}).sizes(), (Shape{k31, 0}));
  EXPECT_EQ(zeros({0}).reshape({-1, k31}).sizes(), (Shape{0, k31}));
}

TEST(SizeOverflow, ArangeWithAHugeCount) {
  // 1e30 values do not even convert to int64.
  expect_error([] { arange(0, 1e30); }, {"arange", "too many elements", kLimit});
  expect_error([] { arange(0, 1, 1e-30); }, {"arange", "too many elements"});
  // 2^62 values fit; their float32 bytes do not.
  expect_error([] { arange(0, double(k62)); }, {"arange", "[4611686018427387904]", kLimit});
  expect_error([] { arange(0, 1, std::nan("")); }, {"arange", "step"});
}

TEST(SizeOverflow, AsStridedOffsetsThatOverflow) {
  Tensor x = zeros({4});
  // The last element at 2 * 2^62 = 2^63: wrapped negative, it skipped the storage check.
  expect_error([&] { x.as_strided({3}, {k62}, 0); }, {"as_strided", kLimit});
  // The last element at INT64_MAX fits; its end in bytes does not (and wrapped to 0).
  expect_error([&] { x.as_strided({2}, {INT64_MAX}, 0); }, {"as_strided", kLimit});
  expect_error([&] { x.as_strided({2}, {1}, INT64_MAX); }, "as_strided");
  EXPECT_EQ(x.as_strided({0, 5}, {INT64_MAX, k62}, 0).numel(), 0);  // no element, no offset
}

TEST(SizeOverflow, SliceSplitNarrowAndChunkNearInt64Max) {
  Tensor x = arange(0, 5, 1, DType::Int64);
  // (len + step - 1) / step overflowed to a negative size.
  Tensor s = x.slice(0, 0, 5, INT64_MAX);
  EXPECT_EQ(s.sizes(), (Shape{1}));
  EXPECT_EQ(s.to_vector<int64_t>(), (std::vector<int64_t>{0}));
  EXPECT_EQ(x.slice(0, 1, 5, k62).to_vector<int64_t>(), (std::vector<int64_t>{1}));
  // start + length overflowed and passed the check.
  expect_error([&] { x.narrow(0, 1, INT64_MAX); }, {"narrow", "exceeds the size 5"});
  // Sizes summing to 2^64 wrapped to the dim's size 0.
  expect_error(
      [] {
        zeros({0}).split_with_sizes({INT64_MAX, INT64_MAX, 2});
      },
      {"split_with_sizes", kLimit});
  std::vector<Tensor> parts = x.chunk(INT64_MAX);
  ASSERT_EQ(parts.size(), 5u);
  EXPECT_EQ(parts[4].to_vector<int64_t>(), (std::vector<int64_t>{4}));
}

// ---- bytes that fit but cannot be had ----

TEST(SizeOverflow, UnallocatableSizesAreErrorsWithTheSize) {
  // 2^40 floats: 4 TiB, a byte count that fits but more than this machine has.
  expect_error([] { zeros({k40}); }, {"out of memory", "4398046511104 bytes"});
  expect_error([] { empty({k40}); }, {"out of memory", "4398046511104 bytes"});
  expect_error([] { randn({k40}); }, {"out of memory", "4398046511104 bytes"});
  expect_error([] { ones({1}).expand({k40}).contiguous(); }, {"out of memory", "4398046511104"});
  expect_error([] { arange(0, double(k40), 1, DType::Int64); },
               {"out of memory", "8796093022208 bytes"});
  // Near SIZE_MAX the allocator's rounding would wrap to a small block.
  expect_error([] { cpu_alloc(SIZE_MAX - 3); }, {"out of memory", std::to_string(SIZE_MAX - 3)});
  // And memory is still there afterwards.
  EXPECT_EQ(zeros({1 << 20}).sum().item(), 0);
}

}  // namespace
}  // namespace ember
