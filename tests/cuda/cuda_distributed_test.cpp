// ember::distributed on one GPU: a process alone is a world of one (MPI's singleton, or the
// one-process world of a build without MPI), and its CUDA tensors go through NCCL as a
// communicator of one rank. DistributedDataParallel over it trains the baby GPT as the plain
// model does, step for step.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "ember/cuda.h"
#include "ember/distributed.h"
#include "ember/ember.h"
#include "ember/io.h"
#include "ember/nn.h"
#include "ember/optim.h"

namespace ember::test {
namespace {

namespace dist = ember::distributed;
const Device kGpu{DeviceType::CUDA, 0};

void join_alone() {
  if (dist::is_initialized()) return;
  dist::InitOptions o;
  o.abort_on_uncaught_exception = false;  // a failing test must not end the test binary
  dist::init(o);
}

const io::TokenDataset& text() {
  static const io::TokenDataset data = [] {
    std::ifstream f(std::string(EMBER_SOURCE_DIR) + "/data/tinyshakespeare.txt");
    std::stringstream ss;
    ss << f.rdbuf();
    const io::CharTokenizer tok = io::CharTokenizer::from_text(ss.str());
    std::vector<uint16_t> ids;
    for (int64_t id : tok.encode(ss.str().substr(0, 100000))) ids.push_back(uint16_t(id));
    return io::TokenDataset(std::move(ids), "tinyshakespeare");
  }();
  return data;
}

// The baby GPT on the GPU, 30 AdamW steps from seed 1's weights; with DDP wrapping it or not.
std::vector<double> train(bool ddp, nn::DDPStats* stats) {
  manual_seed(1);
  nn::GPT model(nn::GPTConfig{.block_size = 32, .vocab_size = 65, .n_layer = 2, .n_head = 2,
                              .n_embd = 64, .dropout = 0});
  model.to(kGpu);
  std::unique_ptr<nn::DistributedDataParallel> wrapper;
  nn::DDPOptions small;
  small.bucket_cap_mb = 0.05;  // several buckets
  if (ddp) wrapper = std::make_unique<nn::DistributedDataParallel>(model, small);
  optim::AdamW opt(optim::decay_groups(model, 0.1), 1e-3);
  std::vector<double> losses;
  for (int s = 0; s < 30; ++s) {
    auto [x, y] = text().get_batch(8, 32, 77, uint64_t(s), kGpu);
    opt.zero_grad();
    Tensor loss = model.loss(x, y);
    loss.backward();
    opt.step();
    losses.push_back(loss.detach().cpu().item());
  }
  if (wrapper && stats) *stats = wrapper->stats();
  return losses;
}

TEST(CudaDistributed, CollectivesOfOneRankKeepTheirData) {
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device on this machine";
  join_alone();
  ASSERT_EQ(dist::world_size(), 1);
  const Tensor x = arange(0, 12, 1, TensorOptions(DType::Float32)).to(kGpu);
  Tensor y = x.clone();
  dist::all_reduce(y, dist::ReduceOp::Avg);
  EXPECT_EQ((y - x).abs().amax().cpu().item(), 0.0);
  dist::broadcast(y, 0);
  EXPECT_EQ((y - x).abs().amax().cpu().item(), 0.0);
  const Tensor g = dist::all_gather(x);
  EXPECT_EQ(g.sizes(), x.sizes());
  EXPECT_EQ((g - x).abs().amax().cpu().item(), 0.0);
}

TEST(CudaDistributed, DdpOverNcclTrainsAsThePlainModelAtWorldSizeOne) {
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device on this machine";
  join_alone();
  nn::DDPStats stats;
  const std::vector<double> plain = train(false, nullptr), wrapped = train(true, &stats);
  ASSERT_EQ(plain.size(), wrapped.size());
  for (size_t s = 0; s < plain.size(); ++s)
    EXPECT_NEAR(wrapped[s], plain[s], 1e-6 * plain[s]) << "step " << s;
  EXPECT_LT(plain.back(), plain.front() - 0.5) << "it learns";
  EXPECT_GT(stats.buckets_started_early, 30);  // the grads went through NCCL, bucket by bucket
  EXPECT_EQ(stats.syncs, 30);
  std::printf("[cuda distributed] DDP over NCCL, world size 1: loss %.4f -> %.4f (plain %.4f -> "
              "%.4f)\n", wrapped.front(), wrapped.back(), plain.front(), plain.back());
}

}  // namespace
}  // namespace ember::test
