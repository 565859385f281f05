// Every registered OpCase on the GPU: inputs moved to cuda:0 (contiguous and strided), the
// case run there, and each output compared with the float64 reference at the dtype's
// tolerance, as tests/ops/op_table_test.cpp does on the CPU (factories in a case still make
// CPU tensors unless given a device). A case whose ops all have CUDA
// kernels must run; the cases that still reach an op without one are listed, not passed.
#include <gtest/gtest.h>

#include <set>

#include "ember/cuda.h"
#include "kernels/device_kernels.h"
#include "ember/autograd.h"
#include "support/op_cases.h"

namespace ember::test {
namespace {

const Device kGpu{DeviceType::CUDA, 0};

std::string describe(const OpCase& c, const Shapes& shapes, DType dtype, bool strided) {
  std::string s = c.name + " dtype=" + std::string(dtype_name(dtype)) + " shapes=";
  for (const Shape& sh : shapes) s += shape_str(sh);
  if (strided) s += " (strided inputs)";
  return s;
}

// The same values on the GPU, every other element of a buffer twice as wide (a strided view).
Tensor strided_on_gpu(const Tensor& t) {
  if (t.dim() == 0) return t;
  NoGradGuard g;
  Shape big = t.sizes();
  big.back() *= 2;
  TensorOptions o(t.dtype());
  o.device = kGpu;
  Tensor v = zeros(big, o).slice(-1, 0, big.back(), 2);
  v.copy_(t);
  return v;
}

// Pointwise cases whose ops all have CUDA kernels must run on the GPU (composites may reach
// other ops on the way).
bool all_on_gpu(const OpCase& c) {
  if (c.covers.empty()) return false;
  for (OpId op : c.covers)
    if (!device_kernel(op, kGpu) || op_info(op).kind != OpKind::Pointwise) return false;
  return true;
}

TEST(CudaOps, EveryCaseWithCudaKernelsMatchesTheFloat64Reference) {
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device on this machine";
  int ran = 0;
  std::set<std::string> not_yet;
  for (const OpCase& c : all_op_cases()) {
    const bool must_run = all_on_gpu(c);
    for (DType dtype : c.dtypes) {
      for (const Shapes& shapes : c.shapes) {
        Inputs in;
        if (c.make_inputs) in = c.make_inputs(shapes, dtype);
        else
          for (const Shape& s : shapes) in.push_back(random_tensor(s, dtype));
        std::vector<Ref> refs;
        for (const Tensor& t : in) refs.push_back(to_ref(t));
        std::vector<Ref> want = c.reference(refs);
        for (bool strided : {false, true}) {
          if (strided && !c.strided) continue;
          Inputs run_in;
          for (const Tensor& t : in) {
            Tensor g = t.defined() ? t.cuda() : t;
            run_in.push_back(strided && g.defined() ? strided_on_gpu(g) : g);
          }
          Inputs got;
          try {
            got = c.run(run_in);
          } catch (const std::exception& e) {
            // Not on the GPU yet: an op without a CUDA kernel, or a composite that makes CPU
            // tensors of its own. Listed below, never counted as passed.
            const std::string what = e.what();
            if (what.find("no kernel for cuda") != std::string::npos ||
                what.find("must be on the same device") != std::string::npos) {
              EXPECT_FALSE(must_run) << describe(c, shapes, dtype, strided)
                                     << ": every op it covers has a CUDA kernel, but: " << what;
              not_yet.insert(c.name);
              continue;
            }
            ADD_FAILURE() << describe(c, shapes, dtype, strided) << ": threw " << what;
            continue;
          }
          ++ran;
          ASSERT_EQ(got.size(), want.size()) << describe(c, shapes, dtype, strided);
          for (size_t k = 0; k < got.size(); ++k) {
            double tol = is_floating(got[k].dtype()) ? tolerance(dtype) * c.tol_scale : 0;
            std::string err = compare(got[k].cpu(), want[k], tol);
            EXPECT_EQ(err, "") << describe(c, shapes, dtype, strided) << " output " << k;
          }
        }
      }
    }
  }
  cuda::synchronize();
  std::string list;
  for (const std::string& n : not_yet) list += n + " ";
  std::printf("[cuda ops] %d runs on cuda:0 matched the reference; cases still reaching an op "
              "without a CUDA kernel (%zu): %s\n", ran, not_yet.size(), list.c_str());
  EXPECT_GT(ran, 0);
}

}  // namespace
}  // namespace ember::test

namespace ember::test {
namespace {

// argmax and argmin over few long rows (a decode step's logits), which the GPU splits over many
// blocks and joins in order: the CPU's positions, with ties (the first position wins) and NaN
// (its first position wins) placed in different splits, for rows read contiguously and through
// a transposed view.
TEST(CudaOps, ArgExtremesOfFewLongRowsMatchTheCpu) {
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device on this machine";
  NoGradGuard no_grad;
  const int64_t n = 50304;
  for (DType t : {DType::Float32, DType::BFloat16, DType::Float16, DType::Int64}) {
    manual_seed(uint64_t(n) + uint64_t(t));
    Tensor x = t == DType::Int64 ? randint(-1000, 1000, {3, n}) : randn({3, n}).to(t);
    // Row 0: its extremes twice, far apart; row 1: NaN twice (floats), or extremes again.
    for (const int64_t row : {0, 1})
      for (const int64_t at : {int64_t(777), int64_t(41000)}) {
        x.select(0, row).select(0, at).fill_(row == 1 && t != DType::Int64 ? NAN : 5000.0);
        x.select(0, row).select(0, at + 3).fill_(-5000.0);
      }
    const Tensor g = x.to(kGpu);
    const std::string what(dtype_name(t));
    for (const bool transposed : {false, true}) {
      const Tensor gx = transposed ? g.t().contiguous().t() : g;
      EXPECT_EQ(gx.argmax(-1).cpu().to_vector<int64_t>(), x.argmax(-1).to_vector<int64_t>())
          << what << (transposed ? " transposed" : "");
      EXPECT_EQ(gx.argmin(-1).cpu().to_vector<int64_t>(), x.argmin(-1).to_vector<int64_t>())
          << what << (transposed ? " transposed" : "");
    }
    // One row, as a decode step takes it from the last position's logits.
    EXPECT_EQ(g.select(0, 2).view({1, n}).argmax(-1, true).cpu().to_vector<int64_t>(),
              x.select(0, 2).view({1, n}).argmax(-1, true).to_vector<int64_t>())
        << what;
  }
}

}  // namespace
}  // namespace ember::test
