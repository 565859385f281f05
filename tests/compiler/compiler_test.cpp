// The "compiler" backend: fused results equal eager ones, fusion groups, the disk cache.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "capture/capture_test_util.h"
#include "compiler/compiler_test_util.h"
#include "compiler/compiled_graph.h"
#include "compiler/step_profile.h"
#include "compiler/toolchain.h"
#include "ember/autograd.h"

namespace ember {
namespace {

using test::CacheDir;
using test::compiler_opts;

// Removes a test's cache directory. Does not throw: a precompiled-includes build the test
// started in the background may still be writing there.
void remove_tree(const std::string& d) {
  std::error_code ec;
  std::filesystem::remove_all(d, ec);
}

std::string fresh_dir(const char* tag) {
  std::string d = std::string("/tmp/ember-compiler-test-") + tag + "-" + std::to_string(::getpid());
  remove_tree(d);
  return d;
}

// |a - b| <= atol + rtol * |b| elementwise.
::testing::AssertionResult allclose(const Tensor& a, const Tensor& b, double rtol, double atol) {
  std::vector<double> x = a.to_vector<double>(), y = b.to_vector<double>();
  if (x.size() != y.size()) return ::testing::AssertionFailure() << "sizes differ";
  for (size_t i = 0; i < x.size(); ++i)
    if (!(std::abs(x[i] - y[i]) <= atol + rtol * std::abs(y[i])))
      return ::testing::AssertionFailure() << "element " << i << ": " << x[i] << " vs " << y[i];
  return ::testing::AssertionSuccess();
}

Tensor relu_add_mul(const Tensor& x) { return (x.relu() + 1.0) * 2.0; }

using test::compile_graph;
using test::relu_add_mul_graph;

class CompilerTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(compiler::compiler_available()); }
  CacheDir dir{test::kSharedCompilerCache};
};

TEST_F(CompilerTest, ChainsMatchEagerExactly) {
  for (DType t : {DType::Float32, DType::Float64}) {
    reset_compile_caches();
    auto f = compile(relu_add_mul, compiler_opts());
    Tensor x = randn({64, 8}, TensorOptions(t));
    EXPECT_TRUE(test::bits_equal(f(x), relu_add_mul(x))) << dtype_name(t);
    EXPECT_TRUE(test::bits_equal(f(x), relu_add_mul(x))) << dtype_name(t);  // replay
  }
}

TEST_F(CompilerTest, BroadcastingAndStridedInputsMatchEager) {
  // a broadcasts over rows and columns, b is a transposed (strided) view.
  auto fn = [](const Tensor& a, const Tensor& b) { return ((a * b + b).relu() - a).sigmoid(); };
  auto f = compile(fn, compiler_opts());
  for (DType t : {DType::Float32, DType::Float64}) {
    Tensor a = randn({4, 1, 8}, TensorOptions(t));
    Tensor b = randn({8, 3}, TensorOptions(t)).t();
    Tensor got = f(a, b), want = fn(a, b);
    ASSERT_EQ(got.sizes(), want.sizes());
    // The same functors run in both, so this holds exactly; the tolerance documents that
    // only rounding-level differences would be acceptable.
    EXPECT_TRUE(allclose(got, want, 1e-6, 1e-7)) << dtype_name(t);
  }
}

TEST_F(CompilerTest, ReluAddMulFusesIntoOneKernel) {
  auto cg = compile_graph(relu_add_mul_graph());
  ASSERT_TRUE(cg);
  EXPECT_EQ(cg->kernel_count(), 1u);
  EXPECT_NE(cg->source().find("ember::fn::Relu"), std::string::npos);
  EXPECT_NE(cg->source().find("%"), std::string::npos);  // the comment naming the nodes
  Tensor x = randn({64, 8});
  EXPECT_TRUE(test::bits_equal(cg->run({x})[0], relu_add_mul(x)));
}

// The calls column of the profile table's row for `step`, or -1 without such a row.
long profile_calls(const std::string& table, const std::string& step) {
  std::istringstream lines(table);
  for (std::string line; std::getline(lines, line);) {
    if (!test::has(line, step)) continue;
    std::istringstream f(line);
    double ms;
    std::string share;
    long calls = -1;
    f >> ms >> share >> calls;
    return calls;
  }
  return -1;
}

