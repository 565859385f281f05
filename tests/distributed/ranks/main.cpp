// ember-dist-tests: the tests of ember::distributed that need several processes. Every rank runs
// the same tests in the same order (mpirun --oversubscribe -np 2 ember-dist-tests, as
// scripts/test-distributed.sh does); rank 0 prints the report, other ranks their failures, and
// every rank exits with the worst status. With EMBER_DIST_TEST_FAULT set, one rank misbehaves
// instead (tests/distributed/launch_test.cpp checks that the job ends with a clear error).
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <stdexcept>
#include <string_view>
#include <thread>

#include "ember/distributed.h"
#include "ember/ops.h"

namespace {

namespace dist = ember::distributed;

// Rank 1 misbehaves while rank 0 calls an all_reduce:
//   throw: rank 1 throws out of main;  skip: rank 1 calls barrier instead;
//   exit:  rank 1 returns from main;   hang: rank 1 sleeps (run with EMBER_DIST_TIMEOUT).
int run_fault(std::string_view fault) {
  const bool odd_one = dist::rank() == 1;
  ember::Tensor t = ember::ones({4});
  if (fault == "throw" && odd_one) throw std::runtime_error("rank 1 fails on purpose");
  if (fault == "skip" && odd_one) {
    dist::barrier();
    return 0;
  }
  if (fault == "exit" && odd_one) return 0;
  if (fault == "hang" && odd_one) std::this_thread::sleep_for(std::chrono::seconds(30));
  dist::all_reduce(t);
  return 0;
}

// Prints failed assertions on ranks other than 0, which print nothing else.
class FailurePrinter : public testing::EmptyTestEventListener {
 public:
  explicit FailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const testing::TestPartResult& r) override {
    if (r.failed())
      std::printf("[rank %d] %s:%d: failure\n%s\n", rank_, r.file_name() ? r.file_name() : "?",
                  r.line_number(), r.summary());
  }

 private:
  int rank_;
};

}  // namespace

int main(int argc, char** argv) {
  dist::init();
  if (const char* fault = std::getenv("EMBER_DIST_TEST_FAULT")) return run_fault(fault);
  testing::InitGoogleTest(&argc, argv);
  if (dist::rank() != 0) {
    auto& listeners = testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new FailurePrinter(dist::rank()));
  }
  ember::Tensor status = ember::full({1}, double(RUN_ALL_TESTS()), ember::DType::Int32);
  dist::all_reduce(status, dist::ReduceOp::Max);
  dist::finalize();
  return status.item<int>();
}
