// What a replay may assume (docs/compiling.md, "What a replay assumes"): a compiled function
// gives what the function would give if it ran now, on both backends. Tensors reached through
// lambda captures, modules and grad() are read as they are at the call; arguments that alias
// each other; results that must be fresh; scalar guards at their edge values; traces that throw;
// and no-grad blocks inside the function.
#include <cmath>
#include <limits>

#include "capture/capture_test_util.h"
#include "support/expect_error.h"

namespace ember::test {
namespace {

class ReplaySoundness : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override { reset_compile_caches(); }
  CompileOptions opts() const {
    CompileOptions o;
    o.backend = GetParam();
    return o;
  }
};

// Values equal within float32 rounding (generated kernels may contract or reorder).
::testing::AssertionResult same(const Tensor& got, const Tensor& want) {
  if (got.sizes() != want.sizes() || got.dtype() != want.dtype())
    return ::testing::AssertionFailure()
           << "got " << dtype_name(got.dtype()) << got.shape_str() << ", want "
           << dtype_name(want.dtype()) << want.shape_str();
  std::vector<double> g = got.to_vector<double>(), w = want.to_vector<double>();
  for (size_t i = 0; i < g.size(); ++i) {
    bool ok = g[i] == w[i] || (std::isnan(g[i]) && std::isnan(w[i])) ||
              std::abs(g[i] - w[i]) <= 1e-5 * (1 + std::abs(w[i]));
    if (!ok)
      return ::testing::AssertionFailure() << "element " << i << ": " << g[i] << " vs " << w[i];
  }
  return ::testing::AssertionSuccess();
}

std::vector<float> vec(const Tensor& t) {
  return t.to_vector<float>();
}

// ---- tensors the function reaches other than through its arguments ----

TEST_P(ReplaySoundness, LambdaCapturedTensorRebound) {
  Tensor w = full({3}, 1.0);
  auto f = compile([&](const Tensor& x) { return x * w; }, opts());
  EXPECT_EQ(vec(f(ones({3}))), std::vector<float>(3, 1.0f));
  EXPECT_EQ(vec(f(ones({3}))), std::vector<float>(3, 1.0f));
  w = full({3}, 5.0);
  EXPECT_EQ(vec(f(ones({3}))), std::vector<float>(3, 5.0f));
  w = full({2, 3}, 7.0);
  Tensor r = f(ones({3}));
  EXPECT_EQ(r.sizes(), (Shape{2, 3}));
  EXPECT_EQ(vec(r), std::vector<float>(6, 7.0f));
  EXPECT_EQ(f.stats().traces, 3);
}

TEST_P(ReplaySoundness, RebindingOnEveryCallNeverFallsBackToEager) {
  // A functional update of a captured tensor: each call reads a new one. Each retrace replaces
  // the entry that can no longer hit, so the recompile limit is never reached.
  Tensor w = zeros({2});
  auto f = compile([&](const Tensor& x) { return x + w; }, opts());
  for (int step = 1; step <= 12; ++step) {
    w = w + 1.0;
    EXPECT_EQ(vec(f(zeros({2}))), std::vector<float>(2, float(step)));
  }
  CompileStats s = f.stats();
  EXPECT_EQ(s.eager_fallbacks, 0);
  EXPECT_EQ(s.traces, 12);
}

TEST_P(ReplaySoundness, ReboundWhileTheOldTensorLivesOn) {
  Tensor w = full({3}, 1.0);
  Tensor keep = w;  // the old tensor stays alive: only the rebinding tells
  auto f = compile([&](const Tensor& x) { return x + w; }, opts());
  f(zeros({3}));
  w = full({3}, 2.0);
  EXPECT_EQ(vec(f(zeros({3}))), std::vector<float>(3, 2.0f));
  Tensor other = full({3}, 3.0);
  w = other;  // rebound to a tensor that is held elsewhere too
  EXPECT_EQ(vec(f(zeros({3}))), std::vector<float>(3, 3.0f));
  EXPECT_EQ(vec(keep), std::vector<float>(3, 1.0f));
}

TEST_P(ReplaySoundness, CapturedTensorUpdatedInPlaceIsReadWithoutRetracing) {
  Tensor w = full({3}, 1.0);
  auto f = compile([&](const Tensor& x) { return x * w; }, opts());
  f(ones({3}));
  w.fill_(4.0);
  EXPECT_EQ(vec(f(ones({3}))), std::vector<float>(3, 4.0f));
  // Copies of the handle come and go without retracing.
  for (int i = 0; i < 3; ++i) {
    Tensor copy = w;
    EXPECT_EQ(vec(f(ones({3}))), std::vector<float>(3, 4.0f));
  }
  EXPECT_EQ(f.stats().traces, 1);
  EXPECT_EQ(f.stats().replays, 4);
}

TEST_P(ReplaySoundness, CapturedByValueStaysAsTraced) {
  Tensor w = full({2}, 3.0);
  auto f = compile([w](const Tensor& x) { return x - w; }, opts());
  f(zeros({2}));
  // The lambda holds its own handle: eager keeps reading 3 too. Which handle the function
  // reads is not known, so assigning to any handle of the tensor traces again (and finds 3).
  w = full({2}, 9.0);
  EXPECT_EQ(vec(f(zeros({2}))), std::vector<float>(2, -3.0f));
  EXPECT_EQ(vec(f(zeros({2}))), std::vector<float>(2, -3.0f));
  EXPECT_EQ(f.stats().traces, 2);
}

TEST_P(ReplaySoundness, VectorOfCapturedTensorsRebound) {
  std::vector<Tensor> ws = {full({2}, 1.0), full({2}, 2.0)};
  auto f = compile([&](const Tensor& x) { return x * ws[0] + ws[1]; }, opts());
  EXPECT_EQ(vec(f(ones({2}))), std::vector<float>(2, 3.0f));
  ws[1] = full({2}, 10.0);
  EXPECT_EQ(vec(f(ones({2}))), std::vector<float>(2, 11.0f));
  ws = {full({2}, 2.0), full({2}, 0.5)};  // the old tensors are freed
  EXPECT_EQ(vec(f(ones({2}))), std::vector<float>(2, 2.5f));
}

TEST_P(ReplaySoundness, GradReadInsideTheFunctionIsTheCurrentGrad) {
  auto step = [](Tensor q) {
    q.sub_(q.grad());
    return q.sum();
  };
  auto run = [&](auto&& fn) {
    Tensor p = ones({3}).requires_grad_(true);
    for (int it = 1; it <= 3; ++it) {
      p.set_grad(Tensor());
      (p * double(it)).sum().backward();
      NoGradGuard g;
      fn(p);
    }
    return p.detach();
  };
  auto compiled = compile(step, opts());
  Tensor want = run(step);
  EXPECT_EQ(vec(want), std::vector<float>(3, -5.0f));
  EXPECT_TRUE(same(run(compiled), want));
  EXPECT_EQ(compiled.stats().traces, 1);
}

TEST_P(ReplaySoundness, GradOfACapturedTensorIsTheCurrentGrad) {
  Tensor p = ones({2}).requires_grad_(true);
  auto f = compile([&](const Tensor& lr) { return p.grad() * lr; }, opts());
  (p * 2.0).sum().backward();
  EXPECT_EQ(vec(f(full({2}, 0.5))), std::vector<float>(2, 1.0f));
  p.set_grad(Tensor());
  (p * 6.0).sum().backward();
  EXPECT_EQ(vec(f(full({2}, 0.5))), std::vector<float>(2, 3.0f));
  // Accumulated in place into the same grad tensor.
  (p * 2.0).sum().backward();
  EXPECT_EQ(vec(f(full({2}, 0.5))), std::vector<float>(2, 4.0f));
}

TEST_P(ReplaySoundness, GradThatBecameUndefinedRetraces) {
  auto fn = [](const Tensor& q) {
    Tensor g = q.grad();
    return g.defined() ? q.detach() - g : q.detach() * 1.0;
  };
  auto f = compile(fn, opts());
  Tensor p = full({2}, 3.0).requires_grad_(true);
  (p * 1.0).sum().backward();
  EXPECT_EQ(vec(f(p)), std::vector<float>(2, 2.0f));
  p.set_grad(Tensor());
  EXPECT_EQ(vec(f(p)), std::vector<float>(2, 3.0f));
}

TEST_P(ReplaySoundness, ModuleCapturedByReferenceWithAParameterReplaced) {
  auto lin = std::make_shared<nn::Linear>(3, 2);
  auto f = compile([&](const Tensor& x) { return lin->forward(x); }, opts());
  Tensor x = randn({4, 3});
  EXPECT_TRUE(same(f(x), lin->forward(x)));
  lin->weight = randn({2, 3}).requires_grad_(true);  // same shape
  EXPECT_TRUE(same(f(x), lin->forward(x)));
  lin->weight = randn({5, 3}).requires_grad_(true);  // new shape
  lin->bias = randn({5}).requires_grad_(true);
  Tensor r = f(x);
  EXPECT_EQ(r.sizes(), (Shape{4, 5}));
  EXPECT_TRUE(same(r, lin->forward(x)));
  // Swapped with a tensor that stays alive: the module's slot holds another tensor.
  Tensor other = randn({5, 3}).requires_grad_(true);
  std::swap(lin->weight, other);
  EXPECT_TRUE(same(f(x), lin->forward(x)));
  // Loading values in place is not a replacement: replayed, with the new values.
  int64_t traces = f.stats().traces;
  nn::StateDict sd = {{"weight", randn({5, 3})}, {"bias", randn({5})}};
  lin->load_state_dict(sd);
  EXPECT_TRUE(same(f(x), lin->forward(x)));
  EXPECT_EQ(f.stats().traces, traces);
}

TEST_P(ReplaySoundness, ModuleMemberAssignmentIsWhatTheModuleReports) {
  auto lin = std::make_shared<nn::Linear>(3, 2);
  Tensor w = randn({2, 3});
  lin->weight = w;
  EXPECT_EQ(lin->named_parameters()[0].second.impl(), w.impl());
  EXPECT_EQ(lin->state_dict()[0].second.impl(), w.impl());
}

TEST_P(ReplaySoundness, CompiledModuleWithAParameterReplaced) {
  auto lin = std::make_shared<nn::Linear>(3, 2);
  auto cm = compile(lin, opts());
  Tensor x = randn({4, 3});
  cm(x);
  lin->weight = randn({2, 3}).requires_grad_(true);
  EXPECT_TRUE(same(cm(x), lin->forward(x)));
  lin->weight = randn({6, 3}).requires_grad_(true);
  lin->bias = randn({6}).requires_grad_(true);
  EXPECT_TRUE(same(cm(x), lin->forward(x)));
}

TEST_P(ReplaySoundness, ExplicitStateIsReadOnEveryCallWithoutRetracing) {
  Tensor w = full({3}, 1.0), b = zeros({3});
  CompileOptions o = opts();
  o.state = [&] { return std::vector<Tensor>{w, b}; };
  auto f = compile(
      [&](const Tensor& x) {
        b.add_(1.0);  // state updated in place, as MLX's outputs=
        return x * w + b;
      },
      o);
  EXPECT_EQ(vec(f(ones({3}))), std::vector<float>(3, 2.0f));
  Tensor other = full({3}, 4.0);
  std::swap(w, other);  // no handle assignment the watch could see: state reads w anew anyway
  EXPECT_EQ(vec(f(ones({3}))), std::vector<float>(3, 6.0f));
  EXPECT_EQ(vec(b), std::vector<float>(3, 2.0f));
  EXPECT_EQ(f.stats().traces, 1);
  w = full({2}, 1.0);  // a new shape is a guard miss, like an argument's
  b = zeros({2});
  EXPECT_EQ(vec(f(ones({2}))), std::vector<float>(2, 2.0f));
  EXPECT_EQ(f.stats().traces, 2);
}

// ---- aliasing between arguments, captured tensors and results ----

TEST_P(ReplaySoundness, ArgumentThatIsAViewOfAnotherWrittenInPlace) {
  auto fn = [](Tensor a, const Tensor& b) {
    a.add_(1.0);
    return b * 2.0;
  };
  auto f = compile(fn, opts());
  f(zeros({3}), zeros({3}));
  Tensor a = zeros({3}), a2 = zeros({3});
  Tensor got = f(a, a.view({3}));
  Tensor want = fn(a2, a2.view({3}));
  EXPECT_EQ(vec(want), std::vector<float>(3, 2.0f));
  EXPECT_TRUE(same(got, want));
  EXPECT_TRUE(same(a, a2));
}

TEST_P(ReplaySoundness, OverlappingViewsOfOneTensor) {
  auto fn = [](Tensor a, const Tensor& b) {
    Tensor r = b * 2.0;
    a.mul_(3.0);
    return r + a;
  };
  auto f = compile(fn, opts());
  f(arange(1.0, 5.0), arange(2.0, 6.0));  // traced with separate tensors
  for (int round = 0; round < 2; ++round) {
    Tensor base = arange(1.0, 6.0), base2 = arange(1.0, 6.0);
    Tensor got = f(base.narrow(0, 0, 4), base.narrow(0, 1, 4));
    Tensor want = fn(base2.narrow(0, 0, 4), base2.narrow(0, 1, 4));
    EXPECT_EQ(vec(want), (std::vector<float>{7, 12, 17, 22}));
    EXPECT_TRUE(same(got, want));
    EXPECT_TRUE(same(base, base2));
  }
  // Separate tensors again: the first entry still serves them.
  Tensor a = arange(1.0, 5.0), b = arange(2.0, 6.0);
  EXPECT_TRUE(same(f(a, b), fn(arange(1.0, 5.0), arange(2.0, 6.0))));
}

TEST_P(ReplaySoundness, ArgumentThatIsTheCapturedTensorWrittenInPlace) {
  Tensor w = full({2}, 2.0);
  auto fn = [&](Tensor x) {
    x.mul_(3.0);
    return w + 1.0;
  };
  auto f = compile(fn, opts());
  f(ones({2}));
  EXPECT_EQ(vec(f(w)), std::vector<float>(2, 7.0f));  // eager: w becomes 6, then 6 + 1
  EXPECT_EQ(vec(w), std::vector<float>(2, 6.0f));
}

TEST_P(ReplaySoundness, DetachOfAnArgumentReadsTheArgument) {
  auto f = compile([](const Tensor& x) { return x.detach() * 2.0; }, opts());
  f(ones({3}));
  EXPECT_EQ(vec(f(full({3}, 4.0))), std::vector<float>(3, 8.0f));
  auto g = compile([](const Tensor& x) { return x.detach(); }, opts());
  g(ones({2}));
  Tensor y = full({2}, 5.0);
  Tensor d = g(y);
  EXPECT_EQ(vec(d), std::vector<float>(2, 5.0f));
  d.fill_(6.0);  // detach aliases its input, as in eager
  EXPECT_EQ(vec(y), std::vector<float>(2, 6.0f));
}

TEST_P(ReplaySoundness, DetachStopsGradientsOfAnArgument) {
  auto fn = [](const Tensor& x) { return (x.detach() * x).sum(); };
  auto f = compile(fn, opts());
  for (int i = 0; i < 2; ++i) {
    Tensor x = randn({4}).requires_grad_(true), x2 = x.detach().clone().requires_grad_(true);
    f(x).backward();
    fn(x2).backward();
    EXPECT_TRUE(same(x.grad(), x2.grad()));
    EXPECT_TRUE(same(x.grad(), x.detach()));
  }
}

TEST_P(ReplaySoundness, TensorMadeInsideTheFunctionIsReturnedFresh) {
  auto f = compile(
      [](const Tensor& x) {
        Tensor c = from_vector<float>({1, 2, 3, 4}, {4});
        return std::vector<Tensor>{x * 2.0, c, c.view({2, 2})};
      },
      opts());
  for (int i = 0; i < 3; ++i) {
    std::vector<Tensor> r = f(ones({1}));
    EXPECT_EQ(vec(r[1]), (std::vector<float>{1, 2, 3, 4}));
    EXPECT_EQ(vec(r[2]), (std::vector<float>{1, 2, 3, 4}));
    r[1].fill_(9.0);  // the caller's to keep: the next call must not see it
    r[2].fill_(8.0);
  }
}

TEST_P(ReplaySoundness, InputFreeValueHandedOutThroughAViewIsFresh) {
  auto f = compile(
      [](const Tensor& x) {
        return std::make_pair(full({3, 3}, 1.0).triu().view({9}), x + 1.0);
      },
      opts());
  Tensor want = full({3, 3}, 1.0).triu().view({9});
  for (int i = 0; i < 3; ++i) {
    auto [t, y] = f(ones({1}));
    EXPECT_TRUE(same(t, want));
    t.fill_(5.0);
  }
}

// ---- scalar guards ----

TEST_P(ReplaySoundness, SignedZeroScalarsAreDifferentGuards) {
  auto f = compile([](const Tensor& x, double s) { return x / s; }, opts());
  EXPECT_EQ(vec(f(ones({2}), 0.0)), std::vector<float>(2, INFINITY));
  EXPECT_EQ(vec(f(ones({2}), -0.0)), std::vector<float>(2, -INFINITY));
  EXPECT_EQ(vec(f(ones({2}), 0.0)), std::vector<float>(2, INFINITY));
  EXPECT_EQ(f.stats().traces, 2);
}

TEST_P(ReplaySoundness, NanScalarMatchesItsOwnGuard) {
  auto f = compile([](const Tensor& x, double s) { return x + s; }, opts());
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (int i = 0; i < 12; ++i) EXPECT_TRUE(std::isnan(vec(f(ones({2}), nan))[0]));
  EXPECT_EQ(f.stats().traces, 1);
  EXPECT_EQ(f.stats().replays, 11);
  EXPECT_EQ(f.stats().eager_fallbacks, 0);
  // Infinities and the largest finite values are values like any other.
  EXPECT_EQ(vec(f(zeros({1}), INFINITY))[0], INFINITY);
  EXPECT_EQ(vec(f(zeros({1}), -INFINITY))[0], -INFINITY);
  EXPECT_EQ(f.stats().traces, 3);
}

TEST_P(ReplaySoundness, IntegerScalarsAtTheirLimits) {
  auto f = compile([](const Tensor& x, int64_t n) { return x * double(n % 7); }, opts());
  EXPECT_EQ(vec(f(ones({1}), std::numeric_limits<int64_t>::max()))[0],
            float(std::numeric_limits<int64_t>::max() % 7));
  EXPECT_EQ(vec(f(ones({1}), std::numeric_limits<int64_t>::min()))[0],
            float(std::numeric_limits<int64_t>::min() % 7));
  EXPECT_EQ(f.stats().traces, 2);
}

// ---- exceptions during a trace ----

TEST_P(ReplaySoundness, ThrowingTraceIsCountedApartAndUsesNoRecompileSlot) {
  bool fail = true;
  CompileOptions o = opts();
  o.recompile_limit = 1;
  auto f = compile(
      [&](const Tensor& x) {
        Tensor y = x * 2.0;
        EMBER_CHECK(!fail, "user error");
        return y;
      },
      o);
  expect_error([&] { f(ones({2})); }, "user error");
  expect_error([&] { f(ones({2})); }, "user error");
  CompileStats s = f.stats();
  EXPECT_EQ(s.traces, 0);
  EXPECT_EQ(s.failed_traces, 2);
  EXPECT_EQ(s.recompiles, 0);
  fail = false;
  EXPECT_EQ(vec(f(ones({2}))), std::vector<float>(2, 2.0f));
  EXPECT_EQ(vec(f(ones({2}))), std::vector<float>(2, 2.0f));
  s = f.stats();
  EXPECT_EQ(s.traces, 1);
  EXPECT_EQ(s.replays, 1);
  EXPECT_EQ(s.eager_fallbacks, 0);
  EXPECT_TRUE(f.explain().recompile_reasons.empty());
}

TEST_P(ReplaySoundness, ThrowingRecompileIsNotARecompile) {
  auto f = compile(
      [](const Tensor& x) {
        EMBER_CHECK(x.size(0) != 3, "size 3 rejected");
        return x + 1.0;
      },
      opts());
  f(ones({2}));
  expect_error([&] { f(ones({3})); }, "size 3 rejected");
  CompileStats s = f.stats();
  EXPECT_EQ(s.recompiles, 0);
  EXPECT_EQ(s.failed_traces, 1);
  f(ones({4}));
  s = f.stats();
  EXPECT_EQ(s.recompiles, 1);
  EXPECT_EQ(s.traces, 2);
  EXPECT_EQ(f.explain().recompile_reasons.size(), 1u);
}

// ---- grad mode inside the function ----

TEST_P(ReplaySoundness, NoGradBlockAroundAnUpdateOfALeafThatRequiresGrad) {
  auto fn = [](Tensor p, const Tensor& g) {
    NoGradGuard ng;
    p.sub_(g * 0.5);
    return p.sum();
  };
  auto f = compile(fn, opts());
  Tensor p = ones({3}).requires_grad_(true), p2 = ones({3}).requires_grad_(true);
  for (int i = 0; i < 3; ++i) {
    Tensor g = full({3}, double(i + 1));
    EXPECT_TRUE(same(f(p, g), fn(p2, g)));
    EXPECT_TRUE(same(p.detach(), p2.detach()));
  }
  EXPECT_TRUE(p.requires_grad());
  EXPECT_TRUE(p.is_leaf());
}

TEST_P(ReplaySoundness, OptimizerStepOverCapturedParameters) {
  auto lin = std::make_shared<nn::Linear>(2, 2), lin2 = std::make_shared<nn::Linear>(2, 2);
  lin2->load_state_dict(lin->state_dict());
  auto sgd = [](nn::Module& m, double lr) {
    NoGradGuard ng;
    for (Tensor p : m.parameters()) p.sub_(p.grad() * lr);
    return Tensor();
  };
  auto f = compile([&](double lr) { return sgd(*lin, lr); }, opts());
  Tensor x = randn({3, 2});
  for (int i = 0; i < 3; ++i) {
    lin->zero_grad();
    lin2->zero_grad();
    (lin->forward(x) * lin->forward(x)).sum().backward();
    (lin2->forward(x) * lin2->forward(x)).sum().backward();
    f(0.1);
    sgd(*lin2, 0.1);
    EXPECT_TRUE(same(lin->weight.detach(), lin2->weight.detach()));
    EXPECT_TRUE(same(lin->bias.detach(), lin2->bias.detach()));
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, ReplaySoundness, ::testing::Values("eager", "compiler"),
                         [](const auto& info) { return std::string(info.param); });

}  // namespace
}  // namespace ember::test
