// Collectives over every rank against sums computed locally: each rank knows what every other
// rank passed (values made from the rank number), so it can check the result on its own.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "ember/cuda.h"
#include "ember/distributed.h"
#include "ember/ops.h"
#include "support/expect_error.h"

namespace {

using namespace ember;
namespace dist = ember::distributed;

// Element i of rank r's tensor: small integers, exact in every dtype (bfloat16 included).
double value(int r, int64_t i) { return double((r + 1) * (i % 7 + 1)); }

Tensor rank_tensor(int r, const Shape& shape, DType dtype) {
  Tensor t = empty(shape, TensorOptions(DType::Float64));
  double* p = t.data_ptr<double>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = value(r, i);
  return t.to(dtype);
}

// Sum over every rank of value(r, i).
double sum_over_ranks(int64_t i) {
  double s = 0;
  for (int r = 0; r < dist::world_size(); ++r) s += value(r, i);
  return s;
}

// Whether collectives compare the ranks' calls (EMBER_DIST_CHECK=0 turns it off).
bool checks_on() {
  const char* v = std::getenv("EMBER_DIST_CHECK");
  return !v || std::string(v) != "0";
}

class Collectives : public testing::TestWithParam<DType> {};

TEST(Distributed, RanksComeFromTheLaunch) {
  ASSERT_TRUE(dist::is_initialized());
  EXPECT_GE(dist::world_size(), 2) << "run under mpirun -np 2 or more";
  EXPECT_GE(dist::rank(), 0);
  EXPECT_LT(dist::rank(), dist::world_size());
  EXPECT_EQ(dist::local_rank(), dist::rank()) << "every rank runs on this host";
}

TEST_P(Collectives, AllReduceSums) {
  Tensor t = rank_tensor(dist::rank(), {5, 3}, GetParam());
  dist::all_reduce(t);
  EXPECT_EQ(t.dtype(), GetParam());
  std::vector<double> got = t.to_vector<double>();
  for (int64_t i = 0; i < t.numel(); ++i) ASSERT_EQ(got[size_t(i)], sum_over_ranks(i)) << i;
}

TEST_P(Collectives, AllReduceMaxAndMin) {
  Tensor hi = rank_tensor(dist::rank(), {6}, GetParam());
  Tensor lo = hi.clone();
  dist::all_reduce(hi, dist::ReduceOp::Max);
  dist::all_reduce(lo, dist::ReduceOp::Min);
  const int last = dist::world_size() - 1;
  for (int64_t i = 0; i < 6; ++i) {
    EXPECT_EQ(hi.to_vector<double>()[size_t(i)], value(last, i));
    EXPECT_EQ(lo.to_vector<double>()[size_t(i)], value(0, i));
  }
}

TEST_P(Collectives, BroadcastCopiesTheRoot) {
  const int root = dist::world_size() - 1;
  Tensor t = rank_tensor(dist::rank(), {2, 4}, GetParam());
  dist::broadcast(t, root);
  EXPECT_TRUE(t.to_vector<double>() == rank_tensor(root, {2, 4}, GetParam()).to_vector<double>());
}

TEST_P(Collectives, AllGatherConcatenatesInRankOrder) {
  Tensor g = dist::all_gather(rank_tensor(dist::rank(), {2, 3}, GetParam()));
  ASSERT_EQ(g.sizes(), (Shape{2 * dist::world_size(), 3}));
  EXPECT_EQ(g.dtype(), GetParam());
  for (int r = 0; r < dist::world_size(); ++r)
    EXPECT_TRUE(g.narrow(0, 2 * r, 2).to_vector<double>() ==
                rank_tensor(r, {2, 3}, GetParam()).to_vector<double>())
        << "block of rank " << r;
}

TEST_P(Collectives, ReduceScatterGivesEachRankItsBlock) {
  const int n = dist::world_size(), me = dist::rank();
  Tensor out = dist::reduce_scatter(rank_tensor(me, {2 * n, 3}, GetParam()));
  ASSERT_EQ(out.sizes(), (Shape{2, 3}));
  std::vector<double> got = out.to_vector<double>();
  for (int64_t i = 0; i < 6; ++i) EXPECT_EQ(got[size_t(i)], sum_over_ranks(me * 6 + i)) << i;
}

INSTANTIATE_TEST_SUITE_P(Dtypes, Collectives,
                         testing::Values(DType::Float32, DType::Float64, DType::Int64,
                                         DType::Int32, DType::BFloat16, DType::Float16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

// CUDA tensors go through NCCL on each rank's GPU (local_rank); skipped without a GPU per rank.
TEST(DistributedCuda, CollectivesOnGpusMatchTheSums) {
  if (!cuda::is_available() || cuda::device_count() < dist::world_size())
    GTEST_SKIP() << "needs a GPU per rank";
  const int dev = dist::local_rank(), me = dist::rank(), n = dist::world_size();
  for (DType dtype : {DType::Float32, DType::BFloat16, DType::Int64}) {
    Tensor t = rank_tensor(me, {5, 3}, dtype).cuda(dev);
    dist::all_reduce(t);
    std::vector<double> got = t.cpu().to_vector<double>();
    for (int64_t i = 0; i < 15; ++i) ASSERT_EQ(got[size_t(i)], sum_over_ranks(i)) << i;
    Tensor g = dist::all_gather(rank_tensor(me, {2}, dtype).cuda(dev));
    EXPECT_EQ(g.device(), t.device());
    EXPECT_EQ(g.cpu().to_vector<double>()[2 * (n - 1)], value(n - 1, 0));
    Tensor rs = dist::reduce_scatter(rank_tensor(me, {2 * n}, dtype).cuda(dev));
    EXPECT_EQ(rs.cpu().to_vector<double>()[0], sum_over_ranks(2 * me));
    Tensor b = rank_tensor(me, {3}, dtype).cuda(dev);
    dist::broadcast(b, 0);
    EXPECT_EQ(b.cpu().to_vector<double>()[2], value(0, 2));
  }
}

TEST(Distributed, AverageDividesTheSum) {
  Tensor t = rank_tensor(dist::rank(), {4}, DType::Float32);
  dist::all_reduce(t, dist::ReduceOp::Avg);
  for (int64_t i = 0; i < 4; ++i)
    EXPECT_FLOAT_EQ(t.to_vector<float>()[size_t(i)], float(sum_over_ranks(i) / dist::world_size()));
}

TEST(Distributed, NonContiguousTensorsAreReducedInPlace) {
  Tensor base = rank_tensor(dist::rank(), {3, 4}, DType::Float32);
  Tensor view = base.t();  // [4, 3], strides (1, 4)
  ASSERT_FALSE(view.is_contiguous());
  dist::all_reduce(view);
  std::vector<double> got = base.to_vector<double>();
  for (int64_t i = 0; i < 12; ++i) EXPECT_EQ(got[size_t(i)], sum_over_ranks(i)) << i;
}

TEST(Distributed, BoolTensorsAreBroadcastAndGathered) {
  Tensor t = full({3}, dist::rank() == 0 ? 1.0 : 0.0, DType::Bool);
  dist::broadcast(t, 0);
  EXPECT_EQ(t.to_vector<double>(), (std::vector<double>{1, 1, 1}));
  Tensor g = dist::all_gather(scalar_tensor(dist::rank() % 2, DType::Bool));
  ASSERT_EQ(g.sizes(), (Shape{dist::world_size()}));
  EXPECT_EQ(g.to_vector<double>()[1], 1.0);
}

TEST(Distributed, AsyncAllReducesCanOverlap) {
  Tensor a = rank_tensor(dist::rank(), {8}, DType::Float32);
  Tensor b = rank_tensor(dist::rank(), {3}, DType::Float64);
  dist::Work wa = dist::all_reduce_async(a), wb = dist::all_reduce_async(b);
  wb.wait();  // in another order than started
  wa.wait();
  wa.wait();  // a second wait returns at once
  EXPECT_TRUE(wa.is_completed());
  EXPECT_EQ(a.to_vector<double>()[7], sum_over_ranks(7));
  EXPECT_EQ(b.to_vector<double>()[2], sum_over_ranks(2));
}

TEST(Distributed, BarrierReturnsOnEveryRank) {
  dist::barrier();
  dist::barrier();
}

TEST(Distributed, MismatchedShapesRaiseOnEveryRankNamingThem) {
  if (!checks_on()) GTEST_SKIP() << "EMBER_DIST_CHECK=0";
  const int me = dist::rank();
  test::expect_error([&] { dist::all_reduce(ones({me == 1 ? 3 : 4})); },
                     {"distributed all_reduce (collective #", "on rank " + std::to_string(me),
                      "the ranks' calls differ",
                      me == 1 ? "rank 0 called all_reduce(sum) of a cpu float32 tensor [4]"
                              : "rank 1 called all_reduce(sum) of a cpu float32 tensor [3]"});
  // Every rank stopped at the same call, so the group goes on working.
  Tensor t = ones({2});
  dist::all_reduce(t);
  EXPECT_EQ(t.to_vector<double>()[0], double(dist::world_size()));
}

TEST(Distributed, MismatchedDtypesAndOpsRaise) {
  if (!checks_on()) GTEST_SKIP() << "EMBER_DIST_CHECK=0";
  const bool odd = dist::rank() % 2 == 1;
  test::expect_error(
      [&] { dist::all_reduce(ones({2}, odd ? DType::Float64 : DType::Float32)); },
      odd ? "rank 0 called all_reduce(sum) of a cpu float32" : "rank 1 called all_reduce(sum) of a cpu float64");
  test::expect_error(
      [&] {
        Tensor t = ones({2});
        if (odd) dist::broadcast(t, 0);
        else dist::all_reduce(t);
      },
      odd ? "rank 0 called all_reduce(sum)" : "rank 1 called broadcast(root 0)");
}

TEST(Distributed, BadArgumentsRaiseBeforeCommunicating) {
  const std::string r = "on rank " + std::to_string(dist::rank());
  test::expect_error([] { dist::all_reduce(ones({2}, DType::Int64), dist::ReduceOp::Avg); },
                     {"all_reduce(avg) " + r + ": int64 cannot be averaged"});
  test::expect_error([] { dist::broadcast(ones({2}), 99); }, "root 99 is not a rank");
  test::expect_error([] { dist::reduce_scatter(ones({3 * dist::world_size() + 1})); },
                     "divisible by the world size");
  test::expect_error([] { dist::all_reduce(ones({2}, DType::Bool)); },
                     "bool tensors cannot be reduced");
}

}  // namespace