TEST_F(CompilerTest, ProfileCountsEveryStepOfEveryCall) {
  // A fused kernel and an op left to the eager kernels (a batched matmul), three calls each.
  auto fn = [](const Tensor& a, const Tensor& b) { return (a.matmul(b).relu() + 1.0) * 2.0; };
  auto f = compile(fn, compiler_opts());
  Tensor a = randn({2, 16, 8}), b = randn({2, 8, 4});
  f(a, b);  // compiled before profiling starts
  compiler::reset_step_profile();
  compiler::set_step_profile(true);
  for (int i = 0; i < 3; ++i) f(a, b);
  compiler::set_step_profile(false);
  f(a, b);  // not counted
  const std::string table = compiler::step_profile_table();
  compiler::reset_step_profile();
  EXPECT_TRUE(test::has(table, "ember profile (EMBER_PROFILE)")) << table;
  EXPECT_EQ(profile_calls(table, "pointwise (relu, add, mul) -> f32[2, 16, 4]"), 3) << table;
  EXPECT_EQ(profile_calls(table, "eager matmul -> f32[2, 16, 4]"), 3) << table;
  EXPECT_EQ(compiler::step_profile_table(), "");
}

TEST_F(CompilerTest, ViewsOfInputsLaidOutOtherwiseThanCapturedStayCorrect) {
  // Views in a compiled graph are made directly when their input is laid out as captured; an
  // input of the same shape but other strides or offset goes through the dispatcher.
  auto fn = [](const Tensor& x, const Tensor& w) {
    Tensor h = x.transpose(0, 1).matmul(w);                 // a view feeding a matmul
    return std::make_pair(h.view({4, 2, 6}) * 2.0, x.narrow(1, 2, 3));  // views of results
  };
  auto f = compile(fn, compiler_opts());
  Tensor w = randn({16, 6});
  Tensor contiguous = randn({16, 8});
  Tensor strided = randn({8, 16}).transpose(0, 1);          // same sizes, other strides
  Tensor offset = randn({17, 8}).narrow(0, 1, 16);          // same strides, storage offset 8
  for (const Tensor& x : {contiguous, strided, offset, contiguous}) {
    auto [a, b] = f(x, w);
    auto [ea, eb] = fn(x, w);
    EXPECT_TRUE(allclose(a, ea, 1e-5, 1e-6));  // a generated product: rounding may differ
    EXPECT_TRUE(test::bits_equal(b, eb));
    EXPECT_EQ(b.strides(), eb.strides());
    EXPECT_EQ(b.storage_offset(), eb.storage_offset());
    EXPECT_EQ(b.data_ptr<float>(), eb.data_ptr<float>());  // a view of x, as eagerly
  }
}

TEST_F(CompilerTest, InputFreeValuesStayRightAcrossCallsAndHandedOutOnesAreFresh) {
  // The mask depends on no input: computed by the first call, reused after. A constant the
  // graph returns is made afresh each call, so writing into it cannot leak into the next.
  auto fn = [](const Tensor& x) {
    Tensor mask = full({6, 6}, -INFINITY).triu(1);
    Tensor shown = full({2, 2}, 3.0);
    return std::make_pair((x.matmul(x.transpose(0, 1)) + mask).softmax(-1), shown);
  };
  auto f = compile(fn, compiler_opts());
  for (int call = 0; call < 3; ++call) {
    Tensor x = randn({6, 4});
    auto [p, shown] = f(x);
    EXPECT_TRUE(allclose(p, fn(x).first, 1e-5, 1e-6)) << "call " << call;
    EXPECT_EQ(shown.to_vector<float>(), std::vector<float>(4, 3.0f)) << "call " << call;
    shown.fill_(-1.0);  // the caller owns what it got
  }
}

