// Random op chains (views, broadcasts, reductions, casts, mixed dtypes, matmuls with row ops,
// reductions broadcast against their input) run eagerly and through compile(): backend "eager"
// must match bit for bit, backend "compiler" within tolerance. Training programs also return a
// loss over their outputs, and the grads of their inputs are compared too. A mismatch is shrunk
// and the smallest failing program is printed with its seed.
//
// All kPrograms programs run against backend "eager" one by one, and the first
// kCompilerPrograms against backend "compiler" in batches of kBatch programs per compiled
// function (one C++ translation unit per batch keeps the suite's compile time bounded); a
// failing batch is checked program by program to find and shrink the culprit. Kernels are
// cached on disk in EMBER_CACHE_DIR (the suite's shared directory unless set), so reruns are
// faster. The kLayerPrograms layer programs (seeds from testgen::kLayerSeeds: convolutions,
// pooling, channel norms, resizing, masks, sorts over image-like inputs) are checked the same
// way by tests of their own.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <sstream>

#include "compiler/compiler_test_util.h"
#include "compiler/toolchain.h"
#include "ember/autograd.h"
#include "ember/compile.h"
#include "support/program_check.h"
#include "support/program_gen.h"

namespace ember {
namespace {

using testgen::Program;
using testgen::Call;
using testgen::Expected;
using testgen::call_args;
using testgen::check_results;
using testgen::expected;
using testgen::run_part;

constexpr uint64_t kPrograms = 1200;
constexpr uint64_t kCompilerPrograms = 1200;
constexpr uint64_t kBatch = 40;
constexpr uint64_t kLayerPrograms = 320;

// EMBER_RANDOM_PROGRAMS=N runs N programs (and N layer programs) instead against both
// backends, for longer hunts outside CI.
uint64_t program_count(uint64_t otherwise) {
  const char* n = std::getenv("EMBER_RANDOM_PROGRAMS");
  return n && std::atoll(n) > 0 ? uint64_t(std::atoll(n)) : otherwise;
}

// Runs `p` eagerly and compiled with `backend`; empty when they agree, else the difference.
std::string check(const Program& p, const std::string& backend) {
  try {
    const Expected e = expected(p);
    CompileOptions opts;
    opts.backend = backend;
    opts.fullgraph = true;
    auto f = compile([&p](const std::vector<Tensor>& xs) { return run_part(p, xs); }, opts);
    // Twice: the first call traces, the second replays the cached graph.
    for (int call = 0; call < 2; ++call) {
      const Call c = call_args(p, e);
      std::vector<Tensor> got = f(c.args);
      if (p.backward && got.size() == e.outputs.size() + 1 && got.back().requires_grad())
        got.back().backward();
      std::string d = check_results(p, e, c, got, backend == "eager");
      if (!d.empty()) return (call ? "replay, " : "first call, ") + d;
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

// Runs the programs of seeds [first, first + n) in one compiled function with `backend` (the
// training programs' losses backward together); empty when every output and grad agrees with
// eager, else the first difference.
std::string check_batch(uint64_t first, uint64_t n, const std::string& backend) {
  try {
    std::vector<Program> ps;
    std::vector<Expected> es;
    for (uint64_t seed = first; seed < first + n; ++seed) {
      ps.push_back(testgen::generate_program(seed));
      es.push_back(expected(ps.back()));
    }
    CompileOptions opts;
    opts.backend = backend;
    opts.fullgraph = true;
    auto f = compile(testgen::batch_function(ps, es), opts);
    const testgen::ProgramsFn call = [&f](const std::vector<Tensor>& xs) { return f(xs); };
    for (int replay = 0; replay < 2; ++replay) {  // trace, then replay
      std::string d = testgen::call_and_check(call, ps, es, 0, backend == "eager");
      if (!d.empty()) return replay ? "replay, " + d : d;
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

// Checks the programs of seeds [first, first + count) one by one.
void run_programs(const std::string& backend, uint64_t first, uint64_t count) {
  uint64_t ran = 0;
  for (uint64_t seed = first; seed < first + count; ++seed, ++ran) {
    Program p = testgen::generate_program(seed);
    ASSERT_FALSE(p.steps.empty()) << testgen::to_string(p);
    std::string diff = check(p, backend);
    if (!diff.empty()) report_failure(p, backend, diff);
  }
  EXPECT_EQ(ran, count);
}

// Checks the programs of seeds [first, first + count) against backend "compiler", in batches.
void compile_programs(uint64_t first, uint64_t count) {
  std::optional<test::CacheDir> dir;  // the suite's cache unless the caller chose one
  if (!std::getenv("EMBER_CACHE_DIR")) dir.emplace(test::kSharedCompilerCache);
  auto loaded = [] {
    compiler::ToolchainStats t = compiler::toolchain_stats();
    return t.compiler_runs + t.disk_hits + t.memory_hits;
  };
  int64_t before = loaded();
  uint64_t checked = 0;
  for (uint64_t start = first; start < first + count; start += kBatch) {
    const uint64_t n = std::min(kBatch, first + count - start);
    checked += n;
    const std::string batch_diff = check_batch(start, n, "compiler");
    if (batch_diff.empty()) continue;
    bool found = false;
    for (uint64_t seed = start; seed < start + n; ++seed) {  // find the culprit
      Program p = testgen::generate_program(seed);
      std::string diff = check(p, "compiler");
      if (!diff.empty()) report_failure(p, "compiler", diff);
      found |= !diff.empty();
    }
    if (!found)
      ADD_FAILURE() << "programs " << start << " to " << start + n - 1
                    << " differ from eager only when compiled together: " << batch_diff;
  }
  EXPECT_EQ(checked, count);
  // Every batch holds fusable pointwise chains: real kernels were built or loaded.
  EXPECT_GE(loaded() - before, int64_t(count / kBatch));
}

// The layer programs draw every layer form, with the conv and window attrs that differ in
// their code (groups, stride, padding, dilation, a bias), in training programs too.
void expect_layer_coverage() {
  using testgen::LayerFn;
  std::vector<int64_t> forms(size_t(LayerFn::kCount), 0);
  int64_t depthwise = 0, dense = 0, biased = 0, stride2 = 0, padded = 0, dilated = 0, trained = 0,
          int_sorts = 0, layer_steps = 0, steps = 0;
  for (uint64_t seed = testgen::kLayerSeeds; seed < testgen::kLayerSeeds + kLayerPrograms; ++seed) {
    Program p = testgen::generate_program(seed);
    EXPECT_GE(p.steps.size(), 1u);
    EXPECT_LE(p.steps.size(), 10u);
    const std::vector<Tensor> v = testgen::run_all(p, testgen::make_inputs(p, seed));
    bool layer = false;
    for (const auto& s : p.steps) {
      ++steps;
      if (s.op != testgen::Op::Layer) continue;
      layer = true;
      ++layer_steps;
      ++forms[size_t(s.fn)];
      const LayerFn fn = LayerFn(s.fn);
      const bool conv = fn == LayerFn::Conv1d || fn == LayerFn::Conv2d;
      const bool window = conv || fn == LayerFn::MaxPool2d || fn == LayerFn::AvgPool2d;
      depthwise += conv && s.groups > 1;
      dense += conv && s.groups == 1;
      biased += conv && s.args.size() > 2;
      stride2 += window && s.stride == 2;
      padded += window && s.padding > 0;
      dilated += (conv || fn == LayerFn::MaxPool2d) && s.dilation == 2;
      int_sorts += (fn == LayerFn::Sort || fn == LayerFn::Argsort) &&
                   v[size_t(s.args[0])].dtype() == DType::Int64;
    }
    trained += layer && p.backward;
  }
  for (size_t k = 0; k < forms.size(); ++k) EXPECT_GT(forms[k], 10) << "layer form " << k;
  EXPECT_GT(depthwise, 10);
  EXPECT_GT(dense, 10);
  EXPECT_GT(biased, 10);
  EXPECT_GT(stride2, 20);
  EXPECT_GT(padded, 20);
  EXPECT_GT(dilated, 10);
  EXPECT_GT(trained, int64_t(kLayerPrograms / 8));
  EXPECT_GT(int_sorts, 1);
  std::printf(
      "[ layers    ] %d programs: %lld of %lld steps layers, %lld/%lld dense/depthwise convs "
      "(%lld with a bias), %lld training programs with layers, forms:",
      int(kLayerPrograms), (long long)layer_steps, (long long)steps, (long long)dense,
      (long long)depthwise, (long long)biased, (long long)trained);
  for (int64_t f : forms) std::printf(" %lld", (long long)f);
  std::printf("\n");
}

TEST(RandomPrograms, GeneratorCoversTheOpKinds) {
  using testgen::Op;
  std::vector<int> seen(size_t(Op::kCount), 0);
  int64_t broadcasts = 0, mixed = 0, zero_dim = 0, big = 0, strided = 0;
  // The forms that once broke the compiler: a row op (reduction over the last dim, softmax,
  // layer_norm) of a product, a row op and a product combined, a whole-dim narrow under backward,
  // a reduction without keepdim broadcast against its input on square and other shapes.
  int64_t training = 0, row_of_product = 0, row_with_product = 0, whole_narrow_trained = 0,
          reduce_square = 0, reduce_other = 0, attention = 0;
  int64_t composites[3] = {0, 0, 0};
  auto row_op = [](const testgen::Step& s, const Tensor& x) {
    const bool row = s.op == Op::Softmax || s.op == Op::Sum || s.op == Op::Mean ||
                     s.op == Op::Amax || s.op == Op::LayerNorm;
    return row && (s.op == Op::LayerNorm || s.dim == x.dim() - 1);
  };
  for (uint64_t seed = 1; seed <= kPrograms; ++seed) {
    Program p = testgen::generate_program(seed);
    EXPECT_GE(p.steps.size(), 1u);
    EXPECT_LE(p.steps.size(), 10u);
    training += p.backward;
    for (const auto& s : p.steps) ++seen[size_t(s.op)];
    std::vector<Tensor> v = testgen::run_all(p, testgen::make_inputs(p, seed));
    const int ni = int(p.inputs.size());
    auto producer = [&](int value) -> const testgen::Step* {
      return value >= ni ? &p.steps[size_t(value - ni)] : nullptr;
    };
    for (size_t i = 0; i < p.steps.size(); ++i) {
      const auto& s = p.steps[i];
      const Tensor& x = v[size_t(s.args[0])];
      if (s.op == Op::Binary) {
        const Tensor &a = x, &b = v[size_t(s.args[1])];
        broadcasts += a.sizes() != b.sizes();
        mixed += a.dtype() != b.dtype();
        const testgen::Step *pa = producer(s.args[0]), *pb = producer(s.args[1]);
        for (int k = 0; k < 2; ++k, std::swap(pa, pb))
          row_with_product +=
              pa && pb && pb->op == Op::Matmul && row_op(*pa, v[size_t(pa->args[0])]);
      }
      const testgen::Step* px = producer(s.args[0]);
      row_of_product += px && px->op == Op::Matmul && row_op(s, x);
      // softmax(x y^T * c) @ z
      const testgen::Step* scaled = px && px->op == Op::Softmax ? producer(px->args[0]) : nullptr;
      const testgen::Step* scores = scaled ? producer(scaled->args[0]) : nullptr;
      attention += s.op == Op::Matmul && scores && scores->op == Op::Matmul;
      whole_narrow_trained +=
          p.backward && s.op == Op::Narrow && s.start == 0 && s.end == x.size(s.dim);
      if (s.op == Op::Composite) ++composites[size_t(s.fn)];
      if (s.op == Op::ReduceBroadcast && !s.keepdim) {
        const bool square = x.dim() >= 2 && x.size(-1) == x.size(-2) && x.size(-1) > 1;
        reduce_square += square;
        reduce_other += !square;
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
  for (size_t k = 0; k < seen.size(); ++k)  // layer steps only from kLayerSeeds on
    if (Op(k) == Op::Layer)
      EXPECT_EQ(seen[k], 0);
    else
      EXPECT_GT(seen[k], 5) << "op kind " << k;
  EXPECT_GT(broadcasts, 50);
  EXPECT_GT(mixed, 20);
  EXPECT_GT(zero_dim, 20);
  EXPECT_GT(big, 10);  // multi-threaded kernel paths
  EXPECT_GT(strided, 50);
  EXPECT_GT(training, int64_t(kPrograms / 8));
  EXPECT_GT(row_of_product, 20);
  EXPECT_GT(row_with_product, 10);
  EXPECT_GT(whole_narrow_trained, 10);
  EXPECT_GT(reduce_square, 10);
  EXPECT_GT(reduce_other, 10);
  EXPECT_GT(attention, 10);
  for (int64_t c : composites) EXPECT_GT(c, 10);  // rms_norm, cumsum, roll
  std::printf(
      "[ generator ] %d programs: %lld training, %lld row ops of a product, %lld row ops "
      "combined with a product, %lld whole-dim narrows trained, %lld/%lld reductions "
      "broadcast without keepdim over square/other trailing dims, %lld attentions, "
      "%lld/%lld/%lld rms_norm/cumsum/roll\n",
      int(kPrograms), (long long)training, (long long)row_of_product, (long long)row_with_product,
      (long long)whole_narrow_trained, (long long)reduce_square, (long long)reduce_other,
      (long long)attention, (long long)composites[0], (long long)composites[1],
      (long long)composites[2]);
  expect_layer_coverage();
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

TEST(RandomPrograms, EagerBackendIsBitIdentical) {
  run_programs("eager", 1, program_count(kPrograms));
}

TEST(RandomPrograms, CompilerBackendMatchesEager) {
  compile_programs(1, program_count(kCompilerPrograms));
}

TEST(RandomPrograms, LayerProgramsEagerBackendIsBitIdentical) {
  run_programs("eager", testgen::kLayerSeeds, program_count(kLayerPrograms));
}

TEST(RandomPrograms, LayerProgramsCompilerBackendMatchesEager) {
  compile_programs(testgen::kLayerSeeds, program_count(kLayerPrograms));
}

}  // namespace
}  // namespace ember
