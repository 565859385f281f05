// The one-process world that init() makes in a build without MPI: rank 0 of 1, its header
// exchange hands back this rank's header, and its CPU collectives keep or copy their data.
#include <gtest/gtest.h>

#include "distributed/backend.h"
#include "ember/ember.h"

namespace ember::distributed {
namespace {

TEST(SingleWorld, IsRankZeroOfOneAndCollectivesKeepTheirData) {
  std::unique_ptr<World> w = make_single_world();
  EXPECT_EQ(w->rank(), 0);
  EXPECT_EQ(w->size(), 1);
  EXPECT_EQ(w->local_rank(), 0);
  EXPECT_TRUE(w->usable());
  CallHeader mine;
  mine.seq = 5;
  mine.numel = 12;
  std::vector<CallHeader> all;
  auto op = w->exchange(mine, all);
  EXPECT_TRUE(op->test());
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(all[0], mine);

  Backend& b = w->cpu_backend();
  const Tensor x = arange(0, 6, 1, TensorOptions(DType::Float32)).reshape({2, 3});
  Tensor y = x.clone();
  for (ReduceOp r : {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max, ReduceOp::Min})
    EXPECT_TRUE(b.all_reduce(y, r)->test());
  EXPECT_TRUE(b.broadcast(y, 0)->test());
  EXPECT_EQ(y.to_vector<float>(), x.to_vector<float>());
  Tensor gathered = zeros({2, 3}), scattered = zeros({2, 3});
  EXPECT_TRUE(b.all_gather(x, gathered)->test());
  EXPECT_TRUE(b.reduce_scatter(x, scattered, ReduceOp::Sum)->test());
  EXPECT_EQ(gathered.to_vector<float>(), x.to_vector<float>());
  EXPECT_EQ(scattered.to_vector<float>(), x.to_vector<float>());
  EXPECT_TRUE(b.barrier()->test());
  w->finalize();
}

}  // namespace
}  // namespace ember::distributed