TEST_F(CompilerTest, IntermediateUsedTwiceIsNotFusedAway) {
  auto fn = [](const Tensor& x) {
    Tensor r = x.relu();
    return std::make_tuple(r * 2.0, r + 1.0);
  };
  auto f = compile(fn, compiler_opts());
  Tensor x = randn({64, 8});
  auto [p, q] = f(x);
  auto [p0, q0] = fn(x);
  EXPECT_TRUE(test::bits_equal(p, p0));
  EXPECT_TRUE(test::bits_equal(q, q0));
}

TEST_F(CompilerTest, RequiresGradRunsEagerlyAndRecordsHistory) {
  auto f = compile(relu_add_mul, compiler_opts());
  Tensor x = randn({64, 8});
  x.requires_grad_(true);
  Tensor y = f(x);
  ASSERT_TRUE(y.requires_grad());
  y.sum().backward();
  Tensor want = x.detach().gt(0.0).to(DType::Float32) * 2.0;
  EXPECT_TRUE(test::bits_equal(x.grad(), want));
}

TEST_F(CompilerTest, WriteBacksIntoInputsMatchEager) {
  // An optimizer-like update: p and m written back; the kernels write into them directly.
  auto step = [](Tensor p, Tensor m, const Tensor& g) {
    m.mul_(0.9).add_(g * 0.1);
    p.sub_(m * 0.5);
    return p.sum();
  };
  auto f = compile(step, compiler_opts());
  Tensor pe = randn({64, 8}), me = randn({64, 8}), g = randn({64, 8});
  Tensor pc = pe.clone(), mc = me.clone();
  const void* p_data = pc.impl()->data();
  for (int i = 0; i < 3; ++i) {
    Tensor want = step(pe, me, g), got = f(pc, mc, g);
    EXPECT_TRUE(allclose(pc, pe, 1e-5, 1e-6)) << "step " << i;
    EXPECT_TRUE(allclose(mc, me, 1e-5, 1e-6)) << "step " << i;
    EXPECT_TRUE(allclose(got, want, 1e-5, 1e-5)) << "step " << i;
  }
  EXPECT_EQ(pc.impl()->data(), p_data);  // the argument keeps its storage, as in eager mode
  // The target read through a view in the same update: computed from the old values.
  auto sym = [](Tensor p) { return p.add_(p.t() * 2.0).sum(); };
  Tensor q = randn({8, 8});
  Tensor want = q + q.t() * 2.0;
  compile(sym, compiler_opts())(q);
  EXPECT_TRUE(allclose(q, want, 1e-6, 1e-7));
}

TEST_F(CompilerTest, ConsecutiveKernelsRunAsOneBatch) {
  // Two write-backs with tensor scalars (no eager node between the kernels): one batch, and
  // p's kernel reads m's new values element for element, so no barrier is needed.
  auto step = [](Tensor p, Tensor m, const Tensor& g, const Tensor& s) {
    m.mul_(s).add_(g);
    p.sub_(m * s);
    return std::vector<Tensor>{};
  };
  const Tensor s = scalar_tensor(0.5, DType::Float32);
  // 40000 elements a kernel: enough work for a parallel region. 300: the calling thread alone.
  for (int64_t n : {40000, 300}) {
    auto f = compile(step, test::spy_opts());
    Tensor pe = randn({n}), me = randn({n}), g = randn({n});
    Tensor pc = pe.clone(), mc = me.clone();
    for (int i = 0; i < 2; ++i) {
      step(pe, me, g, s);
      f(pc, mc, g, s);
      EXPECT_TRUE(allclose(pc, pe, 1e-5, 1e-6));
      EXPECT_TRUE(allclose(mc, me, 1e-5, 1e-6));
    }
    EXPECT_TRUE(test::has(test::last_source(), "batch_0"));
    EXPECT_EQ(test::has(test::last_source(), "#pragma omp parallel"), n == 40000) << n;
    EXPECT_FALSE(test::has(test::last_source(), "#pragma omp barrier"));
  }
  // A kernel reading an earlier result broadcast (other elements than its own) waits.
  auto bcast = [](const Tensor& x, const Tensor& z) {
    Tensor c = x.exp();
    return std::vector<Tensor>{(z + c).relu(), c * 2.0};
  };
  auto fb = compile(bcast, test::spy_opts());
  Tensor x = randn({8, 1}), z = randn({8, 4096});
  std::vector<Tensor> got = fb(x, z), want = bcast(x, z);
  EXPECT_TRUE(allclose(got[0], want[0], 1e-6, 1e-7));
  EXPECT_TRUE(allclose(got[1], want[1], 1e-6, 1e-7));
  EXPECT_TRUE(test::has(test::last_source(), "#pragma omp barrier"));
}

