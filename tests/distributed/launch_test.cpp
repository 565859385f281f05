// A job whose ranks do not agree must end, with an error that names the rank and the op, rather
// than hang: ember-dist-tests launched under mpirun with one rank misbehaving
// (EMBER_DIST_TEST_FAULT, see tests/distributed/ranks/main.cpp), each run bounded by a timeout.
// And ember-gpt train launched as two ranks.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <vector>
#include <string>

#include "ember/distributed.h"
#include "ember/io.h"
#include "support/run_command.h"

namespace ember::test {
namespace {

struct Launch {
  CommandResult result;
  double seconds = 0;
};

// mpirun -np 2 ember-dist-tests with EMBER_DIST_TEST_FAULT=fault (one main.cpp knows, or none)
// and `env` ("NAME=value ..."), ended by `timeout` after 60 s (status 124).
Launch launch(const std::string& fault, const std::string& env = "") {
  const std::string cmd = "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 "
                          "EMBER_DIST_TEST_FAULT=" + fault + " " + env + " timeout 60 " +
                          EMBER_MPIEXEC + " --oversubscribe -np 2 " + EMBER_DIST_TESTS_BIN +
                          " 2>&1";
  const auto t0 = std::chrono::steady_clock::now();
  Launch l{run_command(cmd), 0};
  l.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return l;
}

void expect_failed_in_time(const Launch& l) {
  EXPECT_NE(l.result.status, 0) << l.result.output;
  EXPECT_NE(l.result.status, 124) << "the job hung until timeout killed it:\n" << l.result.output;
  EXPECT_LT(l.seconds, 30) << l.result.output;
}

void expect_says(const Launch& l, const std::string& text) {
  EXPECT_NE(l.result.output.find(text), std::string::npos)
      << "expected \"" << text << "\" in:\n" << l.result.output;
}

class DistributedLaunch : public testing::Test {
 protected:
  void SetUp() override {
    if (!distributed::built_with_mpi()) GTEST_SKIP() << "ember was built without MPI";
  }
};

TEST_F(DistributedLaunch, RankThatThrowsEndsEveryRank) {
  Launch l = launch("throw");
  expect_failed_in_time(l);
  expect_says(l, "ember.distributed: rank 1 of 2: uncaught exception: rank 1 fails on purpose");
  expect_says(l, "rank 1 ends every rank of the job (MPI_Abort)");
}

TEST_F(DistributedLaunch, RankCallingAnotherCollectiveIsNamed) {
  Launch l = launch("skip");
  expect_failed_in_time(l);
  expect_says(l, "the ranks' calls differ");
  expect_says(l, "called barrier");
}

TEST_F(DistributedLaunch, RankThatLeavesEarlyIsNamed) {
  Launch l = launch("exit");
  expect_failed_in_time(l);
  expect_says(l, "called finalize");
}

TEST_F(DistributedLaunch, RankThatStopsRespondingTimesOut) {
  Launch l = launch("hang", "EMBER_DIST_TIMEOUT=1");
  expect_failed_in_time(l);
  expect_says(l, "distributed all_reduce (collective #0) on rank 0 of 2");
  expect_says(l, "timed out after 1 s waiting for the other ranks");
}

TEST_F(DistributedLaunch, LauncherVariablesMustAgreeWithMpi) {
  Launch l = launch("none", "WORLD_SIZE=3");
  expect_failed_in_time(l);
  // Both ranks find the disagreement; the first to abort ends the job, so either one may be
  // the rank whose message is printed.
  expect_says(l, "distributed init: WORLD_SIZE=3 in the environment, but MPI started this "
                 "process as rank ");
  expect_says(l, " of 2; ember's ranks are MPI's: start the processes with mpirun -np N, or "
                 "unset RANK and WORLD_SIZE");
}

// ember-gpt train under mpirun: one job of two ranks, rank 0 alone logging and saving, and its
// checkpoint in a single run's format (the same tensors, shapes and step).
TEST_F(DistributedLaunch, EmberGptTrainsAsRanksAndSavesASingleRunsCheckpoint) {
  const std::string dir = ::testing::TempDir() + "ember-gpt-ranks";
  const std::string args = " train --max_iters 20 --eval_interval 10 --eval_iters 2 --n_layer 1"
                           " --n_head 2 --n_embd 32 --block_size 16 --batch_size 4 --log_interval 5";
  const CommandResult one = run_command(std::string(EMBER_GPT_BIN) + args + " --out_dir " + dir +
                                        "-one 2>&1");
  ASSERT_EQ(one.status, 0) << one.output;
  const CommandResult two = run_command(
      "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 timeout 120 " +
      std::string(EMBER_MPIEXEC) + " --oversubscribe -np 2 " + EMBER_GPT_BIN + args +
      " --out_dir " + dir + "-two 2>&1");
  ASSERT_EQ(two.status, 0) << two.output;
  auto count = [](const std::string& text, const std::string& what) {
    size_t n = 0;
    for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
    return n;
  };
  EXPECT_EQ(count(two.output, "data parallel: 2 ranks"), 1u) << two.output;
  EXPECT_EQ(count(two.output, "done: 20 iterations"), 1u) << "rank 0 alone logs:\n" << two.output;
  EXPECT_EQ(count(two.output, "step 20: train loss"), 1u) << two.output;
  const io::Checkpoint a = io::load_checkpoint(dir + "-one/ckpt.safetensors");
  const io::Checkpoint b = io::load_checkpoint(dir + "-two/ckpt.safetensors");
  EXPECT_EQ(b.step, a.step);
  EXPECT_EQ(b.config, a.config);
  ASSERT_EQ(b.model.size(), a.model.size());
  for (size_t i = 0; i < a.model.size(); ++i) {
    EXPECT_EQ(b.model[i].first, a.model[i].first);
    EXPECT_EQ(b.model[i].second.sizes(), a.model[i].second.sizes()) << a.model[i].first;
  }
  ASSERT_EQ(b.optimizer.size(), a.optimizer.size());
  for (size_t i = 0; i < a.optimizer.size(); ++i)
    EXPECT_EQ(b.optimizer[i].first, a.optimizer[i].first);
  // Two ranks train on twice the data: their weights are not the single run's.
  EXPECT_GT((b.model[0].second - a.model[0].second).abs().amax().item(), 0.0);
}

// ember-ddp-bench (scripts/test-multi-gpu.sh's program) on the CPU: two ranks of 4 rows each
// follow the loss curve of one process on the 8-row global batch, and not that of 4 rows.
TEST_F(DistributedLaunch, DdpBenchTwoRanksFollowTheGlobalBatchsCurve) {
  if (std::string(EMBER_DDP_BENCH_BIN).empty()) GTEST_SKIP() << "built without the benchmarks";
  auto losses = [](const std::string& cmd) {
    const CommandResult r = run_command(cmd + " 2>&1");
    EXPECT_EQ(r.status, 0) << r.output;
    const size_t at = r.output.find("\"losses\": [");
    EXPECT_NE(at, std::string::npos) << r.output;
    std::vector<double> v;
    if (at == std::string::npos) return v;
    std::string rest = r.output.substr(at + 11);
    rest = rest.substr(0, rest.find(']'));
    for (size_t p = 0; p < rest.size();) {
      size_t used = 0;
      v.push_back(std::stod(rest.substr(p), &used));
      p += used;
      while (p < rest.size() && (rest[p] == ',' || rest[p] == ' ')) ++p;
    }
    return v;
  };
  const std::string bin = std::string(EMBER_DDP_BENCH_BIN) +
                          " --device cpu --model tiny --steps 8 --warmup 2 --batch ";
  const std::vector<double> whole = losses(bin + "8"), half = losses(bin + "4");
  const std::vector<double> two = losses(
      "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 timeout 120 " +
      std::string(EMBER_MPIEXEC) + " --oversubscribe -np 2 " + bin + "4");
  ASSERT_EQ(whole.size(), 10u);
  ASSERT_EQ(two.size(), whole.size());
  double apart = 0;
  for (size_t i = 0; i < whole.size(); ++i) {
    EXPECT_NEAR(two[i], whole[i], 1e-4 * std::abs(whole[i])) << "step " << i;
    apart = std::max(apart, std::abs(half[i] - whole[i]));
  }
  EXPECT_GT(apart, 1e-3) << "4 rows alone should follow another curve";
}

TEST(Distributed, CollectivesBeforeInitSayHowToStart) {
  if (distributed::is_initialized()) GTEST_SKIP();
  try {
    distributed::barrier();
    FAIL() << "barrier without init";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("call ember::distributed::init() first"),
              std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace ember::test
