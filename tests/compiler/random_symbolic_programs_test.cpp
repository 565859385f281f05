// Random programs whose inputs carry symbolic dims (testgen::generate_symbolic_program),
// compiled once and called at several sizes of a schedule (testgen::size_schedule: six calls,
// sizes in [1, 12], never 0, a 1 in about half the schedules), in order: every call must match
// eager execution, with automatic dynamic sizes (CompileOptions::dynamic unset) and with
// dynamic = true. Graphs of one form at other sizes share code over symbolic sizes
// (compiler/families.h); the test checks that they did.
//
// What varies: one or two dims of a program's base shape become size symbols, and every input
// dim drawn from them carries the symbol (a dim replaced by 1 to broadcast stays fixed; the
// matmul weight's first dim follows the base's last). Steps are drawn at the first call's sizes
// and kept only if they apply at every call, and some output's size must vary. Attrs that read
// a varying size follow it: slices and narrows keep a start below every size and count their
// end back from the dim's size, reshapes copy the varying dims or flatten them into -1, expands
// keep them with -1. Other ops take varying dims as they come. Restrictions: a varying dim is
// never sliced with a step of 2 (its size would be no polynomial in the symbol, which shared
// code needs), reshapes never split a varying dim, and the programs have 3 to 7 steps.
//
// Code is shared per graph, so the programs of a block of kBatch seeds (one schedule) are
// compiled in two functions: those likely to share (likely_shared) called at all six sizes,
// and the others (training, column sums, attention) at three. A failing batch is checked
// program by program and the culprit shrunk. EMBER_RANDOM_PROGRAMS=N checks N programs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <optional>

#include "compiler/compiler_test_util.h"
#include "compiler/families.h"
#include "ember/compile.h"
#include "support/program_check.h"
#include "support/program_gen.h"

