// Random op chains (views, broadcasts, reductions, casts, mixed dtypes) run eagerly and through
// compile(): backend "eager" must match bit for bit, backend "compiler" within tolerance. A
// mismatch is shrunk and the smallest failing program is printed with its seed.
//
// Split: all kPrograms programs run against backend "eager"; every kCompilerStride-th one also
// runs against backend "compiler" (each new fused kernel costs a run of the system C++
// compiler, ~0.25 s, so that subset is kept at about 40 programs; kernels are cached on disk in
// EMBER_CACHE_DIR, /tmp/ember-test-cache unless set, so reruns are faster).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <sstream>

#include "compiler/toolchain.h"
#include "ember/compile.h"
#include "support/program_gen.h"

namespace ember {
namespace {

using testgen::Program;

constexpr uint64_t kPrograms = 600;
constexpr uint64_t kCompilerStride = 15;  // 40 programs against "compiler"

// EMBER_RANDOM_PROGRAMS=N runs N programs instead (and N / kCompilerStride against
// "compiler"), for longer hunts outside CI.
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

// Runs `p` eagerly and compiled with `backend`; empty when they agree, else the difference.
std::string check(const Program& p, const std::string& backend) {
  try {
    std::vector<Tensor> inputs = testgen::make_inputs(p, p.seed);
    std::vector<Tensor> want = testgen::run_program(p, inputs);
    // Which values carry float32 rounding: float32 themselves, or computed from one (a float64
    // result of float32 work is only as precise as float32).
    std::vector<Tensor> all = testgen::run_all(p, inputs);
    std::vector<bool> f32(all.size());
    for (size_t v = 0; v < all.size(); ++v) {
      f32[v] = all[v].dtype() == DType::Float32;
      if (v >= p.inputs.size())
        for (int a : p.steps[v - p.inputs.size()].args) f32[v] = f32[v] || f32[size_t(a)];
    }
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
        bool exact = backend == "eager" || !is_floating(want[i].dtype());
        // Rounding differences scale with the magnitude of the values involved.
        bool single = f32[size_t(p.outputs[i])];
        double scale = std::max(1.0, testgen::value_bound(p, p.outputs[i]));
        double rtol = single ? 1e-5 : 1e-12, atol = (single ? 1e-6 : 1e-12) * scale;
        std::string d = compare(got[i], want[i], exact, rtol, atol);
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

struct CacheDirEnv {
  CacheDirEnv() {
    if (!std::getenv("EMBER_CACHE_DIR")) {
      ::setenv("EMBER_CACHE_DIR", "/tmp/ember-test-cache", 1);
      set = true;
    }
  }
  ~CacheDirEnv() {
    if (set) ::unsetenv("EMBER_CACHE_DIR");
  }
  bool set = false;
};

void run_programs(const std::string& backend, uint64_t stride) {
  int64_t ran = 0;
  uint64_t count = program_count();
  for (uint64_t seed = 1; seed <= count; seed += stride, ++ran) {
    Program p = testgen::generate_program(seed);
    ASSERT_FALSE(p.steps.empty()) << testgen::to_string(p);
    std::string diff = check(p, backend);
    if (diff.empty()) continue;
    Program small = testgen::shrink(p, [&](const Program& q) { return !check(q, backend).empty(); });
    ADD_FAILURE() << "backend \"" << backend << "\" differs from eager (seed " << seed
                  << "): " << check(small, backend) << "\nminimal failing program:\n"
                  << testgen::to_string(small) << "original program (" << diff << "):\n"
                  << testgen::to_string(p);
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
  CacheDirEnv env;
  auto loaded = [] {
    compiler::ToolchainStats t = compiler::toolchain_stats();
    return t.compiler_runs + t.disk_hits + t.memory_hits;
  };
  int64_t before = loaded();
  run_programs("compiler", kCompilerStride);
  // Most programs hold a fusable pointwise chain: the subset must have exercised real kernels.
  EXPECT_GE(loaded() - before, 20);
}

}  // namespace
}  // namespace ember
