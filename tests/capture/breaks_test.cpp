// Graph breaks: item(), bool conversion, data reads, printing, data-dependent shapes; segments
// found again in the cache without recompiling; fullgraph errors; explain and its locations.
#include <algorithm>
#include <sstream>

#include "capture/capture.h"
#include "capture/capture_test_util.h"
#include "dispatch/dispatcher.h"

namespace ember::test {
namespace {

class Breaks : public ::testing::Test {
 protected:
  void SetUp() override { reset_compile_caches(); }
};

int g_item_line = 0;

Tensor branchy(const Tensor& x) {
  Tensor s = x.sum();
  g_item_line = __LINE__ + 1;
  if (s.item() > 0) return (x * 2.0).exp();
  return x - 1.0;
}

TEST_F(Breaks, ItemBranchMatchesEagerOnBothBranchesAndCompilesEachSegmentOnce) {
  auto f = compile(branchy);
  Tensor pos = rand({8}) + 0.1, neg = -rand({8}) - 0.1;
  EXPECT_TRUE(bits_equal(f(pos), branchy(pos)));
  CompileStats s = f.stats();
  EXPECT_EQ(s.traces, 1);
  EXPECT_EQ(s.breaks, 1);
  EXPECT_EQ(s.compiles, 2);  // sum | mul, exp
  EXPECT_TRUE(bits_equal(f(pos * 3.0), branchy(pos * 3.0)));
  EXPECT_EQ(f.stats().compiles, 2);  // both segments found in the cache
  EXPECT_TRUE(bits_equal(f(neg), branchy(neg)));
  EXPECT_EQ(f.stats().compiles, 3);  // the other branch's segment
  EXPECT_TRUE(bits_equal(f(neg * 2.0), branchy(neg * 2.0)));
  EXPECT_TRUE(bits_equal(f(pos), branchy(pos)));
  s = f.stats();
  EXPECT_EQ(s.compiles, 3);
  EXPECT_EQ(s.traces, 1);
  EXPECT_EQ(s.recompiles, 0);
  EXPECT_EQ(s.segmented_runs, 4);
  EXPECT_EQ(s.breaks, 5);

  ExplainReport r = f.explain();
  ASSERT_EQ(r.breaks.size(), 1u);
  EXPECT_EQ(r.breaks[0].op, "item");
  EXPECT_EQ(r.breaks[0].location, "breaks_test.cpp:" + std::to_string(g_item_line));
  EXPECT_FALSE(r.breaks[0].hint.empty());
  EXPECT_EQ(r.graph_count, 2);
  EXPECT_NE(r.str().find("breaks_test.cpp:" + std::to_string(g_item_line)), std::string::npos)
      << r.str();
}

// A backend computes while it builds (the CUDA compiler makes an arange once): that work runs
// as eager code, never captured into the next segment, also when the compile is met at a break
// in the middle of a trace.
TEST_F(Breaks, ABackendsOwnOpsRunEagerlyWhenItCompilesAtABreak) {
  struct Probe : capture::Backend {
    int compiles = 0, traced = 0, symbolic = 0;
    std::string name() const override { return "probe-builds-a-value"; }
    std::shared_ptr<const capture::Runnable> compile(
        std::shared_ptr<const graph::Graph> g) override {
      ++compiles;
      traced += capture_hook() != nullptr;
      symbolic += arange(4).is_symbolic();
      return capture::backend("eager").compile(std::move(g));
    }
  };
  auto owned = std::make_unique<Probe>();
  Probe* probe = owned.get();
  capture::register_backend(std::move(owned));
  CompileOptions o;
  o.backend = probe->name();
  auto f = compile(branchy, o);
  const Tensor x = rand({8}) + 0.1;
  EXPECT_TRUE(bits_equal(f(x), branchy(x)));
  EXPECT_EQ(probe->compiles, 2);  // sum | mul, exp: the first at the break
  EXPECT_EQ(probe->traced, 0);
  EXPECT_EQ(probe->symbolic, 0);
}

TEST_F(Breaks, AFrontEndsSourcePositionIsWhereBreaksAreReported) {
  // What the Python bindings install: the position of the Python statement that broke.
  detail::SourcePositionScope at([] { return std::string("model.py:7"); });
  auto f = compile(branchy);
  f(randn({4}));
  ExplainReport r = f.explain();
  ASSERT_EQ(r.breaks.size(), 1u);
  EXPECT_EQ(r.breaks[0].location, "model.py:7");
  {
    // A position of "" leaves the C++ call site.
    detail::SourcePositionScope none([] { return std::string(); });
    auto g = compile(branchy);
    g(randn({4}));
    EXPECT_EQ(g.explain().breaks.at(0).location, "breaks_test.cpp:" + std::to_string(g_item_line));
  }
  // The report lists the first entry's guards.
  EXPECT_NE(std::find(r.guards.begin(), r.guards.end(), "input 0: float32[4] contiguous cpu"),
            r.guards.end())
      << r.str();
  EXPECT_NE(r.str().find("guards:\n  - input 0: float32[4]"), std::string::npos) << r.str();
}

TEST_F(Breaks, FullgraphTurnsTheFirstBreakIntoAnError) {
  CompileOptions o;
  o.fullgraph = true;
  auto f = compile(branchy, o);
  try {
    f(randn({4}));
    FAIL() << "expected a fullgraph error";
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("item"), std::string::npos) << m;
    EXPECT_NE(m.find("breaks_test.cpp:" + std::to_string(g_item_line)), std::string::npos) << m;
  }
  // Nothing was left half captured: the same function runs eagerly fine.
  Tensor x = randn({4});
  EXPECT_TRUE(bits_equal(branchy(x), branchy(x)));
}

TEST_F(Breaks, NonzeroBreaksAndNamesTheCallSite) {
  int line = 0;
  auto fn = [&](const Tensor& x) {
    Tensor m = x.gt(0.0);
    line = __LINE__ + 1;
    Tensor idx = nonzero(m);
    return idx.to(DType::Float32).sum() + x.sum();
  };
  auto f = compile(fn);
  Tensor x = randn({5, 4});
  EXPECT_TRUE(bits_equal(f(x), fn(x)));
  Tensor y = randn({5, 4});
  EXPECT_TRUE(bits_equal(f(y), fn(y)));
  ExplainReport r = f.explain();
  ASSERT_EQ(r.breaks.size(), 1u);
  EXPECT_EQ(r.breaks[0].op, "nonzero");
  EXPECT_EQ(r.breaks[0].location, "breaks_test.cpp:" + std::to_string(line));
  // The segment after the break depends on the number of non-zeros (its input shape), so
  // it may compile per count; the segment before it compiles once.
  EXPECT_EQ(f.stats().traces, 1);
}

TEST_F(Breaks, BoolConversionAndPrintingBreak) {
  auto fn = [](const Tensor& x) {
    Tensor y = x * 2.0;
    std::ostringstream os;
    os << y;  // needs the values
    Tensor z = y.sum();
    if (z.gt(0.0)) return y + 1.0;
    return y - 1.0;
  };
  auto f = compile(fn);
  Tensor x = randn({3});
  EXPECT_TRUE(bits_equal(f(x), fn(x)));
  ExplainReport r = f.explain();
  ASSERT_EQ(r.breaks.size(), 2u);
  EXPECT_EQ(r.breaks[0].op, "printing a tensor");
  EXPECT_EQ(r.breaks[1].op, "bool conversion");
  EXPECT_EQ(r.graph_count, 3);
}

TEST_F(Breaks, DataReadBreaksAndSymbolicTensorsHeldByTheProgramBecomeReal) {
  auto fn = [](const Tensor& x) {
    Tensor a = x.exp();
    Tensor b = a * 3.0;  // held across the break
    std::vector<float> v = a.to_vector<float>();
    float first = v[0];
    return b + double(first);
  };
  auto f = compile(fn);
  Tensor x = randn({4});
  EXPECT_TRUE(bits_equal(f(x), fn(x)));
  EXPECT_TRUE(bits_equal(f(x), fn(x)));
  EXPECT_EQ(f.stats().compiles, 2);
  EXPECT_EQ(f.explain().breaks.at(0).op, "to_vector");
}

TEST_F(Breaks, BrokenFunctionsKeepAutogradThroughSegments) {
  auto fn = [](const Tensor& x, const Tensor& w) {
    Tensor h = (x * w).tanh();
    double scale = h.sum().item() > 0 ? 2.0 : 3.0;
    return (h * scale).sum();
  };
  auto f = compile(fn, eager_backend());
  Tensor x = randn({5});
  Tensor w1 = randn({5}), w2 = w1.clone();
  w1.requires_grad_(true);
  w2.requires_grad_(true);
  Tensor l1 = fn(x, w1), l2 = f(x, w2);
  EXPECT_TRUE(bits_equal(l1, l2));
  l1.backward();
  l2.backward();
  EXPECT_TRUE(bits_equal(w1.grad(), w2.grad()));
}

TEST_F(Breaks, RandomOpsAroundABreakMatchEager) {
  auto fn = [](const Tensor& x) {
    Tensor a = x + rand({4});
    double m = a.amax().item();
    return a * m + randn({4});
  };
  auto f = compile(fn, eager_backend());  // bit for bit (generated kernels may contract FMAs)
  Tensor x = randn({4});
  manual_seed(11);
  Tensor w1 = fn(x), w2 = fn(x);
  manual_seed(11);
  EXPECT_TRUE(bits_equal(f(x), w1));
  EXPECT_TRUE(bits_equal(f(x), w2));
}

}  // namespace
}  // namespace ember::test

