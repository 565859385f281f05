// The graph interpreter: bit-identical to eager, autograd through it, input checks, memory,
// mutations written back, random ops replayed like eager calls.
#include "core/allocator.h"
#include "core/generator.h"
#include "graph/graph_test_util.h"

namespace ember::graph_test {
namespace {

// ---- interpreter ----

TEST(GraphInterpret, InterpretMatchesEagerBitForBit) {
  Tensor x = randn({6, 8});
  Tensor w = randn({8, 8});
  Tensor gamma = randn({8}), beta = randn({8});
  Tensor xt = randn({8, 6}).t();  // a strided argument
  Fn fn = [&](const std::vector<Tensor>& a) {
    Tensor h = matmul(a[0], w);
    Tensor n = layer_norm(h, {8}, gamma, beta);
    Tensor v = n.t().slice(0, 1, 7, 2);  // views of views
    auto [vals, idx] = (n + a[1]).topk(3, -1);
    Tensor sm = softmax(v * 0.5, -1);
    return std::vector<Tensor>{vals, idx, sm, v, gelu(n).sum({1}), a[1].narrow(0, 2, 3)};
  };
  Recorder r;
  record(r, fn, {x, xt});
  std::vector<Tensor> want = fn({x, xt});
  for (int run = 0; run < 2; ++run) {
    std::vector<Tensor> got = r.g.interpret(r.inputs);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i)
      expect_bit_equal(got[i], want[i], "output " + std::to_string(i));
  }
  // New values through the same graph.
  Tensor x2 = randn({6, 8});
  std::vector<Tensor> in2 = r.inputs;
  in2[0] = x2;
  std::vector<Tensor> got2 = r.g.interpret(in2);
  std::vector<Tensor> want2 = fn({x2, xt});
  for (size_t i = 0; i < got2.size(); ++i) expect_bit_equal(got2[i], want2[i]);
}

TEST(GraphInterpret, InterpretRecordsAutogradLikeEager) {
  Tensor x = randn({4, 8}).requires_grad_();
  Tensor w = randn({8, 5}).requires_grad_();
  Tensor gamma = randn({5}).requires_grad_();
  Fn fn = [&](const std::vector<Tensor>& a) {
    Tensor h = layer_norm(matmul(a[0], w), {5}, gamma);
    auto [vals, idx] = h.topk(2, -1);
    return std::vector<Tensor>{(vals.sum() + (h.t() * h.t()).mean()).tanh()};
  };
  Recorder r;
  record(r, fn, {x});
  Tensor want = fn({x})[0];
  want.backward();
  Tensor gx = x.grad(), gw = w.grad(), gg = gamma.grad();
  x.set_grad(Tensor());
  w.set_grad(Tensor());
  gamma.set_grad(Tensor());

  Tensor got = r.g.interpret(r.inputs)[0];
  expect_bit_equal(got, want);
  ASSERT_TRUE(got.requires_grad());
  got.backward();
  expect_bit_equal(x.grad(), gx, "x.grad");
  expect_bit_equal(w.grad(), gw, "w.grad");
  expect_bit_equal(gamma.grad(), gg, "gamma.grad");
}

TEST(GraphInterpret, NoGradNodesRecordNoHistory) {
  Graph g;
  Value* x = g.add_input(meta({3}), kCPU, InputKind::Argument, "x");
  Node* e = g.add_node(OpId::exp, {x}, {}, {});
  Node* f = g.add_node(OpId::neg, {x}, {}, {});
  f->no_grad = true;
  g.set_outputs({e->outputs[0], f->outputs[0]});
  EXPECT_TRUE(contains(g.str(), "no_grad"));
  std::vector<Tensor> out = g.interpret({randn({3}).requires_grad_()});
  EXPECT_TRUE(out[0].requires_grad());
  EXPECT_FALSE(out[1].requires_grad());
}

TEST(GraphInterpret, InterpretChecksItsInputs) {
  Graph g;
  Value* x = g.add_input(meta({2, 3}), kCPU, InputKind::Argument, "x");
  Node* e = g.add_node(OpId::exp, {x}, {}, {});
  g.set_outputs({e->outputs[0]});
  EXPECT_TRUE(contains(error_of([&] { g.interpret({}); }), "expected 1 input tensors, got 0"));
  std::string msg = error_of([&] { g.interpret({randn({3, 2})}); });
  EXPECT_TRUE(contains(msg, "input 0 (\"x\") is float32[3, 2]")) << msg;
  EXPECT_TRUE(contains(msg, "captured for float32[2, 3]")) << msg;
  msg = error_of([&] { g.interpret({randn({2, 3}, DType::Float64)}); });
  EXPECT_TRUE(contains(msg, "float64[2, 3]")) << msg;
  EXPECT_THROW(g.interpret({Tensor()}), Error);
}

TEST(GraphInterpret, InterpretFreesIntermediatesAfterTheirLastUse) {
  Graph g;
  const int64_t n = 1 << 20;  // 4 MiB a tensor
  Value* v = g.add_input(meta({n}), kCPU, InputKind::Argument, "x");
  for (int i = 0; i < 12; ++i) v = g.add_node(i % 2 ? OpId::neg : OpId::abs, {v}, {}, {})->outputs[0];
  g.set_outputs({v});
  Tensor x = randn({n});
  g.interpret({x});  // builds the plan, warms the allocator cache
  cpu_reset_peak();
  const size_t base = cpu_allocator_stats().allocated_bytes;
  Tensor out = g.interpret({x})[0];
  const size_t peak = cpu_allocator_stats().peak_allocated_bytes - base;
  // At most an op's input and output live at once (the input is the caller's).
  EXPECT_LE(peak, size_t(2 * n * 4));
  EXPECT_GE(peak, size_t(n * 4));
}

TEST(GraphInterpret, MutationsAreWrittenBackIntoInputs) {
  Graph g;
  Value* x = g.add_input(meta({4}), kCPU, InputKind::Argument, "x");
  Value* buf = g.add_input(meta({4}), kCPU, InputKind::Captured, "running");
  Node* s = g.add_node(OpId::add, {buf, x}, {}, {});
  Node* y = g.add_node(OpId::mul, {buf, x}, {}, {});  // reads buf from before the update
  g.add_mutation(buf, s->outputs[0]);
  g.set_outputs({y->outputs[0], buf});
  g.validate();
  Tensor xt = randn({4});
  Tensor bt = randn({4});
  Tensor b0 = bt.clone();
  uint32_t version = bt.version();
  std::vector<Tensor> out = g.interpret({xt, bt});
  expect_bit_equal(bt, b0 + xt);
  expect_bit_equal(out[0], b0 * xt);
  EXPECT_EQ(out[1].impl(), bt.impl());  // an input returned is the caller's tensor itself
  EXPECT_GT(bt.version(), version);
}

TEST(GraphInterpret, MutatingALeafThatRequiresGradFailsLikeEager) {
  Graph g;
  Value* p = g.add_input(meta({3}), kCPU, InputKind::Captured, "weight");
  Value* d = g.add_input(meta({3}), kCPU, InputKind::Argument, "step");
  Node* s = g.add_node(OpId::sub, {p, d}, {}, {});
  g.add_mutation(p, s->outputs[0]);
  Tensor w = randn({3}).requires_grad_();
  Tensor step = randn({3});
  Tensor w0 = w.detach().clone();
  std::string msg = error_of([&] { g.interpret({w, step}); });
  EXPECT_TRUE(contains(msg, "leaf tensor that requires grad")) << msg;
  expect_bit_equal(w, w0);  // nothing written
  // An optimizer step runs under NoGradGuard, as in eager.
  {
    NoGradGuard no_grad;
    g.interpret({w, step});
  }
  expect_bit_equal(w, w0 - step);
  EXPECT_TRUE(w.requires_grad());
  EXPECT_TRUE(w.is_leaf());
}

TEST(GraphInterpret, MutatingATensorWithHistoryKeepsGradientsLikeEager) {
  // eager: h = a * 2; h.mul_(c); loss = (h * h).sum()
  Tensor a = randn({5}).requires_grad_();
  Tensor c = randn({5}).requires_grad_();
  Tensor ha = a * 2.0;
  ha.mul_(c);
  (ha * ha).sum().backward();
  Tensor ga = a.grad(), gc = c.grad();
  a.set_grad(Tensor());
  c.set_grad(Tensor());

  Graph g;
  Value* h = g.add_input(meta({5}), kCPU, InputKind::Argument, "h");
  Value* cv = g.add_input(meta({5}), kCPU, InputKind::Captured, "c");
  Node* m = g.add_node(OpId::mul, {h, cv}, {}, {});
  g.add_mutation(h, m->outputs[0]);
  Tensor hb = a * 2.0;
  g.interpret({hb, c});
  expect_bit_equal(hb, ha);
  (hb * hb).sum().backward();
  expect_bit_equal(a.grad(), ga, "a.grad");
  expect_bit_equal(c.grad(), gc, "c.grad");
}

TEST(GraphInterpret, MutationByAValueWithHistoryGivesTheTargetHistory) {
  // eager: buf (no grad) += w, with w requiring grad: buf now carries w's history.
  Tensor w = randn({3}).requires_grad_();
  Graph g;
  Value* b = g.add_input(meta({3}), kCPU, InputKind::Argument, "buf");
  Value* wv = g.add_input(meta({3}), kCPU, InputKind::Captured, "w");
  Node* s = g.add_node(OpId::mul, {b, wv}, {}, {});
  g.add_mutation(b, s->outputs[0]);
  Tensor buf = randn({3});
  Tensor b0 = buf.clone();
  g.interpret({buf, w});
  ASSERT_TRUE(buf.requires_grad());
  buf.sum().backward();  // d/dw = the old buf, which the update overwrote
  expect_bit_equal(w.grad(), b0);
}

// ---- random ops ----

TEST(GraphInterpret, RandomDrawCountsMatchTheFrontEnds) {
  struct Case {
    const char* name;
    std::function<Tensor()> call;
  };
  Tensor probs = rand({3, 5}) + 0.1;
  std::vector<Case> cases = {
      {"rand f32", [] { return rand({7}); }},
      {"rand f64", [] { return rand({2, 3}, DType::Float64); }},
      {"randn odd", [] { return randn({5}); }},
      {"randn f64", [] { return randn({3}, DType::Float64); }},
      {"randint", [] { return randint(0, 9, {5}); }},
      {"bernoulli", [] { return bernoulli({9}, 0.3); }},
      {"multinomial race", [&] { return multinomial(probs, 3, false); }},
      {"multinomial one", [&] { return multinomial(probs, 1, false); }},
      {"multinomial replacement", [&] { return multinomial(probs.select(0, 0), 6, true); }},
  };
  for (const Case& c : cases) {
    Recorder r;
    record(r, [&](const std::vector<Tensor>&) { return std::vector<Tensor>{c.call()}; }, {});
    const Node* random = nullptr;
    for (const auto& n : r.g.nodes())
      if (op_info(n->op).kind == OpKind::Random) random = n.get();
    ASSERT_NE(random, nullptr) << c.name;
    RngState s0 = get_rng_state();
    c.call();
    RngState s1 = get_rng_state();
    EXPECT_EQ(s1.offset - s0.offset, round_up_to_block(graph::random_draws(*random))) << c.name;
  }
}

TEST(GraphInterpret, RandomOpsDrawFreshValuesEachRunLikeEager) {
  Tensor x = randn({16, 8});
  Fn fn = [](const std::vector<Tensor>& a) {
    Tensor h = dropout(a[0], 0.3);
    return std::vector<Tensor>{dropout(h.relu(), 0.5) + rand({8}), randint(0, 100, {4})};
  };
  Recorder r;
  record(r, fn, {x});

  manual_seed(123);
  std::vector<Tensor> e1 = fn({x}), e2 = fn({x});
  RngState after_eager = get_rng_state();
  manual_seed(123);
  std::vector<Tensor> g1 = r.g.interpret({x}), g2 = r.g.interpret({x});
  EXPECT_EQ(get_rng_state().offset, after_eager.offset);
  for (size_t i = 0; i < e1.size(); ++i) {
    expect_bit_equal(g1[i], e1[i], "run 1");
    expect_bit_equal(g2[i], e2[i], "run 2");
  }
  // Two runs draw two different masks.
  NoGradGuard no_grad;
  EXPECT_GT((g1[0] - g2[0]).abs().sum().item(), 0.0);
}

}  // namespace
}  // namespace ember::graph_test