namespace ember {
namespace {

using testgen::Program;

constexpr uint64_t kPrograms = 500;
constexpr uint64_t kBatch = 12;
// Seeds of their own: the fixed-size test already checks the programs of seeds 1, 2 ...
constexpr uint64_t kFirstSeed = 1000001;

uint64_t program_count() {
  const char* n = std::getenv("EMBER_RANDOM_PROGRAMS");
  return n && std::atoll(n) > 0 ? uint64_t(std::atoll(n)) : kPrograms;
}

const char* mode_name(std::optional<bool> dynamic) { return dynamic ? "dynamic" : "automatic"; }

// The rows of ps's schedule they are called at: all of them for programs likely to share code
// (likely_shared), else three (each a build): the first two and the one with a size of 1, or
// the last.
std::vector<size_t> calls_for(const std::vector<Program>& ps, bool likely) {
  const testgen::SizeSchedule& sizes = ps.front().sizes;
  std::vector<size_t> rows;
  for (size_t at = 0; at < sizes.size(); ++at) rows.push_back(at);
  if (likely) return rows;
  size_t third = sizes.size() - 1;
  for (size_t at = 2; at < sizes.size(); ++at)
    if (std::find(sizes[at].begin(), sizes[at].end(), 1) != sizes[at].end()) third = at;
  return {0, 1, third};
}

// Compiles ps as one function (dynamic: CompileOptions::dynamic) and calls it at the rows
// `calls` of their schedule, in order. Empty when every call matches eager, else the first
// difference; `shared` gets the graphs served by code built for other sizes.
std::string check_programs(const std::vector<Program>& ps, const std::vector<size_t>& calls,
                           std::optional<bool> dynamic, int64_t* shared = nullptr) {
  try {
    // Each mode fits its own families: shared code from an earlier check would hide the fit.
    compiler::clear_families();
    capture::clear_segment_cache();  // else the graphs of the other mode's run serve this one
    std::vector<testgen::Expected> es;
    for (const Program& p : ps) es.push_back(testgen::expected(p, calls.front()));
    CompileOptions opts;
    opts.backend = "compiler";
    opts.fullgraph = true;
    opts.dynamic = dynamic;
    auto f = compile(testgen::batch_function(ps, es), opts);
    const testgen::ProgramsFn call = [&f](const std::vector<Tensor>& xs) { return f(xs); };
    for (size_t at : calls) {
      if (at != calls.front())
        for (size_t j = 0; j < ps.size(); ++j) es[j] = testgen::expected(ps[j], at);
      std::string d = testgen::call_and_check(call, ps, es, at, false);
      if (!d.empty()) return std::string("call ").append(std::to_string(at)).append(", ") + d;
    }
    if (shared) *shared += f.stats().shared_compiles;
  } catch (const std::exception& e) {
    return std::string("threw: ") + e.what();
  }
  return {};
}

void report_failure(const Program& p, const std::vector<size_t>& calls,
                    std::optional<bool> dynamic, const std::string& diff) {
  auto fails = [&](const Program& q) { return !check_programs({q}, calls, dynamic).empty(); };
  Program small = testgen::shrink(p, fails);
  ADD_FAILURE() << mode_name(dynamic) << " sizes differ from eager (seed " << p.seed
                << "): " << check_programs({small}, calls, dynamic)
                << "\nminimal failing program:\n"
                << testgen::to_string(small) << "original program (" << diff << "):\n"
                << testgen::to_string(p);
}

// Whether p's graphs are likely to share code over sizes: code is shared per graph, and only
// by graphs whose every kernel is pointwise or a row kernel, so one program with a column sum
// (a sum over every dim but the last, as in a bias grad), an attention or a backward (whose
// broadcasts reduce over leading dims) keeps its whole batch specialized. Such programs go
// into batches of their own. A guess that is wrong only costs sharing, not checking.
bool likely_shared(const Program& p) {
  if (p.backward) return false;
  const size_t ni = p.inputs.size();
  std::vector<Tensor> probe;
  for (size_t i = 0; i < ni; ++i) probe.push_back(zeros(p.inputs[i].shape, p.inputs[i].dtype));
  const std::vector<Tensor> v = testgen::run_all(p, probe);
  for (const testgen::Step& s : p.steps) {
    using testgen::Op;
    const int64_t nd = v[size_t(s.args[0])].dim();
    const bool sum = s.op == Op::Sum || s.op == Op::Mean ||
                     (s.op == Op::ReduceBroadcast && s.fn != 2);
    if (sum && nd >= 2 && (s.shape.size() == size_t(nd - 1) || (nd == 2 && s.dim == 0)))
      return false;  // a column sum
    if (s.op == Op::Matmul && size_t(s.args[0]) >= ni &&
        p.steps[size_t(s.args[0]) - ni].op == Op::Softmax)
      return false;  // an attention
  }
  return true;
}

// Checks programs in both modes; adds to `shared` the graphs served by shared code.
void check_batch(const std::vector<Program>& ps, bool likely, int64_t shared[2]) {
  if (ps.empty()) return;
  const std::vector<size_t> calls = calls_for(ps, likely);
  for (int m = 0; m < 2; ++m) {
    const std::optional<bool> dynamic = m ? std::optional<bool>(true) : std::nullopt;
    const std::string batch_diff = check_programs(ps, calls, dynamic, &shared[m]);
    if (batch_diff.empty()) continue;
    bool found = false;
    for (const Program& p : ps) {  // find the culprit
      const std::string diff = check_programs({p}, calls, dynamic);
      if (!diff.empty()) report_failure(p, calls, dynamic, diff);
      found |= !diff.empty();
    }
    if (!found)
      ADD_FAILURE() << "programs " << ps.front().seed << " to " << ps.back().seed
                    << " differ from eager (" << mode_name(dynamic)
                    << " sizes) only when compiled together: " << batch_diff;
  }
}

TEST(RandomPrograms, SymbolicDimsMatchEager) {
  std::optional<test::CacheDir> dir;  // the suite's cache unless the caller chose one
  if (!std::getenv("EMBER_CACHE_DIR")) dir.emplace(test::kSharedCompilerCache);
  const uint64_t count = program_count();
  int64_t checked = 0, with_one = 0, two_symbols = 0, batches[2] = {0, 0};
  int64_t shared[2][2] = {{0, 0}, {0, 0}};  // [likely shared][mode]
  for (uint64_t first = kFirstSeed; first < kFirstSeed + count; first += kBatch) {
    const uint64_t n = std::min(kBatch, kFirstSeed + count - first);
    const testgen::SizeSchedule sizes = testgen::size_schedule(first);
    bool one = false;
    for (const auto& row : sizes)
      for (int64_t v : row) one |= v == 1;
    with_one += one;
    two_symbols += sizes.front().size() == 2;
    std::vector<Program> ps[2];
    for (uint64_t seed = first; seed < first + n; ++seed) {
      Program p = testgen::generate_symbolic_program(seed, sizes);
      for (const testgen::Step& s : p.steps)  // layer steps hold at one size only
        ASSERT_NE(s.op, testgen::Op::Layer) << testgen::to_string(p);
      ps[likely_shared(p)].push_back(std::move(p));
    }
    checked += int64_t(n);
    for (int k = 0; k < 2; ++k) {
      batches[k] += !ps[k].empty();
      check_batch(ps[k], k == 1, shared[k]);
    }
  }
  EXPECT_EQ(checked, int64_t(count));
  std::printf(
      "[ symbolic  ] %lld programs in blocks of %lld (%lld schedules with a size of 1, %lld "
      "with two symbols); graphs served by shared code (automatic/dynamic): %lld/%lld over %lld "
      "batches of programs likely to share, %lld/%lld over %lld other batches\n",
      (long long)checked, (long long)kBatch, (long long)with_one, (long long)two_symbols,
      (long long)shared[1][0], (long long)shared[1][1], (long long)batches[1],
      (long long)shared[0][0], (long long)shared[0][1], (long long)batches[0]);
  // Not vacuous: in most batches of programs likely to share, calls after the first two at
  // sizes of one form reuse code.
  EXPECT_GE(shared[1][0], batches[1]);
  EXPECT_GE(shared[1][1], batches[1]);
}

}  // namespace
}  // namespace ember