namespace ember::test {
namespace {

TEST(BreaksOnRealTensors, ReadingAnInputWrittenInPlaceSeesTheWrite) {
  auto fn = [](Tensor x) {
    x.add_(1.0);
    double first = x.to_vector<double>()[0];  // must see the write
    return x * first;
  };
  auto f = compile(fn);
  Tensor a = zeros({3}), b = zeros({3});
  EXPECT_TRUE(bits_equal(f(b), fn(a)));
  EXPECT_TRUE(bits_equal(a, b));
  EXPECT_EQ(f.explain().breaks.size(), 1u);
}

}  // namespace
}  // namespace ember::test

namespace ember::test {
namespace {

TEST(BreaksOnRealTensors, BackwardInsideACompiledFunctionBreaksAndMatchesEager) {
  auto fn = [](const Tensor& x, const Tensor& w) {
    Tensor loss = (x.matmul(w)).tanh().sum();
    loss.backward();
    return loss.detach() * 2.0;
  };
  auto f = compile(fn, eager_backend());
  Tensor x = randn({3, 4});
  Tensor w1 = randn({4, 2}), w2 = w1.clone();
  w1.requires_grad_(true);
  w2.requires_grad_(true);
  EXPECT_TRUE(bits_equal(f(x, w2), fn(x, w1)));
  EXPECT_TRUE(bits_equal(w2.grad(), w1.grad()));
  ExplainReport r = f.explain();
  ASSERT_EQ(r.breaks.size(), 1u);
  EXPECT_EQ(r.breaks[0].op, "backward");
}

}  // namespace
}  // namespace ember::test
