// Random op chains (views, broadcasts, reductions, casts, mixed dtypes) run eagerly and through
// compile(): backend "eager" must match bit for bit, backend "compiler" within tolerance. A
// mismatch is shrunk and the smallest failing program is printed with its seed.
//
// All kPrograms programs run against backend "eager" one by one, and the first
// kCompilerPrograms against backend "compiler" in batches of kBatch programs per compiled
// function (one C++ translation unit per batch keeps the suite's compile time bounded); a
// failing batch is checked program by program to find and shrink the culprit. Kernels are
// cached on disk in EMBER_CACHE_DIR (the suite's shared directory unless set), so reruns are
// faster.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <optional>
#include <sstream>

#include "compiler/compiler_test_util.h"
#include "compiler/toolchain.h"
#include "ember/compile.h"
#include "support/program_gen.h"

namespace ember {
namespace {

using testgen::Program;

constexpr uint64_t kPrograms = 600;
constexpr uint64_t kCompilerPrograms = 500;
constexpr uint64_t kBatch = 25;

// EMBER_RANDOM_PROGRAMS=N runs N programs instead against both backends, for longer hunts
// outside CI.
uint64_t program_count() {
  const char* n = std::getenv("EMBER_RANDOM_PROGRAMS");
  return n && std::atoll(n) > 0 ? uint64_t(std::atoll(n)) : kPrograms;
}

// Empty when `got` matches `want`; else what differs. exact: bit-identical values.
std::string compare(const Tensor& got, const Tensor& want, bool exact, double rtol, double atol) {
  std::ostringstream os;
  if (got.sizes() != want.sizes() || got.dtype() != want.dtype()) {
    os << "metadata: got " << dtype_name(got.dtype()) << got.shape_str() << ", want "
       << dtype_name(want.dtype()) << want.shape_str();
    return os.str();
  }
  std::vector<double> g = got.to_vector<double>(), w = want.to_vector<double>();
  for (size_t i = 0; i < g.size(); ++i) {
    bool ok = exact ? (g[i] == w[i] || (std::isnan(g[i]) && std::isnan(w[i])))
                    : std::abs(g[i] - w[i]) <= atol + rtol * std::abs(w[i]);
    if (!ok) {
      os.precision(17);
      os << "element " << i << ": got " << g[i] << ", want " << w[i];
      return os.str();
    }
  }
  return {};
}

// Which values of p carry float32 rounding: float32 themselves, or computed from one (a
// float64 result of float32 work is only as precise as float32).
std::vector<bool> float32_values(const Program& p, const std::vector<Tensor>& inputs) {
  std::vector<Tensor> all = testgen::run_all(p, inputs);
  std::vector<bool> f32(all.size());
  for (size_t v = 0; v < all.size(); ++v) {
    f32[v] = all[v].dtype() == DType::Float32;
    if (v >= p.inputs.size())
      for (int a : p.steps[v - p.inputs.size()].args) f32[v] = f32[v] || f32[size_t(a)];
  }
  return f32;
}

// Compares output i of p; exact for the eager backend and for non-float outputs.
std::string compare_output(const Program& p, size_t i, const std::vector<bool>& f32,
                           const Tensor& got, const Tensor& want, bool eager_backend) {
  bool exact = eager_backend || !is_floating(want.dtype());
  // Rounding differences scale with the magnitude of the values involved.
  bool single = f32[size_t(p.outputs[i])];
  double scale = std::max(1.0, testgen::value_bound(p, p.outputs[i]));
  double rtol = single ? 1e-5 : 1e-12, atol = (single ? 1e-6 : 1e-12) * scale;
  return compare(got, want, exact, rtol, atol);
}

// Runs `p` eagerly and compiled with `backend`; empty when they agree, else the difference.
std::string check(const Program& p, const std::string& backend) {
  try {
    std::vector<Tensor> inputs = testgen::make_inputs(p, p.seed);
    std::vector<Tensor> want = testgen::run_program(p, inputs);
    std::vector<bool> f32 = float32_values(p, inputs);
    CompileOptions opts;
    opts.backend = backend;
    opts.fullgraph = true;
    auto f = compile([&p](const std::vector<Tensor>& xs) { return testgen::run_program(p, xs); },
                     opts);
    // Twice: the first call traces, the second replays the cached graph.
    for (int call = 0; call < 2; ++call) {
      std::vector<Tensor> got = f(inputs);
      if (got.size() != want.size()) return "output count differs";
      for (size_t i = 0; i < got.size(); ++i) {
        std::string d = compare_output(p, i, f32, got[i], want[i], backend == "eager");
        if (!d.empty())
          return (call ? "replay" : "first call") + std::string(", output ") + std::to_string(i) +
                 ": " + d;
      }
    }
    CompileStats st = f.stats();
    if (st.traces != 1 || st.replays != 1)
      return "expected one trace and one replay, got " + std::to_string(st.traces) + " traces, " +
             std::to_string(st.replays) + " replays";
  } catch (const std::exception& e) {
    return std::string("threw: ") + e.what();
  }
  return {};
}

// Runs the programs of seeds [first, first + n) in one compiled function with `backend`;
// empty when every output agrees with eager, else the first difference.
std::string check_batch(uint64_t first, uint64_t n, const std::string& backend) {
  try {
    std::vector<Program> ps;
    std::vector<std::vector<Tensor>> ins, wants;
    std::vector<std::vector<bool>> f32s;
    std::vector<Tensor> flat;
    for (uint64_t seed = first; seed < first + n; ++seed) {
      ps.push_back(testgen::generate_program(seed));
      ins.push_back(testgen::make_inputs(ps.back(), seed));
      wants.push_back(testgen::run_program(ps.back(), ins.back()));
      f32s.push_back(float32_values(ps.back(), ins.back()));
      flat.insert(flat.end(), ins.back().begin(), ins.back().end());
    }
    CompileOptions opts;
    opts.backend = backend;
    opts.fullgraph = true;
    auto f = compile([&ps](const std::vector<Tensor>& xs) {
      std::vector<Tensor> outs;
      size_t at = 0;
      for (const Program& p : ps) {
        std::vector<Tensor> in(xs.begin() + long(at), xs.begin() + long(at + p.inputs.size()));
        at += p.inputs.size();
        std::vector<Tensor> o = testgen::run_program(p, in);
        outs.insert(outs.end(), o.begin(), o.end());
      }
      return outs;
    }, opts);
    for (int call = 0; call < 2; ++call) {  // trace, then replay
      std::vector<Tensor> got = f(flat);
      size_t k = 0;
      for (size_t j = 0; j < ps.size(); ++j)
        for (size_t i = 0; i < wants[j].size(); ++i, ++k) {
          if (k >= got.size()) return "output count differs";
          std::string d = compare_output(ps[j], i, f32s[j], got[k], wants[j][i],
                                         backend == "eager");
          if (!d.empty())
            return "seed " + std::to_string(ps[j].seed) + ", output " + std::to_string(i) +
                   ": " + d;
        }
    }
  } catch (const std::exception& e) {
    return std::string("threw: ") + e.what();
  }
  return {};
}

void report_failure(const Program& p, const std::string& backend, const std::string& diff) {
  Program small = testgen::shrink(p, [&](const Program& q) { return !check(q, backend).empty(); });
  ADD_FAILURE() << "backend \"" << backend << "\" differs from eager (seed " << p.seed
                << "): " << check(small, backend) << "\nminimal failing program:\n"
                << testgen::to_string(small) << "original program (" << diff << "):\n"
                << testgen::to_string(p);
}

void run_programs(const std::string& backend, uint64_t stride) {
  int64_t ran = 0;
  uint64_t count = program_count();
  for (uint64_t seed = 1; seed <= count; seed += stride, ++ran) {
    Program p = testgen::generate_program(seed);
    ASSERT_FALSE(p.steps.empty()) << testgen::to_string(p);
    std::string diff = check(p, backend);
    if (!diff.empty()) report_failure(p, backend, diff);
  }
  EXPECT_GE(ran * int64_t(stride), int64_t(count));
}

TEST(RandomPrograms, GeneratorCoversTheOpKinds) {
  std::vector<int> seen(int(testgen::Op::Softmax) + 1, 0);
  int64_t broadcasts = 0, mixed = 0, zero_dim = 0, big = 0, strided = 0;
  for (uint64_t seed = 1; seed <= kPrograms; ++seed) {
    Program p = testgen::generate_program(seed);
    EXPECT_GE(p.steps.size(), 1u);
    EXPECT_LE(p.steps.size(), 10u);
    for (const auto& s : p.steps) ++seen[size_t(s.op)];
    std::vector<Tensor> v = testgen::run_all(p, testgen::make_inputs(p, seed));
    for (size_t i = 0; i < p.steps.size(); ++i) {
      const auto& s = p.steps[i];
      if (s.op == testgen::Op::Binary) {
        const Tensor &a = v[size_t(s.args[0])], &b = v[size_t(s.args[1])];
        broadcasts += a.sizes() != b.sizes();
        mixed += a.dtype() != b.dtype();
      }
    }
    for (const auto& in : p.inputs) {
      zero_dim += in.shape.empty();
      strided += in.strided;
    }
    bool any_big = false;
    for (const Tensor& t : v) any_big |= t.numel() >= 32768;
    big += any_big;
  }
  for (size_t k = 0; k < seen.size(); ++k) EXPECT_GT(seen[k], 5) << "op kind " << k;
  EXPECT_GT(broadcasts, 50);
  EXPECT_GT(mixed, 20);
  EXPECT_GT(zero_dim, 20);
  EXPECT_GT(big, 10);  // multi-threaded kernel paths
  EXPECT_GT(strided, 50);
}

TEST(RandomPrograms, ShrinkFindsTheFailingStep) {
  // A predicate standing in for a bug: "fails" while the program still has a softmax.
  Program p;
  for (uint64_t seed = 1; seed < 1000; ++seed) {
    p = testgen::generate_program(seed);
    bool has = false;
    for (const auto& s : p.steps) has |= s.op == testgen::Op::Softmax;
    if (has && p.steps.size() >= 5) break;
  }
  auto fails = [](const Program& q) {
    for (const auto& s : q.steps)
      if (s.op == testgen::Op::Softmax) return true;
    return false;
  };
  ASSERT_TRUE(fails(p));
  Program small = testgen::shrink(p, fails);
  EXPECT_TRUE(fails(small));
  EXPECT_LT(small.steps.size(), p.steps.size()) << testgen::to_string(small);
  EXPECT_NE(testgen::to_string(small).find("softmax"), std::string::npos);
}

TEST(RandomPrograms, EagerBackendIsBitIdentical) { run_programs("eager", 1); }

TEST(RandomPrograms, CompilerBackendMatchesEager) {
  std::optional<test::CacheDir> dir;  // the suite's cache unless the caller chose one
  if (!std::getenv("EMBER_CACHE_DIR")) dir.emplace(test::kSharedCompilerCache);
  auto loaded = [] {
    compiler::ToolchainStats t = compiler::toolchain_stats();
    return t.compiler_runs + t.disk_hits + t.memory_hits;
  };
  int64_t before = loaded();
  const uint64_t count = std::getenv("EMBER_RANDOM_PROGRAMS") ? program_count() : kCompilerPrograms;
  uint64_t checked = 0;
  for (uint64_t first = 1; first <= count; first += kBatch) {
    const uint64_t n = std::min(kBatch, count + 1 - first);
    checked += n;
    const std::string batch_diff = check_batch(first, n, "compiler");
    if (batch_diff.empty()) continue;
    bool found = false;
    for (uint64_t seed = first; seed < first + n; ++seed) {  // find the culprit
      Program p = testgen::generate_program(seed);
      std::string diff = check(p, "compiler");
      if (!diff.empty()) report_failure(p, "compiler", diff);
      found |= !diff.empty();
    }
    if (!found)
      ADD_FAILURE() << "programs " << first << " to " << first + n - 1
                    << " differ from eager only when compiled together: " << batch_diff;
  }
  EXPECT_EQ(checked, count);
  // Every batch holds fusable pointwise chains: real kernels were built or loaded.
  EXPECT_GE(loaded() - before, int64_t(count / kBatch));
}

}  // namespace
}  // namespace ember