TEST(CompilerCache, UnusableCacheDirectoryFallsBackToEagerWithAWarning) {
  ASSERT_TRUE(compiler::compiler_available());
  CacheDir guard("/dev/null/ember");  // cannot be created
  test::ScopedEnv lenient("EMBER_COMPILER_STRICT", "0");  // the fallback under test
  compiler::clear_memory_cache();
  reset_compile_caches();
  NoGradGuard no_grad;
  auto fn = [](const Tensor& x) { return (x.exp() * 3.0).tanh(); };
  auto f = compile(fn, compiler_opts());
  Tensor x = randn({16, 4});
  ::testing::internal::CaptureStderr();
  Tensor y = f(x);
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_TRUE(test::bits_equal(y, fn(x)));  // interpreted: eager's kernels, bit for bit
  EXPECT_NE(err.find("cannot create the cache directory"), std::string::npos) << err;
  EXPECT_NE(err.find("runs through eager interpretation"), std::string::npos) << err;
}

TEST(CompilerCache, ThreadsAskingForOneNewLibraryShareOneBuild) {
  // Four threads compile the same new graph at once: one compiler run, every graph works; a
  // different graph meanwhile builds on its own.
  ASSERT_TRUE(compiler::compiler_available());
  const std::string root = fresh_dir("threads");
  CacheDir guard(root);
  compiler::clear_memory_cache();
  const auto before = compiler::toolchain_stats();
  std::vector<std::shared_ptr<const compiler::CompiledGraph>> graphs(5);
  std::vector<std::thread> threads;
  for (int i = 0; i < 5; ++i)
    threads.emplace_back([&graphs, i] {
      graphs[size_t(i)] = compile_graph(relu_add_mul_graph(i < 4 ? Shape{64, 8} : Shape{32, 8}));
    });
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(compiler::toolchain_stats().compiler_runs, before.compiler_runs + 2);
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(graphs[size_t(i)]);
    Tensor x = randn(i < 4 ? Shape{64, 8} : Shape{32, 8});
    EXPECT_TRUE(test::bits_equal(graphs[size_t(i)]->run({x})[0], relu_add_mul(x)));
  }
  graphs.clear();
  compiler::clear_memory_cache();
  remove_tree(root);
}

