// Training compile: one backward node per captured graph, what it saves and recomputes, and the
// eager semantics it keeps (retain_graph, in-place checks on saved tensors, dropout masks,
// graph breaks, write-backs that need per-op autograd).
#include <cmath>
#include <thread>

#include "autograd/node.h"
#include "core/allocator.h"
#include "capture/capture_test_util.h"
#include "capture/joint.h"
#include "compiler/compiler_test_util.h"
#include "ops/attention.h"
#include "ops/frontend.h"
#include "support/expect_error.h"

namespace ember::test {
namespace {

using capture::Partition;

class Training : public ::testing::Test {
 protected:
  void SetUp() override { reset_compile_caches(); }
};

bool compiled_node(const Tensor& t) {
  return t.grad_fn() && t.grad_fn()->name() == "CompiledGraphBackward";
}

Tensor leaf(const Shape& s, uint64_t seed) {
  manual_seed(seed);
  return randn(s).requires_grad_(true);
}

// Grads of `loss_of(x, w)` for fresh leaves, eagerly or through `f`.
template <class F>
std::pair<Tensor, Tensor> grads_of(F&& loss_of) {
  Tensor x = leaf({4, 8}, 1), w = leaf({8, 8}, 2);
  loss_of(x, w).backward();
  return {x.grad(), w.grad()};
}

Tensor mlp(const Tensor& x, const Tensor& w) {
  return ((x.matmul(w).gelu() * 2.0).matmul(w.t()).softmax(-1) * x).sum();
}

TEST_F(Training, OneCompiledBackwardNodeGradsEqualEager) {
  auto f = compile(mlp, eager_backend());
  auto [gx, gw] = grads_of(mlp);
  for (int call = 0; call < 2; ++call) {
    auto [cx, cw] = grads_of([&](const Tensor& x, const Tensor& w) {
      Tensor l = f(x, w);
      EXPECT_TRUE(compiled_node(l));
      // Its edges lead straight to the leaves.
      for (const autograd::Edge& e : l.grad_fn()->next_edges)
        EXPECT_EQ(e.fn->name(), "AccumulateGrad");
      return l;
    });
    EXPECT_TRUE(bits_equal(cx, gx));
    EXPECT_TRUE(bits_equal(cw, gw));
  }
  EXPECT_EQ(f.stats().traces, 1);
}

TEST_F(Training, CompilerBackendGradsMatchEager) {
  CacheDir dir(kSharedCompilerCache);
  auto f = compile(mlp, compiler_opts());
  auto [gx, gw] = grads_of(mlp);
  auto [cx, cw] = grads_of([&](const Tensor& x, const Tensor& w) { return f(x, w); });
  EXPECT_TRUE(close(cx, gx, 1e-5, 1e-6));
  EXPECT_TRUE(close(cw, gw, 1e-5, 1e-6));
}

// Without retain_graph the compiled backward takes its saved tensors over and frees each after
// its last reader, as eager autograd does: its peak stays well below holding all of them.
TEST_F(Training, CompiledBackwardFreesSavedTensorsAsItGoes) {
  CacheDir dir(kSharedCompilerCache);
  auto deep = [](const Tensor& x, const Tensor& w) {
    Tensor h = x;
    for (int i = 0; i < 8; ++i) h = h.matmul(w).tanh();  // each tanh output is saved
    return h.sum();
  };
  auto f = compile(deep, compiler_opts());
  Tensor x = leaf({128, 128}, 1), w = leaf({128, 128}, 2);
  auto backward_peak = [&](bool retain) {
    Tensor loss = f(x, w);
    EXPECT_TRUE(compiled_node(loss));
    x.set_grad(Tensor());
    w.set_grad(Tensor());
    cpu_reset_peak();
    const size_t before = cpu_allocator_stats().allocated_bytes;
    loss.backward(Tensor(), retain);
    return int64_t(cpu_allocator_stats().peak_allocated_bytes) - int64_t(before);
  };
  backward_peak(false);  // compiles the graphs
  const int64_t freeing = backward_peak(false), holding = backward_peak(true);
  const int64_t one = 128 * 128 * 4;
  // Eight saved activations of 64 KiB: holding them all through the backward costs at least
  // four more than freeing them as the backward passes each layer.
  EXPECT_LT(freeing + 4 * one, holding) << "freeing " << freeing << " holding " << holding;
  auto [ex, ew] = grads_of(deep);
  auto [cx, cw] = grads_of([&](const Tensor& a, const Tensor& b) { return f(a, b); });
  // Generated products sum in another order than BLAS: float32 rounding, more on other CPUs.
  EXPECT_TRUE(close(cx, ex, 1e-4, 1e-5));
  EXPECT_TRUE(close(cw, ew, 1e-4, 1e-5));
}

// The grads reaching the compiled backward are whatever the eager ops after it made: here a
// stride-0 expand (from sum) and a transposed tensor (from t()).
TEST_F(Training, OutputGradsWithAnyLayout) {
  CacheDir dir(kSharedCompilerCache);
  auto fn = [](const Tensor& x, const Tensor& w) {
    Tensor h = x.matmul(w);
    return std::vector<Tensor>{(h * 2.0).tanh(), h.gelu() + 1.0};
  };
  auto f = compile(fn, compiler_opts());
  auto loss = [](const std::vector<Tensor>& o) {
    return o[0].sum() + (o[1].t().contiguous() * 3.0).sum();
  };
  auto [gx, gw] = grads_of([&](const Tensor& x, const Tensor& w) { return loss(fn(x, w)); });
  for (int call = 0; call < 2; ++call) {
    auto [cx, cw] = grads_of([&](const Tensor& x, const Tensor& w) { return loss(f(x, w)); });
    EXPECT_TRUE(close(cx, gx, 1e-4, 1e-5));
    EXPECT_TRUE(close(cw, gw, 1e-4, 1e-5));
  }
}

TEST_F(Training, GradsOnlyForInputsThatRequireThem) {
  auto f = compile(mlp, eager_backend());
  Tensor x = leaf({4, 8}, 1);
  manual_seed(2);
  Tensor w = randn({8, 8});  // a constant
  f(x, w).backward();
  Tensor ex = x.detach().requires_grad_(true);
  mlp(ex, w).backward();
  EXPECT_TRUE(bits_equal(x.grad(), ex.grad()));
  EXPECT_FALSE(w.grad().defined());
}

TEST_F(Training, RetainGraphAllowsASecondBackwardAndWithoutItIsAnError) {
  auto f = compile(mlp, eager_backend());
  Tensor x = leaf({4, 8}, 1), w = leaf({8, 8}, 2);
  Tensor l = f(x, w);
  l.backward(Tensor(), true);
  Tensor once = x.grad().clone();
  l.backward();
  EXPECT_TRUE(close(x.grad(), once * 2.0, 1e-6, 1e-7));
  expect_error([&] { l.backward(); }, {"second time", "retain_graph=true"});
}

TEST_F(Training, SavedInputWrittenInPlaceBeforeBackwardIsAnError) {
  auto f = compile(mlp, eager_backend());
  Tensor x = leaf({4, 8}, 1), w = leaf({8, 8}, 2);
  Tensor l = f(x, w);
  {
    NoGradGuard ng;
    w.mul_(2.0);
  }
  expect_error([&] { l.backward(); }, {"modified by an in-place op", "saved input"});
}

TEST_F(Training, NoGradCallsRecordNothing) {
  auto f = compile(mlp, eager_backend());
  Tensor x = leaf({4, 8}, 1), w = leaf({8, 8}, 2);
  Tensor a = f(x, w);
  NoGradGuard ng;
  Tensor b = f(x, w);
  EXPECT_FALSE(b.requires_grad());
  EXPECT_TRUE(bits_equal(a.detach(), b));
  EXPECT_EQ(f.stats().recompiles, 1);
}

// Dropout in a training forward: the backward uses the forward's mask (saved), and the
// generator moves as in eager mode.
void dropout_matches(const std::string& backend) {
  auto fn = [](const Tensor& x, const Tensor& w) {
    return (dropout(x.matmul(w), 0.3).tanh() * dropout(x, 0.5).sum({-1}, true)).sum();
  };
  CompileOptions o;
  o.backend = backend;
  auto f = compile(fn, o);
  for (int call = 0; call < 2; ++call) {
    // From one seed, eagerly and compiled: the same grads, and the generator left at the
    // same place.
    auto run = [&](auto&& loss_of, Tensor* after) {
      Tensor x = leaf({4, 8}, 1), w = leaf({8, 8}, 2);
      manual_seed(40 + call);
      loss_of(x, w).backward();
      *after = rand({3});
      return std::pair<Tensor, Tensor>{x.grad(), w.grad()};
    };
    Tensor after_eager, after_compiled;
    auto [gx, gw] = run(fn, &after_eager);
    auto [cx, cw] = run([&](const Tensor& x, const Tensor& w) { return f(x, w); }, &after_compiled);
    EXPECT_TRUE(bits_equal(after_compiled, after_eager));
    if (backend == "eager") {
      EXPECT_TRUE(bits_equal(cx, gx));
      EXPECT_TRUE(bits_equal(cw, gw));
    } else {
      EXPECT_TRUE(close(cx, gx, 1e-5, 1e-6));
      EXPECT_TRUE(close(cw, gw, 1e-5, 1e-6));
    }
  }
}

TEST_F(Training, DropoutBackwardUsesTheForwardMask) {
  dropout_matches("eager");
}

TEST_F(Training, DropoutBackwardUsesTheForwardMaskCompiler) {
  CacheDir dir(kSharedCompilerCache);
  dropout_matches("compiler");
}

// A break in the middle of a training forward: each segment gets its own compiled backward, the
// second one's edges lead to the first.
void graph_break_matches(const std::string& backend) {
  auto fn = [](const Tensor& x, const Tensor& w) {
    Tensor h = (x.matmul(w) * 0.5).tanh();
    double s = h.sum().item<double>();  // graph break
    return (h.matmul(w.t()).gelu() * (s > 1e9 ? 2.0 : 1.0)).sum();
  };
  CompileOptions o;
  o.backend = backend;
  auto f = compile(fn, o);
  auto [gx, gw] = grads_of(fn);
  for (int call = 0; call < 2; ++call) {
    auto [cx, cw] = grads_of([&](const Tensor& x, const Tensor& w) {
      Tensor l = f(x, w);
      EXPECT_TRUE(compiled_node(l));
      bool reaches_first = false;
      for (const autograd::Edge& e : l.grad_fn()->next_edges)
        reaches_first |= e.fn->name() == "CompiledGraphBackward";
      EXPECT_TRUE(reaches_first);
      return l;
    });
    if (backend == "eager") {
      EXPECT_TRUE(bits_equal(cx, gx));
      EXPECT_TRUE(bits_equal(cw, gw));
    } else {
      EXPECT_TRUE(close(cx, gx, 1e-5, 1e-6));
      EXPECT_TRUE(close(cw, gw, 1e-5, 1e-6));
    }
  }
  EXPECT_EQ(f.stats().breaks, 2);
  EXPECT_EQ(f.stats().compiles, 2);  // the second call finds both segments in the cache
}

TEST_F(Training, GraphBreakGivesEachSegmentItsOwnBackward) {
  graph_break_matches("eager");
}

TEST_F(Training, GraphBreakGivesEachSegmentItsOwnBackwardCompiler) {
  CacheDir dir(kSharedCompilerCache);
  graph_break_matches("compiler");
}

TEST_F(Training, InPlaceOnATensorWithHistoryRunsWithPerOpAutograd) {
  // Writing a value with history into an argument moves the argument's history (eager's
  // in-place semantics): the graph runs op by op with autograd instead.
  auto fn = [](Tensor a, const Tensor& w) {
    a.mul_(w);
    return (a * 3.0).sum();
  };
  auto f = compile(fn, eager_backend());
  Tensor x = leaf({4, 8}, 1), w = leaf({4, 8}, 2);
  Tensor a = x * 1.0;
  Tensor l = f(a, w);
  EXPECT_FALSE(compiled_node(l));
  l.backward();
  Tensor ex = x.detach().requires_grad_(true), ew = w.detach().requires_grad_(true);
  Tensor ea = ex * 1.0;
  fn(ea, ew).backward();
  EXPECT_TRUE(bits_equal(x.grad(), ex.grad()));
  EXPECT_TRUE(bits_equal(w.grad(), ew.grad()));
  EXPECT_TRUE(bits_equal(a.detach(), ea.detach()));
}

TEST_F(Training, BufferUpdatesWithoutHistoryKeepTheCompiledBackward) {
  Tensor stat = zeros({8});
  auto fn = [&](const Tensor& x, const Tensor& w) {
    Tensor h = x.matmul(w);
    {
      NoGradGuard ng;
      stat.mul_(0.9).add_(h.mean({0}) * 0.1);
    }
    return h.tanh().sum();
  };
  auto f = compile(fn, eager_backend());
  Tensor x = leaf({4, 8}, 1), w = leaf({8, 8}, 2);
  Tensor l = f(x, w);
  EXPECT_TRUE(compiled_node(l));
  l.backward();
  Tensor stat_c = stat.clone();
  stat.fill_(0.0);
  Tensor ex = x.detach().requires_grad_(true), ew = w.detach().requires_grad_(true);
  fn(ex, ew).backward();
  EXPECT_TRUE(bits_equal(stat_c, stat));
  EXPECT_TRUE(bits_equal(w.grad(), ew.grad()));
}

TEST_F(Training, NoGradientFlowsThroughDetach) {
  auto fn = [](const Tensor& x, const Tensor& w) {
    Tensor h = x.matmul(w);
    return std::vector<Tensor>{(h.detach() * x + h).sum(), h.detach()};
  };
  auto f = compile(fn, eager_backend());
  auto [gx, gw] = grads_of([&](const Tensor& x, const Tensor& w) { return fn(x, w)[0]; });
  for (int call = 0; call < 2; ++call) {
    auto [cx, cw] = grads_of([&](const Tensor& x, const Tensor& w) {
      std::vector<Tensor> out = f(x, w);
      EXPECT_FALSE(out[1].requires_grad());
      return out[0];
    });
    EXPECT_TRUE(bits_equal(cx, gx));
    EXPECT_TRUE(bits_equal(cw, gw));
  }
}

TEST_F(Training, ThreadsTrainThroughOneCompiledFunction) {
  auto f = compile(mlp, eager_backend());
  constexpr int kThreads = 4, kCalls = 10;
  auto [gx, gw] = grads_of(mlp);
  std::vector<int> ok(kThreads, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int c = 0; c < kCalls; ++c) {
        Tensor x = gx.detach() * 0.0 + 1.0, w = gw.detach() * 0.0 + 0.5;  // fresh leaves
        x.requires_grad_(true);
        w.requires_grad_(true);
        f(x, w).backward();
        Tensor ex = x.detach().requires_grad_(true), ew = w.detach().requires_grad_(true);
        mlp(ex, ew).backward();
        ok[size_t(t)] += bits_equal(x.grad(), ex.grad()) && bits_equal(w.grad(), ew.grad());
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(ok[size_t(t)], kCalls) << "thread " << t;
  EXPECT_EQ(f.stats().traces, 1);
}

TEST_F(Training, AFunctionReturningItsArgumentReplays) {
  auto f = compile([](const Tensor& x) { return x.reshape({-1}); }, eager_backend());
  Tensor x = leaf({6}, 1);
  for (int call = 0; call < 2; ++call) EXPECT_EQ(f(x).impl(), x.impl());
}

// ---- the partition, on graphs captured from small functions ----

// The training partition of fn's graph for arguments (x, w) of which `rg` require grad.
Partition partition_of(const std::function<Tensor(const Tensor&, const Tensor&)>& fn,
                       std::vector<bool> rg) {
  // Inputs that do not require grad, grad mode on: the plain graph, as it would be captured for
  // a training call. A backend that keeps it hands it over.
  Tensor x = randn({4, 8}), w = randn({8, 8});
  struct Keep : capture::Backend {
    std::shared_ptr<const graph::Graph> g;
    std::string name() const override { return "keep"; }
    std::shared_ptr<const capture::Runnable> compile(
        std::shared_ptr<const graph::Graph> graph) override {
      g = graph;
      return capture::backend("eager").compile(graph);
    }
  };
  auto keep = std::make_unique<Keep>();
  Keep* k = keep.get();
  capture::register_backend(std::move(keep));
  CompileOptions o;
  o.backend = "keep";
  reset_compile_caches();  // so the graph is compiled (by Keep) again
  compile(fn, o)(x, w);
  EXPECT_TRUE(k->g);
  capture::JointGraph j;
  std::string why;
  EXPECT_TRUE(capture::build_joint(*k->g, rg, &j, &why)) << why;
  return capture::partition_joint(j);
}

int count_ops(const graph::Graph& g, OpId op) {
  int n = 0;
  for (const auto& node : g.nodes()) n += node->op == op;
  return n;
}

TEST_F(Training, PointwiseValuesAreRecomputedNotSaved) {
  // h * h is read by the second matmul's grad: recomputed from h = x @ w, which the mul's grad
  // saves anyway. Only h and the softmax output are saved.
  Partition p = partition_of(
      [](const Tensor& x, const Tensor& w) {
        Tensor h = x.matmul(w);
        return ((h * h).matmul(w) * 3.0).softmax(-1).sum();
      },
      {true, true});
  EXPECT_EQ(p.num_saved_values, 2u);
  EXPECT_GE(p.recomputed, 1);
  EXPECT_EQ(p.saved_primals.size(), 2u);  // x and w themselves
}

TEST_F(Training, CostlyPointwiseValuesAreSaved) {
  // gelu(x @ w) is read by the second matmul's grad. Recomputing it would need only x @ w (saved
  // for gelu's grad anyway), but gelu is kCostly: its output is saved instead.
  Partition p = partition_of(
      [](const Tensor& x, const Tensor& w) {
        return (x.matmul(w).gelu().matmul(w) * 3.0).softmax(-1).sum();
      },
      {true, true});
  EXPECT_EQ(p.num_saved_values, 3u);
  EXPECT_EQ(count_ops(*p.backward, OpId::gelu), 0);
  EXPECT_EQ(count_ops(*p.backward, OpId::gelu_backward), 1);
}

TEST_F(Training, GradsNotNeededAreNotComputed) {
  auto fn = [](const Tensor& x, const Tensor& w) { return x.matmul(w).tanh().sum(); };
  EXPECT_EQ(count_ops(*partition_of(fn, {true, true}).backward, OpId::matmul), 2);
  EXPECT_EQ(count_ops(*partition_of(fn, {false, true}).backward, OpId::matmul), 1);
  EXPECT_EQ(count_ops(*partition_of(fn, {true, false}).backward, OpId::matmul), 1);
}

TEST_F(Training, RandomOpsAreHoistedOutOfTheForwardGraph) {
  Partition p =
      partition_of([](const Tensor& x, const Tensor& w) { return dropout(x.matmul(w), 0.5).sum(); },
                   {true, true});
  ASSERT_TRUE(p.rng);
  EXPECT_EQ(count_ops(*p.rng, OpId::bernoulli), 1);
  EXPECT_EQ(count_ops(*p.forward, OpId::bernoulli), 0);
}

}  // namespace
}  // namespace ember::test

namespace ember::test {
namespace {

// The fused attention op with dropout (what scaled_dot_product_attention runs on a GPU; called
// directly here): under capture it draws from an rng_state node, which the training compile
// hoists into its random graph and saves for attention_backward. Grads equal eager's from one seed,
// and each call draws a fresh mask.
TEST_F(Training, FusedAttentionDropoutDrawsFromAHoistedRngState) {
  auto fn = [](const Tensor& q, const Tensor& k, const Tensor& v) {
    return (fused_attention(q, k, v, true, 0.3, std::nullopt).out * q).sum();
  };
  auto f = compile(fn, eager_backend());
  std::vector<double> losses;
  for (uint64_t seed : {5u, 6u}) {
    Tensor q = leaf({2, 7, 4}, 1), k = leaf({2, 9, 4}, 2), v = leaf({2, 9, 4}, 3);
    Tensor q2 = leaf({2, 7, 4}, 1), k2 = leaf({2, 9, 4}, 2), v2 = leaf({2, 9, 4}, 3);
    manual_seed(seed);
    Tensor got = f(q, k, v);
    got.backward();
    manual_seed(seed);
    Tensor want = fn(q2, k2, v2);
    want.backward();
    EXPECT_TRUE(bits_equal(got, want)) << "seed " << seed;
    EXPECT_TRUE(bits_equal(q.grad(), q2.grad()));
    EXPECT_TRUE(bits_equal(k.grad(), k2.grad()));
    EXPECT_TRUE(bits_equal(v.grad(), v2.grad()));
    losses.push_back(got.item());
  }
  EXPECT_NE(losses[0], losses[1]);
}

// Dropout of h with probability p as the GPU's front end runs it under capture: dropout_rng on
// an rng_state node reserving h's draws.
Tensor captured_dropout(const Tensor& h, double p) {
  Attrs a;
  a.value = p;
  Tensor rng = reserve_random_tensor(uint64_t(h.numel()), h.device(), "dropout");
  return dispatch1(OpId::dropout_rng, {h, rng}, a);
}

// Dropout as the GPU's front end runs it under capture (dropout_rng on an rng_state node, here
// on the CPU's kernels): grads equal eager's from one seed, and each call draws a fresh mask.
TEST_F(Training, DropoutRngDrawsFromAHoistedRngState) {
  auto fn = [](const Tensor& x, const Tensor& w) {
    return (captured_dropout(x.matmul(w), 0.4).tanh() * x.sum({-1}, true)).sum();
  };
  auto f = compile(fn, eager_backend());
  std::vector<double> losses;
  for (uint64_t seed : {5u, 6u}) {
    Tensor x = leaf({4, 8}, 1), w = leaf({8, 8}, 2), x2 = leaf({4, 8}, 1), w2 = leaf({8, 8}, 2);
    manual_seed(seed);
    Tensor got = f(x, w);
    got.backward();
    manual_seed(seed);
    Tensor want = fn(x2, w2);
    want.backward();
    EXPECT_TRUE(bits_equal(got, want)) << "seed " << seed;
    EXPECT_TRUE(bits_equal(x.grad(), x2.grad()));
    EXPECT_TRUE(bits_equal(w.grad(), w2.grad()));
    losses.push_back(got.item());
  }
  EXPECT_NE(losses[0], losses[1]);
}

// The hoisted draws' memory is reused only once nothing holds the last call's: two forwards
// before their backwards each keep their own ranges, and the calls after them (reusing it)
// still draw eager's. Every result and grad equals eager's bit for bit.
TEST_F(Training, HeldHoistedDrawsAreNotOverwritten) {
  auto fn = [](const Tensor& x, const Tensor& w) {
    const Tensor h = x.matmul(w);
    const Tensor d = captured_dropout(h, 0.3);  // its draws come before the attention's
    const Tensor att =
        fused_attention(h.view({2, 4, 4}), h.view({2, 4, 4}), h.view({2, 4, 4}), true, 0.4,
                        std::nullopt)
            .out;
    return (d * att.view({8, 4})).sum();
  };
  auto f = compile(fn, eager_backend());
  struct Call {
    Tensor x = leaf({8, 4}, 1), w = leaf({4, 4}, 2), loss;
  };
  // Four calls from seed 9: two forwards, their backwards, then two calls of each.
  auto run = [](auto&& g) {
    manual_seed(9);
    std::vector<Call> c(4);
    c[0].loss = g(c[0].x, c[0].w);
    c[1].loss = g(c[1].x, c[1].w);
    c[0].loss.backward();
    c[1].loss.backward();
    for (size_t i = 2; i < 4; ++i) {
      c[i].loss = g(c[i].x, c[i].w);
      c[i].loss.backward();
    }
    return c;
  };
  const std::vector<Call> got = run(f), want = run(fn);
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_TRUE(bits_equal(got[i].loss, want[i].loss)) << "call " << i;
    EXPECT_TRUE(bits_equal(got[i].x.grad(), want[i].x.grad())) << "call " << i;
    EXPECT_TRUE(bits_equal(got[i].w.grad(), want[i].w.grad())) << "call " << i;
  }
  EXPECT_NE(want[0].loss.item(), want[1].loss.item());  // the two held calls' masks differ
}

// Several rng_state nodes (two dropouts and an attention, as a GPU GPT layer draws them under
// capture) hoisted into one random graph, whose draws are written as rows of one tensor: each
// reads its own range in eager's order (grads equal eager's bit for bit), and the generator ends
// where eager leaves it.
TEST_F(Training, SeveralHoistedRngStatesDrawEagersRanges) {
  auto fn = [](const Tensor& x, const Tensor& w) {
    const Tensor h = x.matmul(w);
    const Tensor q = captured_dropout(h, 0.25).view({2, 4, 4}), k = h.view({2, 4, 4}).tanh();
    const Tensor att = fused_attention(q, k, k, true, 0.3, std::nullopt).out;
    return (captured_dropout(att, 0.25) * x.view({2, 4, 4})).sum();
  };
  auto f = compile(fn, eager_backend());
  for (uint64_t seed : {3u, 4u}) {
    Tensor x = leaf({8, 4}, 1), w = leaf({4, 4}, 2), x2 = leaf({8, 4}, 1), w2 = leaf({4, 4}, 2);
    manual_seed(seed);
    Tensor got = f(x, w);
    got.backward();
    const RngState after_compiled = get_rng_state();
    manual_seed(seed);
    Tensor want = fn(x2, w2);
    want.backward();
    const RngState after_eager = get_rng_state();
    EXPECT_TRUE(bits_equal(got, want)) << "seed " << seed;
    EXPECT_TRUE(bits_equal(x.grad(), x2.grad()));
    EXPECT_TRUE(bits_equal(w.grad(), w2.grad()));
    EXPECT_EQ(after_compiled.offset, after_eager.offset);
    EXPECT_EQ(after_compiled.seed, after_eager.seed);
  }
}

}  // namespace
}  // namespace ember::test
