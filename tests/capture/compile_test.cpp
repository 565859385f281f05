// compile(): capture and replay, control flow on non-tensor arguments, structured results,
// guards and recompiles, the recompile limit, module wrappers, and threads.
#include <unistd.h>

#include <cstdlib>
#include <thread>

#include "capture/capture_test_util.h"

namespace ember::test {
namespace {

class Compile : public ::testing::Test {
 protected:
  void SetUp() override { reset_compile_caches(); }
};

TEST_F(Compile, NeverBreakingFunctionIsReplayedWithoutRunningItsBody) {
  int body_runs = 0;
  auto f = compile([&](const Tensor& x, const Tensor& y) {
    ++body_runs;
    return (x * y + 1.0).relu();
  }, eager_backend());
  Tensor x = randn({4, 5}), y = randn({4, 5});
  Tensor want = (x * y + 1.0).relu();
  EXPECT_TRUE(bits_equal(f(x, y), want));
  EXPECT_EQ(body_runs, 1);
  Tensor x2 = randn({4, 5}), y2 = randn({4, 5});
  EXPECT_TRUE(bits_equal(f(x2, y2), (x2 * y2 + 1.0).relu()));
  EXPECT_TRUE(bits_equal(f(x, y), want));
  EXPECT_EQ(body_runs, 1);  // replayed from the graph
  CompileStats s = f.stats();
  EXPECT_EQ(s.traces, 1);
  EXPECT_EQ(s.compiles, 1);
  EXPECT_EQ(s.replays, 2);
  EXPECT_EQ(s.cache_hits, 2);
  EXPECT_EQ(s.breaks, 0);
}

TEST_F(Compile, BranchOnNonTensorArgumentsIsGuardedByValue) {
  auto f = compile([](const Tensor& x, int mode, double scale, bool neg, const std::string& act) {
    Tensor y = mode == 0 ? x * scale : x + scale;
    if (neg) y = -y;
    return act == "relu" ? y.relu() : y.tanh();
  });
  Tensor x = randn({3, 3});
  EXPECT_TRUE(bits_equal(f(x, 0, 2.0, false, "relu"), (x * 2.0).relu()));
  EXPECT_TRUE(bits_equal(f(x, 1, 2.0, false, "relu"), (x + 2.0).relu()));
  EXPECT_TRUE(bits_equal(f(x, 1, 3.0, true, "tanh"), (-(x + 3.0)).tanh()));
  EXPECT_TRUE(bits_equal(f(x, 0, 2.0, false, "relu"), (x * 2.0).relu()));
  CompileStats s = f.stats();
  EXPECT_EQ(s.traces, 3);
  EXPECT_EQ(s.recompiles, 2);
  EXPECT_EQ(s.replays, 1);
}

TEST_F(Compile, LoopsAndNestedCallsAreUnrolledIntoOneGraph) {
  auto layer = [](const Tensor& h, const Tensor& w) { return matmul(h, w).tanh(); };
  auto f = compile([&](const Tensor& x, const std::vector<Tensor>& ws, int64_t repeat) {
    Tensor h = x;
    for (int64_t r = 0; r < repeat; ++r)
      for (const Tensor& w : ws) h = layer(h, w);
    return h.sum({1});
  }, eager_backend());  // bit for bit: generated products may round otherwise on other CPUs
  Tensor x = randn({2, 4});
  std::vector<Tensor> ws = {randn({4, 4}), randn({4, 4}), randn({4, 4})};
  auto eager = [&](int64_t repeat) {
    Tensor h = x;
    for (int64_t r = 0; r < repeat; ++r)
      for (const Tensor& w : ws) h = layer(h, w);
    return h.sum({1});
  };
  EXPECT_TRUE(bits_equal(f(x, ws, 2), eager(2)));
  EXPECT_TRUE(bits_equal(f(x, ws, 2), eager(2)));
  EXPECT_EQ(f.explain().graph_count, 1);
  EXPECT_EQ(f.explain().ops_per_graph.at(0), 2 * 3 * 2 + 1);  // matmul+tanh per step, sum
  // A different vector length is a different entry.
  std::vector<Tensor> two(ws.begin(), ws.begin() + 2);
  Tensor got = f(x, two, 1);
  Tensor want = layer(layer(x, ws[0]), ws[1]).sum({1});
  EXPECT_TRUE(bits_equal(got, want));
  EXPECT_EQ(f.stats().recompiles, 1);
}

TEST_F(Compile, CompiledFunctionsCalledInsideOthersAreInlined) {
  auto inner = compile([](const Tensor& x) { return x.exp() - 1.0; });
  auto outer = compile([&](const Tensor& x) { return inner(x) * inner(x * 2.0); });
  Tensor x = randn({5});
  Tensor want = (x.exp() - 1.0) * ((x * 2.0).exp() - 1.0);
  EXPECT_TRUE(bits_equal(outer(x), want));
  EXPECT_TRUE(bits_equal(outer(x), want));
  EXPECT_EQ(outer.explain().graph_count, 1);
  EXPECT_EQ(inner.stats().traces, 0);  // only ever ran inside the outer capture
}

TEST_F(Compile, TupleVectorAndPairResults) {
  auto f = compile([](const Tensor& x) {
    return std::make_tuple(x + 1.0, std::vector<Tensor>{x * 2.0, x * 3.0, x}, x.sum());
  });
  auto g = compile([](const Tensor& x) { return std::make_pair(x.amax(), x.amin()); });
  Tensor x = randn({2, 3});
  for (int call = 0; call < 2; ++call) {
    auto [a, v, s] = f(x);
    EXPECT_TRUE(bits_equal(a, x + 1.0));
    ASSERT_EQ(v.size(), 3u);
    EXPECT_TRUE(bits_equal(v[0], x * 2.0));
    EXPECT_TRUE(bits_equal(v[1], x * 3.0));
    EXPECT_TRUE(bits_equal(v[2], x));
    EXPECT_TRUE(bits_equal(s, x.sum()));
    auto [mx, mn] = g(x);
    EXPECT_TRUE(bits_equal(mx, x.amax()));
    EXPECT_TRUE(bits_equal(mn, x.amin()));
  }
  EXPECT_EQ(f.stats().replays, 1);
}

TEST_F(Compile, ShapeChangeRecompilesOnceAndTheOldEntryStillHits) {
  auto f = compile([](const Tensor& x) { return x.softmax(-1); }, eager_backend());
  Tensor a = randn({4, 64}), b = randn({4, 128});
  EXPECT_TRUE(bits_equal(f(a), a.softmax(-1)));
  EXPECT_TRUE(bits_equal(f(b), b.softmax(-1)));
  EXPECT_TRUE(bits_equal(f(b), b.softmax(-1)));
  EXPECT_TRUE(bits_equal(f(a), a.softmax(-1)));
  CompileStats s = f.stats();
  EXPECT_EQ(s.traces, 2);
  EXPECT_EQ(s.recompiles, 1);
  EXPECT_EQ(s.cache_hits, 2);
  ASSERT_EQ(f.explain().recompile_reasons.size(), 1u);
  EXPECT_EQ(f.explain().recompile_reasons[0], "input 0 size[1]: expected 64, got 128");
}

TEST_F(Compile, GuardFailureTextsNameWhatChanged) {
  auto f = compile([](const Tensor& x) { return x * 2.0; });
  Tensor x = randn({3, 4});
  f(x);
  f(x.to(DType::Float64));
  f(x.t());  // strided
  Tensor r = randn({3, 4});
  r.requires_grad_(true);
  f(r);
  auto reasons = f.explain().recompile_reasons;
  ASSERT_EQ(reasons.size(), 3u);
  EXPECT_EQ(reasons[0], "input 0 dtype: expected float32, got float64");
  EXPECT_EQ(reasons[1], "input 0 size[0]: expected 3, got 4");
  EXPECT_EQ(reasons[2], "input 0 requires_grad: expected false, got true");
  EXPECT_TRUE(bits_equal(f(x.t()), x.t() * 2.0));
}

TEST_F(Compile, RecompileLimitFallsBackToEager) {
  CompileOptions o;
  o.recompile_limit = 2;
  o.dynamic = false;  // every size built on its own, so every entry counts
  int body_runs = 0;
  auto f = compile(
      [&](const Tensor& x) {
        ++body_runs;
        return x + 1.0;
      },
      o);
  for (int64_t n = 1; n <= 4; ++n) {
    Tensor x = randn({n});
    EXPECT_TRUE(bits_equal(f(x), x + 1.0));
  }
  CompileStats s = f.stats();
  EXPECT_EQ(s.traces, 2);
  EXPECT_EQ(s.eager_fallbacks, 2);
  // Eager from then on, even for a shape that has an entry.
  Tensor one = randn({1});
  EXPECT_TRUE(bits_equal(f(one), one + 1.0));
  EXPECT_EQ(f.stats().eager_fallbacks, 3);
  EXPECT_EQ(body_runs, 5);
}

TEST_F(Compile, GradModeFlipRecompiles) {
  auto f = compile([](const Tensor& x, const Tensor& w) { return (x * w).sum(); });
  Tensor x = randn({3}), w = randn({3});
  w.requires_grad_(true);
  Tensor l1 = f(x, w);
  EXPECT_TRUE(l1.requires_grad());
  {
    NoGradGuard ng;
    Tensor l2 = f(x, w);
    EXPECT_FALSE(l2.requires_grad());
    // The compiled kernel fuses the product into the sum, which may round differently
    // (multiply-add contraction), so the value is compared to a float32 tolerance.
    EXPECT_NEAR(l2.item<double>(), (x * w).sum().item<double>(), 1e-5);
  }
  CompileStats s = f.stats();
  EXPECT_EQ(s.recompiles, 1);
  EXPECT_EQ(f.explain().recompile_reasons[0], "grad mode: expected enabled, got disabled");
  // Backward through the replayed graph.
  Tensor l3 = f(x, w);
  l3.backward();
  EXPECT_TRUE(bits_equal(w.grad(), x));
}

struct Scaler : nn::Module {
  Scaler() : nn::Module("Scaler") {
    register_parameter("w", w, ones({4}));
    register_buffer("count", count, zeros({1}));
  }
  Tensor forward(const Tensor& x) {
    count.add_(1.0);
    return is_training() ? x * w : x * w * 0.5;
  }
  Tensor w, count;
};

TEST_F(Compile, TrainEvalFlipRecompilesAndBufferUpdatesMatchEager) {
  auto eager_model = std::make_shared<Scaler>();
  auto model = std::make_shared<Scaler>();
  auto cm = compile(model);
  Tensor x = randn({4});
  EXPECT_TRUE(bits_equal(cm(x), eager_model->forward(x)));
  EXPECT_TRUE(bits_equal(cm(x), eager_model->forward(x)));
  cm.eval();
  eager_model->eval();
  EXPECT_TRUE(bits_equal(cm(x), eager_model->forward(x)));
  cm.train();
  eager_model->train();
  EXPECT_TRUE(bits_equal(cm(x), eager_model->forward(x)));
  EXPECT_TRUE(bits_equal(model->count, eager_model->count));
  EXPECT_EQ(model->count.item(), 4.0);
  CompileStats s = cm.stats();
  EXPECT_EQ(s.traces, 2);
  EXPECT_EQ(s.recompiles, 1);
  EXPECT_EQ(s.replays, 2);
  EXPECT_NE(cm.explain().recompile_reasons.at(0).find("training"), std::string::npos);
}

TEST_F(Compile, ModuleWrapperStateDictKeysAreTheModulesOwn) {
  auto model = std::make_shared<Scaler>();
  auto cm = compile(model);
  EXPECT_EQ(&cm.orig(), model.get());
  auto sd = cm.state_dict();
  ASSERT_EQ(sd.size(), 2u);
  EXPECT_EQ(sd[0].first, "w");
  EXPECT_EQ(sd[1].first, "count");
  nn::StateDict prefixed = {{"_orig_mod.w", full({4}, 3.0)}, {"_orig_mod.count", zeros({1})}};
  EXPECT_TRUE(cm.load_state_dict(prefixed).ok());
  EXPECT_EQ(model->w.to_vector<float>(), std::vector<float>(4, 3.0f));
  // Loaded in place: the compiled graph sees the new values.
  Tensor x = ones({4});
  EXPECT_EQ(cm(x).to_vector<float>(), std::vector<float>(4, 3.0f));
  EXPECT_EQ(cm(x).to_vector<float>(), std::vector<float>(4, 3.0f));
}

TEST_F(Compile, ReplacedParameterRecompiles) {
  auto model = std::make_shared<Scaler>();
  auto cm = compile(model);
  Tensor x = ones({4});
  cm(x);
  model->w = full({4}, 5.0);
  model->tie_parameter("w", model->w);
  EXPECT_EQ(cm(x).to_vector<float>(), std::vector<float>(4, 5.0f));
  EXPECT_EQ(cm.stats().recompiles, 1);
}

TEST_F(Compile, InPlaceUpdateOfAnInputMatchesEager) {
  auto step = [](Tensor p, const Tensor& g) {
    p.mul_(0.9);
    p.add_(g * 0.1);
    return p * 2.0;
  };
  auto f = compile(step, eager_backend());  // bit for bit: the interpreted graph
  Tensor pe = randn({6}), g = randn({6});
  Tensor pc = pe.clone();
  for (int i = 0; i < 3; ++i) {
    Tensor want = step(pe, g);
    Tensor got = f(pc, g);
    EXPECT_TRUE(bits_equal(got, want));
    EXPECT_TRUE(bits_equal(pc, pe));
  }
  EXPECT_EQ(f.stats().replays, 2);
}

TEST_F(Compile, InPlaceOnALocalTensorStartsFreshEachReplay) {
  auto f = compile([](const Tensor& x) {
    Tensor acc = from_vector<float>({1, 1, 1}, {3});
    acc.add_(x);
    return acc;
  });
  Tensor x = ones({3});
  for (int i = 0; i < 3; ++i) EXPECT_EQ(f(x).to_vector<float>(), std::vector<float>(3, 2.0f));
}

TEST_F(Compile, InPlaceOnAViewOfAnInputMatchesEager) {
  auto fn = [](Tensor x) {
    x.slice(0, 1, 3).mul_(10.0);
    return x.sum();
  };
  auto f = compile(fn);
  Tensor a = randn({4}), b = a.clone();
  for (int i = 0; i < 2; ++i) {
    EXPECT_TRUE(bits_equal(f(b), fn(a)));
    EXPECT_TRUE(bits_equal(a, b));
  }
}

TEST_F(Compile, SameTensorPassedTwiceIsGuarded) {
  auto f = compile([](const Tensor& a, const Tensor& b) { return a + b; });
  Tensor x = randn({3}), y = randn({3});
  EXPECT_TRUE(bits_equal(f(x, x), x + x));
  EXPECT_TRUE(bits_equal(f(x, y), x + y));
  EXPECT_EQ(f.stats().recompiles, 1);
}

TEST_F(Compile, ManyThreadsCallOneCompiledFunction) {
  // The eager backend, so every call can be checked bit for bit on any CPU.
  auto f = compile([](const Tensor& x, const Tensor& y) { return (x.matmul(y) + 1.0).gelu(); },
                   eager_backend());
  constexpr int kThreads = 6, kCalls = 40;
  std::vector<Tensor> xs, ys, wants;
  for (int t = 0; t < kThreads; ++t) {
    int64_t n = 2 + t % 3;  // three shapes, so threads trace and hit concurrently
    xs.push_back(randn({n, 8}));
    ys.push_back(randn({8, n}));
    wants.push_back((xs.back().matmul(ys.back()) + 1.0).gelu());
  }
  std::vector<int> ok(kThreads, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int c = 0; c < kCalls; ++c)
        ok[size_t(t)] += bool(bits_equal(f(xs[size_t(t)], ys[size_t(t)]), wants[size_t(t)]));
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(ok[size_t(t)], kCalls) << "thread " << t;
  CompileStats s = f.stats();
  EXPECT_EQ(s.traces, 3);
  EXPECT_EQ(s.calls, kThreads * kCalls);
  EXPECT_EQ(s.replays, kThreads * kCalls - 3);
}

TEST_F(Compile, UnknownBackendIsAnError) {
  CompileOptions o;
  o.backend = "nope";
  try {
    compile([](const Tensor& x) { return x; }, o);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("eager"), std::string::npos) << e.what();
  }
}

TEST_F(Compile, FactoriesAndRandomOpsReplayLikeEager) {
  auto fn = [](const Tensor& x) { return x + rand({3}) + arange(3).to(DType::Float32); };
  auto f = compile(fn);
  Tensor x = randn({3});
  manual_seed(7);
  std::vector<Tensor> want = {fn(x), fn(x), fn(x)};
  manual_seed(7);
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(bits_equal(f(x), want[size_t(i)])) << "call " << i;
}

}  // namespace
}  // namespace ember::test