// The .gch of the precompiled includes in `dir`, once the background build has published it
// (empty after two minutes without it).
std::string wait_for_precompiled_includes(const std::string& dir) {
  for (int i = 0; i < 1200; ++i) {
    if (std::filesystem::exists(dir))
      for (const auto& e : std::filesystem::directory_iterator(dir))
        if (e.is_directory() && e.path().filename().string().rfind("pch-", 0) == 0 &&
            std::filesystem::exists(e.path() / "ember_prelude.h.gch"))
          return (e.path() / "ember_prelude.h.gch").string();
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return "";
}

TEST(CompilerCache, PrecompiledIncludesAreBuiltOnceUsedAndReplacedWhenUnreadable) {
  ASSERT_TRUE(compiler::compiler_available());
  const std::string root = fresh_dir("pch");
  CacheDir guard(root);
  compiler::clear_memory_cache();
  // The first build finds no precompiled includes, builds without them and starts theirs.
  auto before = compiler::toolchain_stats();
  auto a = compile_graph(relu_add_mul_graph({64, 8}));
  EXPECT_EQ(compiler::toolchain_stats().precompiled, before.precompiled);
  const std::string gch = wait_for_precompiled_includes(root);
  ASSERT_FALSE(gch.empty()) << "no precompiled includes were built in " << root;
  // Later builds read them, and compute the same.
  before = compiler::toolchain_stats();
  auto b = compile_graph(relu_add_mul_graph({32, 8}));
  auto after = compiler::toolchain_stats();
  EXPECT_EQ(after.compiler_runs, before.compiler_runs + 1);
  EXPECT_EQ(after.precompiled, before.precompiled + 1);
  Tensor x = randn({32, 8});
  EXPECT_TRUE(test::bits_equal(b->run({x})[0], relu_add_mul(x)));
  // A truncated .gch fails the build that reads it: that build runs again without it, and
  // the file is removed so that a later build makes a new one.
  std::filesystem::resize_file(gch, std::filesystem::file_size(gch) / 2);
  before = compiler::toolchain_stats();
  auto c = compile_graph(relu_add_mul_graph({16, 8}));
  after = compiler::toolchain_stats();
  ASSERT_TRUE(c);
  EXPECT_EQ(after.precompiled, before.precompiled);
  EXPECT_FALSE(std::filesystem::exists(gch));
  Tensor y = randn({16, 8});
  EXPECT_TRUE(test::bits_equal(c->run({y})[0], relu_add_mul(y)));
  a.reset();
  b.reset();
  c.reset();
  compiler::clear_memory_cache();
  remove_tree(root);
}

TEST(CompilerCache, PrecompiledIncludesCanBeTurnedOff) {
  ASSERT_TRUE(compiler::compiler_available());
  const std::string root = fresh_dir("nopch");
  CacheDir guard(root);
  test::ScopedEnv off("EMBER_PCH", "0");
  compiler::clear_memory_cache();
  auto g = compile_graph(relu_add_mul_graph({8, 8}));
  ASSERT_TRUE(g);
  for (const auto& e : std::filesystem::directory_iterator(root))
    EXPECT_NE(e.path().filename().string().rfind("pch-", 0), 0u) << e.path();
  g.reset();
  compiler::clear_memory_cache();
  remove_tree(root);
}

TEST(CompilerCache, DiskHitCorruptRebuildAndDirMode) {
  ASSERT_TRUE(compiler::compiler_available());
  const std::string root = fresh_dir("cache");
  // A quote in the path: paths reach the compiler's command line quoted for the shell.
  const std::string dir = root + "/it's nested/ember";
  CacheDir guard(dir);
  Tensor x = randn({64, 8});
  {
    auto before = compiler::toolchain_stats();
    auto cg = compile_graph(relu_add_mul_graph());
    EXPECT_EQ(compiler::toolchain_stats().compiler_runs, before.compiler_runs + 1);
    struct stat st{};
    ASSERT_EQ(::stat(dir.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0700u);
    // A second graph of the same structure, with the in-process cache gone: a disk hit.
    compiler::clear_memory_cache();
    before = compiler::toolchain_stats();
    auto cg2 = compile_graph(relu_add_mul_graph());
    auto after = compiler::toolchain_stats();
    EXPECT_EQ(after.compiler_runs, before.compiler_runs);
    EXPECT_EQ(after.disk_hits, before.disk_hits + 1);
    EXPECT_TRUE(test::bits_equal(cg2->run({x})[0], relu_add_mul(x)));
  }
  // Corrupt the library (nothing holds it loaded now): the next load rebuilds it.
  compiler::clear_memory_cache();
  int libs = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.path().extension() != ".so") continue;
    std::ofstream(e.path(), std::ios::binary | std::ios::trunc) << "not a shared library";
    ++libs;
  }
  ASSERT_EQ(libs, 1);
  auto before = compiler::toolchain_stats();
  auto cg3 = compile_graph(relu_add_mul_graph());
  auto after = compiler::toolchain_stats();
  EXPECT_EQ(after.rebuilds, before.rebuilds + 1);
  EXPECT_EQ(after.compiler_runs, before.compiler_runs + 1);
  EXPECT_TRUE(test::bits_equal(cg3->run({x})[0], relu_add_mul(x)));
  cg3.reset();
  compiler::clear_memory_cache();
  remove_tree(root);
}

}  // namespace
}  // namespace ember
