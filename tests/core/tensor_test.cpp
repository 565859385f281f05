// Tensors: views and storage sharing, copies, metadata of view ops, host data access,
// printing, and the errors that guard them.
#include <gtest/gtest.h>

#include <cmath>

#include "ember/ember.h"
#include "support/expect_error.h"

namespace ember {
namespace {

using test::expect_error;

Tensor grid(int64_t rows, int64_t cols, DType t = DType::Float32) {
  return arange(0, double(rows * cols), 1, t).view({rows, cols});
}

template <class T>
std::vector<T> values(const Tensor& t) {
  return t.to_vector<T>();
}

// ---- views share storage and versions ----

TEST(TensorViews, ShareStorageAndVersion) {
  Tensor x = grid(3, 4);
  std::vector<Tensor> views = {x.view({12}),      x.t(),
                               x.slice(1, 1, 3),  x.select(0, 2),
                               x.unsqueeze(0),    x.expand({2, 3, 4}),
                               x.permute({1, 0}), x.as_strided({2, 2}, {4, 1}, 5),
                               x.reshape({2, 6})};
  for (const Tensor& v : views) {
    EXPECT_EQ(v.impl()->storage, x.impl()->storage);
    EXPECT_TRUE(v.impl()->is_view);
  }
  const uint32_t before = x.version();
  Tensor row = x.select(0, 1);
  row.add_(100);  // writes through the view into x
  EXPECT_EQ(values<float>(x.select(0, 1)), (std::vector<float>{104, 105, 106, 107}));
  EXPECT_EQ(values<float>(x.select(0, 0)), (std::vector<float>{0, 1, 2, 3}));
  EXPECT_EQ(x.version(), before + 1);
  for (const Tensor& v : views) EXPECT_EQ(v.version(), x.version());
  x.mul_(2);  // and a write into the base shows through every view
  EXPECT_EQ(x.version(), before + 2);
  EXPECT_EQ(views[3].version(), before + 2);
  EXPECT_EQ(values<float>(views[3]), (std::vector<float>{16, 18, 20, 22}));
  EXPECT_EQ(values<float>(views[1].select(0, 1)), (std::vector<float>{2, 210, 18}));
}

TEST(TensorViews, DetachSharesStorageToo) {
  Tensor x = grid(2, 2);
  Tensor d = x.detach();
  EXPECT_EQ(d.impl()->storage, x.impl()->storage);
  d.fill_(3);
  EXPECT_EQ(values<float>(x), (std::vector<float>{3, 3, 3, 3}));
  EXPECT_EQ(x.version(), d.version());
}

// ---- reshape, contiguous, clone ----

TEST(TensorCopies, ReshapeOfNonContiguousCopies) {
  Tensor x = grid(3, 4);
  Tensor t = x.t();  // [4, 3], strides [1, 4]
  ASSERT_FALSE(t.is_contiguous());
  Tensor r = t.reshape({12});
  EXPECT_NE(r.impl()->storage, x.impl()->storage);
  EXPECT_TRUE(r.is_contiguous());
  EXPECT_EQ(values<float>(r), (std::vector<float>{0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11}));
  r.fill_(-1);
  EXPECT_EQ(values<float>(x)[0], 0.0f);  // the copy is independent
  // A reshape that strides allow stays a view, even of a non-contiguous tensor.
  Tensor s = x.slice(0, 0, 3, 2);  // rows 0 and 2: [2, 4], strides [8, 1]
  Tensor v = s.reshape({2, 2, 2});
  EXPECT_EQ(v.impl()->storage, x.impl()->storage);
  EXPECT_EQ(v.strides(), (Shape{8, 2, 1}));
  EXPECT_EQ(values<float>(v), (std::vector<float>{0, 1, 2, 3, 8, 9, 10, 11}));
  // Reshape to the same shape returns the tensor itself.
  EXPECT_EQ(x.reshape({3, 4}).impl(), x.impl());
  EXPECT_EQ(x.reshape({-1, 6}).sizes(), (Shape{2, 6}));
}

TEST(TensorCopies, ContiguousAndClone) {
  Tensor x = grid(2, 3);
  EXPECT_EQ(x.contiguous().impl(), x.impl());
  Tensor t = x.t();
  Tensor c = t.contiguous();
  EXPECT_NE(c.impl()->storage, x.impl()->storage);
  EXPECT_EQ(c.sizes(), (Shape{3, 2}));
  EXPECT_EQ(c.strides(), (Shape{2, 1}));
  EXPECT_EQ(c.storage_offset(), 0);
  EXPECT_EQ(values<float>(c), (std::vector<float>{0, 3, 1, 4, 2, 5}));
  Tensor k = x.clone();
  EXPECT_NE(k.impl()->storage, x.impl()->storage);
  EXPECT_EQ(values<float>(k), values<float>(x));
  // A size-1 dim may have any stride and still be contiguous.
  Tensor col = grid(3, 4).slice(1, 2, 3);  // [3, 1], strides [4, 1]
  EXPECT_FALSE(col.is_contiguous());
  Tensor row = grid(3, 4).slice(0, 1, 2);  // [1, 4], strides [4, 1], offset 4
  EXPECT_TRUE(row.is_contiguous());
  EXPECT_EQ(row.storage_offset(), 4);
  // So is any tensor without elements, whatever its strides.
  Tensor empty_rows = zeros({2, 0});
  EXPECT_TRUE(empty_rows.is_contiguous());
  EXPECT_EQ(empty_rows.contiguous().impl(), empty_rows.impl());
  EXPECT_TRUE(grid(3, 4).t().slice(0, 2, 2).is_contiguous());
}

// ---- view metadata ----

TEST(TensorViews, ExpandPermuteSliceSelectAsStridedMetadata) {
  Tensor x = grid(3, 4);  // strides [4, 1]
  Tensor e = x.select(1, 2).unsqueeze(1).expand({2, 3, 5});
  EXPECT_EQ(e.sizes(), (Shape{2, 3, 5}));
  EXPECT_EQ(e.strides(), (Shape{0, 4, 0}));
  EXPECT_EQ(e.storage_offset(), 2);
  EXPECT_EQ(x.expand({-1, 4}).impl(), x.impl());  // nothing to expand

  Tensor y = arange(24).view({2, 3, 4});
  Tensor p = y.permute({2, 0, 1});
  EXPECT_EQ(p.sizes(), (Shape{4, 2, 3}));
  EXPECT_EQ(p.strides(), (Shape{1, 12, 4}));
  EXPECT_EQ(y.permute({-1, 0, 1}).strides(), p.strides());
  EXPECT_EQ(y.transpose(0, 2).sizes(), (Shape{4, 3, 2}));

  Tensor s = y.slice(2, 1, 4, 2);
  EXPECT_EQ(s.sizes(), (Shape{2, 3, 2}));
  EXPECT_EQ(s.strides(), (Shape{12, 4, 2}));
  EXPECT_EQ(s.storage_offset(), 1);
  EXPECT_EQ(values<int64_t>(s.select(0, 1).select(0, 2)), (std::vector<int64_t>{21, 23}));
  // Out-of-range bounds clamp; negative ones count from the end; empty slices are fine.
  EXPECT_EQ(y.slice(1, -2, 100).sizes(), (Shape{2, 2, 4}));
  EXPECT_EQ(y.slice(1, 2, 1).sizes(), (Shape{2, 0, 4}));

  Tensor sel = y.select(1, -1);
  EXPECT_EQ(sel.sizes(), (Shape{2, 4}));
  EXPECT_EQ(sel.strides(), (Shape{12, 1}));
  EXPECT_EQ(sel.storage_offset(), 8);

  Tensor a = y.as_strided({3, 3}, {5, 1}, 2);
  EXPECT_EQ(a.sizes(), (Shape{3, 3}));
  EXPECT_EQ(a.strides(), (Shape{5, 1}));
  EXPECT_EQ(a.storage_offset(), 2);
  EXPECT_EQ(values<int64_t>(a), (std::vector<int64_t>{2, 3, 4, 7, 8, 9, 12, 13, 14}));

  Tensor n = y.narrow(2, 1, 2);
  EXPECT_EQ(n.sizes(), (Shape{2, 3, 2}));
  EXPECT_EQ(n.storage_offset(), 1);
  EXPECT_EQ(y.flatten(1).sizes(), (Shape{2, 12}));
  EXPECT_EQ(y.unsqueeze(-1).sizes(), (Shape{2, 3, 4, 1}));
  EXPECT_EQ(y.unsqueeze(-1).squeeze().sizes(), (Shape{2, 3, 4}));
  auto parts = y.split(3, 2);
  ASSERT_EQ(parts.size(), 2u);
  EXPECT_EQ(parts[1].sizes(), (Shape{2, 3, 1}));
  EXPECT_EQ(parts[1].storage_offset(), 3);
  EXPECT_EQ(y.size(-1), 4);
  EXPECT_EQ(y.stride(0), 12);
}

// ---- host data access ----

TEST(TensorData, ItemAndToVector) {
  EXPECT_EQ(scalar_tensor(2.5, DType::Float32).item(), 2.5);
  EXPECT_EQ(scalar_tensor(-7, DType::Int32).item<int>(), -7);
  EXPECT_EQ(tensor({3}, DType::Float16).item(), 3.0);  // one element, 1-D
  EXPECT_EQ(full({1, 1}, 1, DType::Bool).item(), 1.0);
  EXPECT_TRUE(bool(scalar_tensor(1, DType::Bool)));
  EXPECT_FALSE(bool(scalar_tensor(0, DType::Float64)));
  int64_t big = (int64_t(1) << 53) + 1;  // not a double: item() rounds, to_vector does not
  Tensor b = full({1}, 0, DType::Int64);
  b.data_ptr<int64_t>()[0] = big;
  EXPECT_EQ(b.to_vector<int64_t>()[0], big);

  Tensor x = grid(2, 3, DType::Float64).t();  // non-contiguous: logical order comes back
  EXPECT_EQ(values<double>(x), (std::vector<double>{0, 3, 1, 4, 2, 5}));
  EXPECT_EQ(values<int32_t>(tensor({2.7, -2.7})), (std::vector<int32_t>{2, -2}));  // truncates
  EXPECT_EQ(values<float>(tensor({1, 0, 1}, DType::Bool)), (std::vector<float>{1, 0, 1}));
  EXPECT_TRUE(values<float>(zeros({0, 5})).empty());
  Tensor h = tensor({0.1}, DType::BFloat16);
  EXPECT_EQ(values<float>(h)[0], BFloat16(0.1f));
}

// ---- printing ----

TEST(TensorPrint, FloatIntBoolScalarsAndEmpty) {
  EXPECT_EQ(to_string(tensor({1.5, 2, -3})), "tensor([ 1.5000,  2.0000, -3.0000])");
  EXPECT_EQ(to_string(tensor({1, 2, -3})), "tensor([ 1.,  2., -3.])");
  EXPECT_EQ(to_string(tensor({1, 22}, DType::Int64)), "tensor([ 1, 22])");
  EXPECT_EQ(to_string(tensor({1, 2}, DType::Int32)), "tensor([1, 2], dtype=int32)");
  EXPECT_EQ(to_string(tensor({1, 0, 1}, DType::Bool)), "tensor([ True, False,  True])");
  EXPECT_EQ(to_string(tensor({0.5}, DType::Float64)), "tensor([0.5000], dtype=float64)");
  EXPECT_EQ(to_string(tensor({1.5, 2}, DType::Float16)), "tensor([1.5000, 2.0000], dtype=float16)");
  EXPECT_EQ(to_string(scalar_tensor(3.25, DType::Float32)), "tensor(3.2500)");
  EXPECT_EQ(to_string(scalar_tensor(-4, DType::Int64)), "tensor(-4)");
  EXPECT_EQ(to_string(scalar_tensor(1, DType::Bool)), "tensor(True)");
  EXPECT_EQ(to_string(zeros({0})), "tensor([])");
  EXPECT_EQ(to_string(zeros({2, 0})), "tensor([], size=(2, 0))");
  EXPECT_EQ(to_string(zeros({0, 3}, DType::Int32)), "tensor([], size=(0, 3), dtype=int32)");
  EXPECT_EQ(to_string(Tensor()), "tensor(undefined)");
  // Special values, scientific notation (tiny values, or magnitudes 1000x apart).
  EXPECT_EQ(to_string(tensor({NAN, -INFINITY, 2})), "tensor([ nan, -inf,   2.])");
  EXPECT_EQ(to_string(tensor({1e-5, 1})), "tensor([1.0000e-05, 1.0000e+00])");
  EXPECT_EQ(to_string(tensor({0.001, 10})), "tensor([1.0000e-03, 1.0000e+01])");
  EXPECT_EQ(to_string(tensor({1, 5000})), "tensor([1.0000e+00, 5.0000e+03])");
  // Integers beyond 2^53 print exactly.
  Tensor big = full({1}, 0, DType::Int64);
  big.data_ptr<int64_t>()[0] = (int64_t(1) << 53) + 1;
  EXPECT_EQ(to_string(big), "tensor([9007199254740993])");
}

TEST(TensorPrint, NestedAlignedAndAutograd) {
  EXPECT_EQ(to_string(arange(6).view({2, 3})), "tensor([[0, 1, 2],\n        [3, 4, 5]])");
  EXPECT_EQ(to_string(arange(12).view({2, 3, 2}).slice(1, 1, 3)),
            "tensor([[[ 2,  3],\n"
            "         [ 4,  5]],\n"
            "\n"
            "        [[ 8,  9],\n"
            "         [10, 11]]])");
  // Non-contiguous tensors print in logical order.
  EXPECT_EQ(to_string(arange(6).view({2, 3}).t()),
            "tensor([[0, 3],\n        [1, 4],\n        [2, 5]])");
  Tensor x = tensor({1, 2}).requires_grad_();
  EXPECT_EQ(to_string(x), "tensor([1., 2.], requires_grad=True)");
  EXPECT_EQ(to_string(x * x), "tensor([1., 4.], grad_fn=<mul_backward>)");
  EXPECT_EQ(to_string(x.detach()), "tensor([1., 2.])");
}

TEST(TensorPrint, LongRowsWrapAndLargeTensorsSummarize) {
  EXPECT_EQ(to_string(arange(30)),
            "tensor([ 0,  1,  2,  3,  4,  5,  6,  7,  8,  9, 10, 11, 12, 13, 14, 15, 16, 17,\n"
            "        18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29])");
  EXPECT_EQ(to_string(arange(1001)), "tensor([   0,    1,    2,  ...,  998,  999, 1000])");
  EXPECT_EQ(to_string(arange(1000)).find("..."), std::string::npos);  // 1000 is not summarized
  std::string s = to_string(arange(2000).view({200, 10}));
  EXPECT_EQ(s.find("tensor([[   0,    1,    2,  ...,    7,    8,    9],\n"
                   "        [  10,   11,   12,  ...,   17,   18,   19],\n"),
            0u)
      << s;
  EXPECT_NE(s.find("        ...,\n        [1970, 1971, 1972,  ..., 1977, 1978, 1979],"),
            std::string::npos)
      << s;
  EXPECT_LT(s.size(), 600u);  // six rows of six values, not two thousand values
}

// ---- errors ----

TEST(TensorErrors, BadViewShapes) {
  Tensor x = grid(2, 3);
  expect_error([&] { x.view({4}); }, "view: shape [4] is invalid for a tensor of 6 elements");
  expect_error([&] { x.view({-1, -1}); }, "only one dimension can be -1");
  expect_error([&] { x.view({4, -1}); }, "invalid for a tensor of 6 elements");
  expect_error([&] { x.view({2, -3}); }, "invalid size -3");
  expect_error([&] { x.t().view({6}); }, "use reshape()");
  expect_error([&] { x.reshape({5}); }, "reshape");
  expect_error([&] { x.expand({2, 4}); }, "expand");
  expect_error([&] { x.expand({3}); }, "fewer dims");
  expect_error([&] { x.permute({0, 0}); }, "repeats");
  expect_error([&] { x.permute({0}); }, "permute: got 1 dims");
  expect_error([&] { x.as_strided({3}, {3}, 0); }, "reach past the end of the storage");
  expect_error([&] { x.as_strided({2}, {1}, -1); }, "negative storage offset");
  expect_error([&] { x.split_with_sizes({1, 1}, 1); }, "sum to 2");
  expect_error([&] { x.slice(0, 0, 1, 0); }, "step must be positive");
  expect_error([&] { x.narrow(1, 2, 2); }, "exceeds the size 3");
}

TEST(TensorErrors, OutOfRangeDimsAndIndices) {
  Tensor x = grid(2, 3);
  expect_error([&] { x.size(2); }, "size: dim 2 is out of range for a tensor of 2 dims");
  expect_error([&] { x.stride(-3); }, "stride: dim -3");
  expect_error([&] { x.select(1, 3); }, "select: index 3 is out of range for dim 1 of size 3");
  expect_error([&] { x.select(0, -3); }, "index -3");
  expect_error([&] { x.select(2, 0); }, "select: dim 2");
  expect_error([&] { x.transpose(0, 2); }, "transpose");
  expect_error([&] { x.slice(-3, 0, 1); }, "slice: dim -3");
  expect_error([&] { x.flatten(1, 0); }, "start_dim 1 is after end_dim 0");
  expect_error([&] { scalar_tensor(1, DType::Float32).select(0, 0); }, "0-dim");
  expect_error([&] { scalar_tensor(1, DType::Float32).size(0); }, "0-dim");
  expect_error([&] { x.sum({0, -2}); }, "appears more than once");
}

TEST(TensorErrors, HostAccess) {
  Tensor x = grid(2, 3);
  expect_error([&] { x.item(); }, "item: a tensor with 6 elements (shape [2, 3])");
  expect_error([&] { zeros({0}).item(); }, "0 elements");
  expect_error([&] { (void)bool(x); }, "ambiguous");
  expect_error([&] { x.data_ptr<double>(); }, "data_ptr<float64>: tensor has dtype float32");
  expect_error([&] { Tensor().item(); }, "undefined");
  expect_error([&] { zeros({-1}); }, "negative size");
  expect_error([&] { tensor({1}, DType::Int64).requires_grad_(); }, "floating-point");
  Tensor w = zeros({2}).requires_grad_();
  expect_error([&] { (w * 2).requires_grad_(false); }, "leaf");
}

}  // namespace
}  // namespace ember

namespace ember {
namespace {

TEST(Devices, ParseByName) {
  EXPECT_EQ(parse_device("cpu"), kCPU);
  EXPECT_EQ(parse_device("cuda"), (Device{DeviceType::CUDA, 0}));
  EXPECT_EQ(parse_device("cuda:3"), (Device{DeviceType::CUDA, 3}));
  for (const char* bad : {"gpu", "cuda:", "cuda:-1", "cuda:1x", "CPU", ""})
    test::expect_error([&] { parse_device(bad); }, {"unknown device", "expected cpu, cuda or cuda:N"});
}

}  // namespace
}  // namespace ember