namespace ember::test {
namespace {

// EMBER_COMPILE is read once per process: this test re-runs itself in a child process with
// EMBER_COMPILE=0 and checks there that compile() is the identity.
TEST(CompileEnv, EmberCompileZeroMakesCompileTheIdentity) {
  const char* env = std::getenv("EMBER_COMPILE");
  if (env && std::string(env) == "0") {
    int runs = 0;
    auto f = compile([&](const Tensor& x) {
      ++runs;
      return x + 1.0;
    });
    Tensor x = randn({3});
    f(x);
    f(x);
    EXPECT_EQ(runs, 2);
    EXPECT_EQ(f.stats().calls, 0);
    return;
  }
  char self[4096];
  ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  ASSERT_GT(n, 0);
  self[n] = 0;
  std::string cmd =
      std::string("EMBER_COMPILE=0 '") + self + "' --gtest_filter=CompileEnv.* > /dev/null 2>&1";
  EXPECT_EQ(std::system(cmd.c_str()), 0);
}

}  // namespace
}  // namespace ember::test

namespace ember::test {
namespace {

TEST(CompileResults, ReturnedArgumentsAreTheSameTensorsAsInEager) {
  auto f = compile([](Tensor p, const Tensor& g) {
    p.add_(g);
    return std::make_tuple(p, g, Tensor(), g * 2.0);
  });
  Tensor p = zeros({2}), g = ones({2});
  for (int i = 1; i <= 3; ++i) {
    auto [a, b, u, c] = f(p, g);
    EXPECT_EQ(a.impl(), p.impl());
    EXPECT_EQ(b.impl(), g.impl());
    EXPECT_FALSE(u.defined());
    EXPECT_EQ(p.to_vector<float>(), std::vector<float>(2, float(i)));
    EXPECT_EQ(c.to_vector<float>(), std::vector<float>(2, 2.0f));
  }
  EXPECT_EQ(f.stats().replays, 2);
}

}  // namespace
}  // namespace ember::test
