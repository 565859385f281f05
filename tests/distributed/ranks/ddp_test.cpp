// DistributedDataParallel: rank 0's parameters everywhere, buckets, averaged grads, no_sync, and
// the baby GPT trained for 50 steps on every rank's share of a global batch, against the same
// model trained in one process on the whole batch (every rank runs that reference run itself).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <set>
#include <sstream>

#include "autograd/node.h"
#include "ember/autograd.h"
#include "ember/compile.h"
#include "ember/distributed.h"
#include "ember/io.h"
#include "ember/nn.h"
#include "ember/ops.h"
#include "ember/optim.h"

namespace {

using namespace ember;
namespace dist = ember::distributed;

void expect_same_values(const Tensor& a, const Tensor& b, double tol, const std::string& what) {
  ASSERT_EQ(a.sizes(), b.sizes()) << what;
  std::vector<double> x = a.to_vector<double>(), y = b.to_vector<double>();
  for (size_t i = 0; i < x.size(); ++i)
    ASSERT_NEAR(x[i], y[i], tol) << what << " element " << i << " on rank " << dist::rank();
}

// A two-layer model whose loss on batch (x, y) is easy to compute on every rank for every rank.
struct Net : nn::Module {
  Net() : Module("Net") {
    fc1 = register_module("fc1", std::make_shared<nn::Linear>(6, 8));
    fc2 = register_module("fc2", std::make_shared<nn::Linear>(8, 2));
  }
  Tensor loss(const Tensor& x, const Tensor& y) const {
    Tensor d = fc2->forward(fc1->forward(x).relu()) - y;
    return (d * d).mean();
  }
  std::shared_ptr<nn::Linear> fc1, fc2;
};

// Rank r's batch at step s (the same on every rank that asks).
std::pair<Tensor, Tensor> batch_of(int r, int s) {
  manual_seed(1000 + 31 * uint64_t(s) + uint64_t(r));
  return {randn({4, 6}), randn({4, 2})};
}

TEST(DistributedDataParallel, StartsFromRankZerosParameters) {
  manual_seed(7);
  Net reference;  // what rank 0 builds
  manual_seed(7 + uint64_t(dist::rank()));
  Net net;
  nn::DistributedDataParallel ddp(net);
  auto want = reference.named_parameters(), got = net.named_parameters();
  for (size_t i = 0; i < got.size(); ++i)
    expect_same_values(got[i].second, want[i].second, 0, got[i].first);
}

TEST(DistributedDataParallel, BucketsHoldEveryParameterOnceInReverseOrder) {
  Net net;
  nn::DDPOptions small;
  small.bucket_cap_mb = 100.0 / (1024 * 1024);  // 100 bytes: about a parameter a bucket
  nn::DistributedDataParallel ddp(net, small);
  auto buckets = ddp.bucket_names();
  EXPECT_GT(buckets.size(), 2u);
  std::vector<std::string> order;
  for (auto& b : buckets) order.insert(order.end(), b.begin(), b.end());
  EXPECT_EQ(order, (std::vector<std::string>{"fc2.bias", "fc2.weight", "fc1.bias", "fc1.weight"}));
  nn::DistributedDataParallel one(net);
  EXPECT_EQ(one.bucket_names().size(), 1u);
}

// Backward of this rank's batches of steps [first, last) on net.
void backward_steps(const Net& net, int first, int last) {
  for (int s = first; s < last; ++s) {
    auto [x, y] = batch_of(dist::rank(), s);
    net.loss(x, y).backward();
  }
}

// Expects net's grads to be the average over the ranks of the grads of steps [0, steps), which
// `twin` (net's starting weights) computes here for every rank's batches.
void expect_averaged_grads(const Net& net, Net& twin, int steps) {
  twin.zero_grad();
  for (int r = 0; r < dist::world_size(); ++r)
    for (int s = 0; s < steps; ++s) {
      auto [x, y] = batch_of(r, s);
      twin.loss(x, y).backward();
    }
  auto got = net.named_parameters(), want = twin.named_parameters();
  for (size_t i = 0; i < got.size(); ++i)
    expect_same_values(got[i].second.grad(), want[i].second.grad() / double(dist::world_size()),
                       1e-6, got[i].first);
}

// A Net from `seed` and a copy of its weights.
struct NetAndTwin {
  explicit NetAndTwin(uint64_t seed) {
    manual_seed(seed);
    net = std::make_unique<Net>();
    twin = std::make_unique<Net>();
    twin->load_state_dict(net->state_dict());
  }
  std::unique_ptr<Net> net, twin;
};

TEST(DistributedDataParallel, BackwardAveragesTheGrads) {
  for (double cap_mb : {25.0, 100.0 / (1024 * 1024)}) {
    NetAndTwin n(3);
    nn::DDPOptions opts;
    opts.bucket_cap_mb = cap_mb;
    nn::DistributedDataParallel ddp(*n.net, opts);
    backward_steps(*n.net, 0, 1);
    expect_averaged_grads(*n.net, *n.twin, 1);
  }
}

TEST(DistributedDataParallel, NoSyncAccumulatesLocallyThenAveragesTheSum) {
  NetAndTwin n(4);
  nn::DistributedDataParallel ddp(*n.net);
  {
    auto guard = ddp.no_sync();
    backward_steps(*n.net, 0, 2);
  }
  // Still this rank's own sum: rank 0's and rank 1's differ.
  Tensor gathered = dist::all_gather(n.net->fc1->weight.grad().unsqueeze(0));
  EXPECT_GT((gathered.select(0, 0) - gathered.select(0, 1)).abs().amax().item(), 1e-3);
  backward_steps(*n.net, 2, 3);
  expect_averaged_grads(*n.net, *n.twin, 3);
}

TEST(DistributedDataParallel, SyncGradsAveragesGradsMadeWithoutHooks) {
  NetAndTwin n(5);
  nn::DistributedDataParallel ddp(*n.net);
  {
    auto guard = ddp.no_sync();
    backward_steps(*n.net, 0, 1);
  }
  ddp.sync_grads();
  expect_averaged_grads(*n.net, *n.twin, 1);
  EXPECT_EQ(ddp.stats().syncs, 1);
}

TEST(DistributedDataParallel, ABackwardThatThrowsLeavesItReadyForTheNext) {
  NetAndTwin n(6);
  nn::DDPOptions small;
  small.bucket_cap_mb = 100.0 / (1024 * 1024);
  nn::DistributedDataParallel ddp(*n.net, small);
  // Runs after DDP's own hook on the last parameter backward reaches: every bucket has started
  // when the backward throws, and its end callback is dropped.
  bool fail = true;
  register_post_accumulate_grad_hook(n.net->fc1->weight, [&](const Tensor&) {
    if (fail) throw Error("a hook fails on purpose");
  });
  EXPECT_THROW(backward_steps(*n.net, 0, 1), Error);
  fail = false;
  n.net->zero_grad();
  backward_steps(*n.net, 0, 1);
  expect_averaged_grads(*n.net, *n.twin, 1);
}

// ---- the baby GPT ----

const io::TokenDataset& shakespeare() {
  static const io::TokenDataset data = [] {
    std::ifstream f(std::string(EMBER_SOURCE_DIR) + "/data/tinyshakespeare.txt");
    std::stringstream ss;
    ss << f.rdbuf();
    const std::string text = ss.str().substr(0, 200000);
    io::CharTokenizer tok = io::CharTokenizer::from_text(ss.str());
    std::vector<uint16_t> ids;
    for (int64_t id : tok.encode(text)) ids.push_back(uint16_t(id));
    return io::TokenDataset(std::move(ids), "tinyshakespeare");
  }();
  return data;
}

// 2 layers, 2 heads, 64 wide, block 32, Shakespeare's 65 characters, no dropout.
nn::GPTConfig baby_gpt() {
  return nn::GPTConfig{.block_size = 32, .vocab_size = 65, .n_layer = 2, .n_head = 2,
                       .n_embd = 64, .dropout = 0};
}

constexpr int kSteps = 50;
constexpr int64_t kRowsPerRank = 4;

struct Curve {
  std::vector<double> loss;       // each step's loss over the global batch
  std::vector<double> grad_norm;  // each step's grad norm (the average's, under DDP)
  nn::DDPStats stats;
};

// Trains the baby GPT for kSteps AdamW steps from seed 1's weights on the global batch of each
// step (kRowsPerRank rows per rank, as get_batch draws them): all of it in this process
// (ddp = false), or this rank's rows with DistributedDataParallel averaging the grads (buckets
// of `cap_mb`); through compile (backend "eager") when `compiled`.
Curve train_gpt(bool ddp, bool compiled = false, double cap_mb = 0.05) {
  manual_seed(1 + (ddp ? uint64_t(dist::rank()) : 0));  // DDP must bring rank 0's weights
  nn::GPT model(baby_gpt());
  std::unique_ptr<nn::DistributedDataParallel> wrapper;
  nn::DDPOptions opts;
  opts.bucket_cap_mb = cap_mb;
  if (ddp) wrapper = std::make_unique<nn::DistributedDataParallel>(model, opts);
  optim::AdamW opt(optim::decay_groups(model, 0.1), 1e-3);
  CompileOptions copts;
  copts.backend = "eager";
  auto loss_fn = compile([&model](const Tensor& x, const Tensor& y) { return model.loss(x, y); },
                         copts);
  const int64_t global = kRowsPerRank * dist::world_size();
  Curve c;
  for (int s = 0; s < kSteps; ++s) {
    auto [x, y] = shakespeare().get_batch(global, 32, 1234, uint64_t(s));
    if (ddp) {
      x = x.narrow(0, dist::rank() * kRowsPerRank, kRowsPerRank);
      y = y.narrow(0, dist::rank() * kRowsPerRank, kRowsPerRank);
    }
    opt.zero_grad();
    Tensor loss = compiled ? loss_fn(x, y) : model.loss(x, y);
    if (compiled) {
      EXPECT_EQ(loss.grad_fn()->name(), "CompiledGraphBackward");
    }
    loss.backward();
    double sq = 0;
    for (const Tensor& p : model.parameters()) sq += (p.grad() * p.grad()).sum().item();
    c.grad_norm.push_back(std::sqrt(sq));
    opt.step();
    Tensor l = loss.detach().clone();
    if (ddp) dist::all_reduce(l, dist::ReduceOp::Avg);
    c.loss.push_back(l.item());
  }
  if (wrapper) c.stats = wrapper->stats();
  return c;
}

// Within float rounding: the ranks sum their halves' grads in another order than one process.
void expect_same_curve(const Curve& got, const Curve& want) {
  ASSERT_EQ(got.loss.size(), want.loss.size());
  double worst = 0;
  for (size_t s = 0; s < got.loss.size(); ++s) {
    EXPECT_NEAR(got.loss[s], want.loss[s], 1e-5 * want.loss[s]) << "step " << s;
    EXPECT_NEAR(got.grad_norm[s], want.grad_norm[s], 1e-4 * want.grad_norm[s]) << "step " << s;
    worst = std::max(worst, std::abs(got.loss[s] - want.loss[s]) / want.loss[s]);
  }
  EXPECT_LT(want.loss.back(), want.loss.front() - 0.5) << "it learns";
  if (dist::rank() == 0)
    std::printf("baby GPT, %d steps: loss %.4f -> %.4f (one process), %.4f -> %.4f (DDP); "
                "largest relative difference %.2g\n", kSteps, want.loss.front(),
                want.loss.back(), got.loss.front(), got.loss.back(), worst);
}

TEST(DistributedDataParallel, GptTrainsAsOneProcessOnTheGlobalBatch) {
  const Curve single = train_gpt(false), parallel = train_gpt(true);
  expect_same_curve(parallel, single);
  // Every bucket was started by a hook during the backward, none at its end.
  EXPECT_GT(parallel.stats.buckets_started_early, 2 * kSteps);
  EXPECT_EQ(parallel.stats.buckets_started_late, 0);
  EXPECT_EQ(parallel.stats.syncs, kSteps);
}

TEST(DistributedDataParallel, CompiledGptTrainsAsOneProcessOnTheGlobalBatch) {
  // The compiled training step: one backward node hands out every grad when it ends.
  const Curve single = train_gpt(false), parallel = train_gpt(true, true);
  expect_same_curve(parallel, single);
  EXPECT_EQ(parallel.stats.buckets_started_late, 0);
}

}  // namespace
