// Graph IR: building, printing, validation, structural identity and the passes.
#include "graph/graph_test_util.h"

namespace ember::graph_test {
namespace {

// ---- building and printing ----

TEST(Graph, AddNodeRunsTheShapeRuleOnMetadata) {
  Graph g;
  Value* x = g.add_input(meta({4, 8}), kCPU, InputKind::Argument, "x");
  Value* w = g.add_input(meta({8, 3}), kCPU, InputKind::Captured, "fc.weight");
  Node* mm = g.add_node(OpId::matmul, {x, w}, {}, {});
  ASSERT_EQ(mm->outputs.size(), 1u);
  EXPECT_EQ(mm->outputs[0]->meta.sizes, (Shape{4, 3}));
  EXPECT_EQ(mm->outputs[0]->producer, mm);
  EXPECT_EQ(mm->outputs[0]->device, kCPU);
  // Views carry their layout: a transpose of a contiguous [4, 8] has strides [1, 8].
  Attrs perm;
  perm.dims = {1, 0};
  Node* t = g.add_node(OpId::permute, {x}, perm, {});
  EXPECT_EQ(t->outputs[0]->meta.sizes, (Shape{8, 4}));
  EXPECT_EQ(t->outputs[0]->meta.strides, (Shape{1, 8}));
  Attrs sl;
  sl.dim = 1;
  sl.start = 1;
  sl.end = 3;
  Node* s = g.add_node(OpId::slice, {t->outputs[0]}, sl, {});
  EXPECT_EQ(s->outputs[0]->meta.sizes, (Shape{8, 2}));
  EXPECT_EQ(s->outputs[0]->meta.strides, (Shape{1, 8}));
  EXPECT_EQ(s->outputs[0]->meta.offset, 8);
  // Multi-output ops get one value per output.
  Attrs k;
  k.dim = 1;
  k.start = 3;
  k.flag = true;
  Node* tk = g.add_node(OpId::topk, {x}, k, {});
  ASSERT_EQ(tk->outputs.size(), 2u);
  EXPECT_EQ(tk->outputs[1]->meta.dtype, DType::Int64);
  EXPECT_EQ(tk->outputs[1]->output_index, 1);
  // Ids are dense, in creation order.
  for (size_t i = 0; i < g.values().size(); ++i) EXPECT_EQ(g.values()[i]->id, int(i));
  g.validate();
}

TEST(Graph, AddNodeRejectsBadCalls) {
  Graph g;
  Value* x = g.add_input(meta({4, 8}), kCPU, InputKind::Argument, "x");
  Value* y = g.add_input(meta({3}), kCPU, InputKind::Argument, "y");
  EXPECT_TRUE(contains(error_of([&] { g.add_node(OpId::add, {x}, {}, {}); }), "add"));
  // The shape rule's own error comes through.
  EXPECT_TRUE(contains(error_of([&] { g.add_node(OpId::add, {x, y}, {}, {}); }), "[4, 8]"));
  Graph other;
  Value* z = other.add_input(meta({4, 8}), kCPU, InputKind::Argument, "z");
  EXPECT_TRUE(contains(error_of([&] { g.add_node(OpId::add, {x, z}, {}, {}); }),
                       "not a value of this graph"));
  // Explicit metadata is taken as given, but must have one entry per output.
  EXPECT_THROW(g.add_node(OpId::topk, {x}, {}, {meta({4, 3})}), Error);
  Node* n = g.add_node(OpId::exp, {x}, {}, {meta({4, 8}, DType::Float64)});
  EXPECT_EQ(n->outputs[0]->meta.dtype, DType::Float64);
}

TEST(Graph, PrintsOneLinePerNode) {
  Graph g;
  Value* x = g.add_input(meta({4, 8}), kCPU, InputKind::Argument, "");
  Value* b = g.add_input(meta({8, 3}), kCPU, InputKind::Captured, "fc.weight");
  Node* mm = g.add_node(OpId::matmul, {x, b}, {}, {}, {"/src/model/x.cpp", 12});
  Node* s = g.add_node(OpId::sum, {mm->outputs[0]}, dims_attrs({0}), {});
  Attrs perm;
  perm.dims = {1, 0};
  Node* t = g.add_node(OpId::permute, {x}, perm, {});
  Attrs k;
  k.dim = 1;
  k.start = 2;
  k.flag = true;
  Node* tk = g.add_node(OpId::topk, {x}, k, {});
  g.add_mutation(b, b);
  g.set_outputs({s->outputs[0], t->outputs[0], tk->outputs[1]});
  EXPECT_EQ(g.str(),
            "graph(%0: f32[4, 8] (arg 0), %1: f32[8, 3] (captured \"fc.weight\")):\n"
            "  %2 = matmul(%0, %1)  # f32[4, 3]  (x.cpp:12)\n"
            "  %3 = sum(%2, dims=[0])  # f32[3]\n"
            "  %4 = permute(%0, dims=[1, 0])  # f32[8, 4] strides=[1, 8]\n"
            "  %5, %6 = topk(%0, dim=1, start=2, flag=true)  # f32[4, 2], i64[4, 2]\n"
            "  mutate %1 <- %1\n"
            "  return (%3, %4, %6)\n");
  EXPECT_EQ((graph::SourceLoc{"a/b.cpp", 7}.str()), "a/b.cpp:7");
  EXPECT_EQ(graph::SourceLoc{}.str(), "<unknown>");
}

TEST(Graph, PrintsNamedArgumentsAndShortDtypes) {
  Graph g;
  g.add_input(meta({2}, DType::Float64), kCPU, InputKind::Argument, "x");
  g.add_input(meta({2}, DType::BFloat16), kCPU, InputKind::Argument, "");
  g.add_input(meta({}, DType::Bool), kCPU, InputKind::Captured, "mask");
  g.add_input(meta({1}, DType::Int32), kCPU, InputKind::Argument, "");
  g.add_input(meta({1}, DType::Float16), kCPU, InputKind::Argument, "");
  EXPECT_EQ(g.str(),
            "graph(%0: f64[2] (arg 0 \"x\"), %1: bf16[2] (arg 1), %2: b8[] (captured \"mask\"), "
            "%3: i32[1] (arg 2), %4: f16[1] (arg 3)):\n"
            "  return ()\n");
}

// ---- validation ----

TEST(Graph, ValidateAcceptsWellFormedGraphs) {
  Graph g;
  Value* x = g.add_input(meta({3}), kCPU, InputKind::Argument, "x");
  Node* e = g.add_node(OpId::exp, {x}, {}, {});
  g.add_mutation(x, e->outputs[0]);
  g.set_outputs({e->outputs[0], x});
  EXPECT_NO_THROW(g.validate());
}

TEST(Graph, ValidateReportsUseBeforeDefinitionWithTheNodesLine) {
  Graph g;
  Value* x = g.add_input(meta({3}), kCPU, InputKind::Argument, "x");
  Node* a = g.add_node(OpId::exp, {x}, {}, {});
  Node* b = g.add_node(OpId::neg, {a->outputs[0]}, {}, {});
  g.nodes()[0]->inputs[0] = b->outputs[0];  // exp now reads a value made after it
  std::string msg = error_of([&] { g.validate(); });
  EXPECT_TRUE(contains(msg, "%1 = exp(%2)  # f32[3]")) << msg;
  EXPECT_TRUE(contains(msg, "before it is defined")) << msg;
}

TEST(Graph, ValidateReportsBadArity) {
  Graph g;
  Value* x = g.add_input(meta({3}), kCPU, InputKind::Argument, "x");
  Node* a = g.add_node(OpId::add, {x, x}, {}, {});
  a->inputs.pop_back();
  std::string msg = error_of([&] { g.validate(); });
  EXPECT_TRUE(contains(msg, "%1 = add(%0)")) << msg;
  EXPECT_TRUE(contains(msg, "takes 2 inputs")) << msg;
}

TEST(Graph, ValidateReportsValuesProducedTwice) {
  Graph g;
  Value* x = g.add_input(meta({3}), kCPU, InputKind::Argument, "x");
  Node* a = g.add_node(OpId::exp, {x}, {}, {});
  Node* b = g.add_node(OpId::neg, {x}, {}, {});
  b->outputs[0] = a->outputs[0];
  std::string msg = error_of([&] { g.validate(); });
  EXPECT_TRUE(contains(msg, "already defined")) << msg;
  EXPECT_TRUE(contains(msg, "= neg(%0)")) << msg;
}

TEST(Graph, ValidateReportsForeignOutputsAndBadMutations) {
  Graph other;
  Value* foreign = other.add_input(meta({3}), kCPU, InputKind::Argument, "y");
  {
    Graph g;
    g.add_input(meta({3}), kCPU, InputKind::Argument, "x");
    g.set_outputs({foreign});
    EXPECT_TRUE(contains(error_of([&] { g.validate(); }), "output 0 is not a value of this graph"));
  }
  {
    Graph g;
    Value* x = g.add_input(meta({3}), kCPU, InputKind::Argument, "x");
    Node* e = g.add_node(OpId::exp, {x}, {}, {});
    g.add_mutation(e->outputs[0], x);
    std::string msg = error_of([&] { g.validate(); });
    EXPECT_TRUE(contains(msg, "mutate %1 <- %0")) << msg;
    EXPECT_TRUE(contains(msg, "not a graph input")) << msg;
  }
  {
    Graph g;
    Value* x = g.add_input(meta({3}), kCPU, InputKind::Argument, "x");
    g.add_mutation(x, foreign);
    EXPECT_TRUE(contains(error_of([&] { g.validate(); }), "not in this graph"));
  }
  {
    Graph g;
    Value* x = g.add_input(meta({3}), kCPU, InputKind::Argument, "x");
    Node* c = g.add_node(OpId::cast, {x}, [] {
      Attrs a;
      a.dtype = DType::Float64;
      return a;
    }(), {});
    g.add_mutation(x, c->outputs[0]);
    std::string msg = error_of([&] { g.validate(); });
    EXPECT_TRUE(contains(msg, "new contents (f64[3]) do not match the target (f32[3])")) << msg;
    // interpret() checks the graph before its first run.
    EXPECT_TRUE(contains(error_of([&] { g.interpret({randn({3})}); }), "do not match")) << msg;
  }
}

// ---- structural identity ----

// x, y -> exp(x) * y, summed; `interleave` adds y after the first node, so ids differ.
void build_small(Graph& g, bool interleave, double scale = 1.0, const Shape& shape = {4, 5},
                 const char* name = "x") {
  Value* x = g.add_input(meta(shape), kCPU, InputKind::Argument, name);
  Value* y = nullptr;
  if (!interleave) y = g.add_input(meta(shape), kCPU, InputKind::Captured, "w");
  Attrs c;
  c.value = scale;
  c.dtype = DType::Float32;
  Node* e = g.add_node(OpId::exp, {x}, {}, {}, {"a.cpp", interleave ? 1u : 2u});
  if (interleave) y = g.add_input(meta(shape), kCPU, InputKind::Captured, "weight");
  Node* s = g.add_node(OpId::full, {}, c, {meta({})});
  Node* m = g.add_node(OpId::mul, {e->outputs[0], y}, {}, {});
  Node* m2 = g.add_node(OpId::mul, {m->outputs[0], s->outputs[0]}, {}, {});
  Node* r = g.add_node(OpId::sum, {m2->outputs[0]}, dims_attrs({0, 1}), {});
  g.set_outputs({r->outputs[0]});
}

TEST(Graph, StructurallyEqualIgnoresIdsNamesAndLocations) {
  Graph a, b;
  build_small(a, false);
  build_small(b, true, 1.0, {4, 5}, "input");
  EXPECT_NE(a.str(), b.str());  // the ids really differ
  EXPECT_TRUE(a.structurally_equal(b));
  EXPECT_TRUE(b.structurally_equal(a));
  EXPECT_EQ(a.structural_hash(), b.structural_hash());
}

TEST(Graph, StructurallyEqualSeesAttrsShapesKindsAndWiring) {
  Graph a;
  build_small(a, false);
  {
    Graph b;
    build_small(b, false, 2.0);  // another attribute value
    EXPECT_FALSE(a.structurally_equal(b));
    EXPECT_NE(a.structural_hash(), b.structural_hash());
  }
  {
    Graph b;
    build_small(b, false, 1.0, {4, 6});  // another shape
    EXPECT_FALSE(a.structurally_equal(b));
    EXPECT_NE(a.structural_hash(), b.structural_hash());
  }
  {
    Graph b;  // the same ops wired differently: mul(y, exp(x))
    Value* x = b.add_input(meta({4, 5}), kCPU, InputKind::Argument, "x");
    Value* y = b.add_input(meta({4, 5}), kCPU, InputKind::Captured, "w");
    Attrs c;
    c.value = 1.0;
    Node* e = b.add_node(OpId::exp, {x}, {}, {});
    Node* s = b.add_node(OpId::full, {}, c, {meta({})});
    Node* m = b.add_node(OpId::mul, {y, e->outputs[0]}, {}, {});
    Node* m2 = b.add_node(OpId::mul, {m->outputs[0], s->outputs[0]}, {}, {});
    Node* r = b.add_node(OpId::sum, {m2->outputs[0]}, dims_attrs({0, 1}), {});
    b.set_outputs({r->outputs[0]});
    EXPECT_FALSE(a.structurally_equal(b));
    EXPECT_NE(a.structural_hash(), b.structural_hash());
  }
  {
    Graph b;  // an argument where a captured tensor was
    Value* x = b.add_input(meta({4, 5}), kCPU, InputKind::Argument, "x");
    Value* y = b.add_input(meta({4, 5}), kCPU, InputKind::Argument, "w");
    Attrs c;
    c.value = 1.0;
    Node* e = b.add_node(OpId::exp, {x}, {}, {});
    Node* s = b.add_node(OpId::full, {}, c, {meta({})});
    Node* m = b.add_node(OpId::mul, {e->outputs[0], y}, {}, {});
    Node* m2 = b.add_node(OpId::mul, {m->outputs[0], s->outputs[0]}, {}, {});
    Node* r = b.add_node(OpId::sum, {m2->outputs[0]}, dims_attrs({0, 1}), {});
    b.set_outputs({r->outputs[0]});
    EXPECT_FALSE(a.structurally_equal(b));
  }
  {
    Graph b;  // a mutation more
    build_small(b, false);
    b.add_mutation(b.inputs()[1], b.outputs()[0]);
    EXPECT_FALSE(a.structurally_equal(b));
    EXPECT_NE(a.structural_hash(), b.structural_hash());
  }
}

TEST(Graph, FloatingAttrsCompareByBits) {
  auto one = [](double v) {
    auto g = std::make_unique<Graph>();
    Value* x = g->add_input(meta({3}), kCPU, InputKind::Argument, "x");
    Attrs a;
    a.value = v;
    Node* n = g->add_node(OpId::pow_scalar, {x}, a, {});
    g->set_outputs({n->outputs[0]});
    return g;
  };
  auto nan1 = one(std::nan("")), nan2 = one(std::nan(""));
  EXPECT_TRUE(nan1->structurally_equal(*nan2));  // a NaN attribute still matches itself
  EXPECT_EQ(nan1->structural_hash(), nan2->structural_hash());
  EXPECT_FALSE(one(0.0)->structurally_equal(*one(-0.0)));
}

TEST(Graph, RandomOpsMatchWhateverRangeTheyDrewAtCapture) {
  // Seed and offset are drawn afresh at each run, so two captures of the same dropout are
  // the same graph.
  Recorder r1, r2;
  Fn fn = [](const std::vector<Tensor>& a) { return std::vector<Tensor>{dropout(a[0], 0.5)}; };
  Tensor x = randn({8});
  record(r1, fn, {x});
  record(r2, fn, {x});
  EXPECT_NE(r1.g.nodes()[0]->attrs.offset, r2.g.nodes()[0]->attrs.offset);
  EXPECT_TRUE(r1.g.structurally_equal(r2.g));
  EXPECT_EQ(r1.g.structural_hash(), r2.g.structural_hash());
}

// ---- passes ----

TEST(Graph, DeadCodeEliminationKeepsWhatReachesOutputsAndMutations) {
  Graph g;
  Value* x = g.add_input(meta({4, 6}), kCPU, InputKind::Argument, "x");
  Value* buf = g.add_input(meta({4, 6}), kCPU, InputKind::Captured, "buf");
  Node* e = g.add_node(OpId::exp, {x}, {}, {});
  Node* dead1 = g.add_node(OpId::neg, {e->outputs[0]}, {}, {});
  g.add_node(OpId::abs, {dead1->outputs[0]}, {}, {});  // dead too
  Attrs k;
  k.dim = 1;
  k.start = 2;
  k.flag = true;
  Node* tk = g.add_node(OpId::topk, {x}, k, {});  // only its indices are used
  Node* c = g.add_node(OpId::cast, {tk->outputs[1]}, [] {
    Attrs a;
    a.dtype = DType::Float32;
    return a;
  }(), {});
  Node* upd = g.add_node(OpId::add, {buf, e->outputs[0]}, {}, {});
  g.add_mutation(buf, upd->outputs[0]);
  g.set_outputs({c->outputs[0]});

  Tensor xt = randn({4, 6});
  Tensor b1 = randn({4, 6}), b2 = b1.clone();
  std::vector<Tensor> before = g.interpret({xt, b1});

  EXPECT_EQ(g.eliminate_dead_code(), 2);
  EXPECT_EQ(g.num_ops(), 4u);
  EXPECT_EQ(g.eliminate_dead_code(), 0);
  g.validate();
  for (size_t i = 0; i < g.values().size(); ++i) EXPECT_EQ(g.values()[i]->id, int(i));
  std::vector<Tensor> after = g.interpret({xt, b2});
  expect_bit_equal(before[0], after[0]);
  expect_bit_equal(b1, b2);
  EXPECT_FALSE(contains(g.str(), "neg"));
  EXPECT_FALSE(contains(g.str(), "abs"));
}

TEST(Graph, CommonSubexpressionsMergeAndRewireUses) {
  Graph g;
  Value* x = g.add_input(meta({5}), kCPU, InputKind::Argument, "x");
  Node* e1 = g.add_node(OpId::exp, {x}, {}, {});
  Node* e2 = g.add_node(OpId::exp, {x}, {}, {});
  Node* n1 = g.add_node(OpId::neg, {e1->outputs[0]}, {}, {});
  Node* n2 = g.add_node(OpId::neg, {e2->outputs[0]}, {}, {});  // same once e2 is e1
  Node* s = g.add_node(OpId::add, {n1->outputs[0], n2->outputs[0]}, {}, {});
  Attrs p2, p3;
  p2.value = 2;
  p3.value = 3;
  Node* q2 = g.add_node(OpId::pow_scalar, {x}, p2, {});
  Node* q3 = g.add_node(OpId::pow_scalar, {x}, p3, {});  // other attrs: kept
  Node* out = g.add_node(OpId::add, {s->outputs[0], q2->outputs[0]}, {}, {});
  Node* out2 = g.add_node(OpId::add, {out->outputs[0], q3->outputs[0]}, {}, {});
  g.set_outputs({out2->outputs[0], n2->outputs[0]});

  Tensor xt = randn({5});
  std::vector<Tensor> before = g.interpret({xt});
  EXPECT_EQ(g.eliminate_common_subexpressions(), 2);
  EXPECT_EQ(g.num_ops(), 7u);
  EXPECT_EQ(g.eliminate_common_subexpressions(), 0);
  g.validate();
  // The output that was n2 is now n1's value.
  EXPECT_EQ(g.outputs()[1]->producer->op, OpId::neg);
  EXPECT_EQ(g.outputs()[1]->producer->inputs[0]->producer->inputs[0], g.inputs()[0]);
  std::vector<Tensor> after = g.interpret({xt});
  expect_bit_equal(before[0], after[0]);
  expect_bit_equal(before[1], after[1]);
}

TEST(Graph, CommonSubexpressionsRewireEveryOutputOfAMultiOutputNode) {
  Graph g;
  Value* x = g.add_input(meta({4, 6}), kCPU, InputKind::Argument, "x");
  Attrs k;
  k.dim = 1;
  k.start = 3;
  k.flag = true;
  Node* t1 = g.add_node(OpId::topk, {x}, k, {});
  Node* t2 = g.add_node(OpId::topk, {x}, k, {});
  Node* a = g.add_node(OpId::add, {t1->outputs[0], t2->outputs[0]}, {}, {});
  Node* i = g.add_node(OpId::sub, {t2->outputs[1], t1->outputs[1]}, {}, {});
  g.set_outputs({a->outputs[0], i->outputs[0]});
  Tensor xt = randn({4, 6});
  std::vector<Tensor> before = g.interpret({xt});
  EXPECT_EQ(g.eliminate_common_subexpressions(), 1);
  g.validate();
  const Node& add = *g.nodes()[1];
  const Node& sub = *g.nodes()[2];
  EXPECT_EQ(add.inputs[0], add.inputs[1]);
  EXPECT_EQ(sub.inputs[0], sub.inputs[1]);
  EXPECT_EQ(sub.inputs[0]->output_index, 1);
  std::vector<Tensor> after = g.interpret({xt});
  expect_bit_equal(before[0], after[0]);
  expect_bit_equal(before[1], after[1]);
}

// A weight grad's shape: t(x^T @ dy) becomes dy^T @ x, contiguous, with the same values; a
// product with a second reader, and a transpose that a view reads, stay as they are.
TEST(Graph, TransposedMatmulProductsAreComputedInTheOtherOrder) {
  Graph g;
  Value* x = g.add_input(meta({3, 5, 8}), kCPU, InputKind::Argument, "x");
  Value* dy = g.add_input(meta({3, 5, 6}), kCPU, InputKind::Argument, "dy");
  Attrs flat_x, flat_dy, t2, t3;
  flat_x.shape = {15, 8};
  flat_dy.shape = {15, 6};
  t2.dims = {1, 0};
  t3.dims = {0, 2, 1};
  Value* xf = g.add_node(OpId::view, {x}, flat_x, {})->outputs[0];
  Value* dyf = g.add_node(OpId::view, {dy}, flat_dy, {})->outputs[0];
  Value* xt = g.add_node(OpId::permute, {xf}, t2, {})->outputs[0];
  Value* prod = g.add_node(OpId::matmul, {xt, dyf}, {}, {})->outputs[0];  // [8, 6]
  Value* grad = g.add_node(OpId::permute, {prod}, t2, {})->outputs[0];    // [6, 8], strided
  // Batched, with a second reader of the product: kept.
  Value* xtb = g.add_node(OpId::permute, {x}, t3, {})->outputs[0];        // [3, 8, 5]
  Value* pb = g.add_node(OpId::matmul, {xtb, dy}, {}, {})->outputs[0];    // [3, 8, 6]
  Value* pbt = g.add_node(OpId::permute, {pb}, t3, {})->outputs[0];
  Value* other = g.add_node(OpId::neg, {pb}, {}, {})->outputs[0];
  // Batched, transpose read by a view: kept.
  Value* pc = g.add_node(OpId::matmul, {xtb, dy}, {}, {})->outputs[0];
  Value* pct = g.add_node(OpId::permute, {pc}, t3, {})->outputs[0];
  Attrs same;
  same.shape = {3, 6, 8};
  Value* pcv = g.add_node(OpId::view, {pct}, same, {})->outputs[0];
  // Batched with one reader: rewritten, through the batch dims.
  Value* pd = g.add_node(OpId::matmul, {xtb, dy}, {}, {})->outputs[0];
  Value* pdt = g.add_node(OpId::permute, {pd}, t3, {})->outputs[0];
  Value* pde = g.add_node(OpId::exp, {pdt}, {}, {})->outputs[0];
  g.set_outputs({grad, pbt, other, pcv, pde});
  EXPECT_EQ(grad->meta.strides, (Shape{1, 6}));

  const Tensor xv = randn({3, 5, 8}), dyv = randn({3, 5, 6});
  const std::vector<Tensor> before = g.interpret({xv, dyv});
  EXPECT_EQ(g.transpose_matmul_products(), 2);
  g.validate();
  const Value* out = g.outputs()[0];
  ASSERT_EQ(out->producer->op, OpId::matmul);
  EXPECT_EQ(out->meta.sizes, (Shape{6, 8}));
  EXPECT_EQ(out->meta.strides, (Shape{8, 1}));
  // x^T's transpose is x's flat view again, not a permute of a permute.
  EXPECT_EQ(out->producer->inputs[1]->producer->op, OpId::view);
  EXPECT_EQ(g.outputs()[1]->producer->op, OpId::permute);
  EXPECT_EQ(g.outputs()[4]->producer->inputs[0]->producer->op, OpId::matmul);
  const std::vector<Tensor> after = g.interpret({xv, dyv});
  ASSERT_EQ(after.size(), before.size());
  for (size_t i = 0; i < after.size(); ++i) {
    // Sums of 5 or 15 products in another order: within a few float roundings.
    const double diff = (after[i].to(DType::Float64) - before[i].to(DType::Float64)).abs().amax().item();
    EXPECT_LT(diff, 1e-5) << "output " << i;
  }
  EXPECT_TRUE(after[0].is_contiguous());
  EXPECT_EQ(g.transpose_matmul_products(), 0);
}

TEST(Graph, CommonSubexpressionsKeepDistinctOutputsAndRandomDraws) {
  Graph g;
  Value* x = g.add_input(meta({5}), kCPU, InputKind::Argument, "x");
  Node* a = g.add_node(OpId::exp, {x}, {}, {});
  Node* b = g.add_node(OpId::exp, {x}, {}, {});
  Attrs r;
  r.shape = {5};
  r.value = 0.5;
  Node* m1 = g.add_node(OpId::bernoulli, {}, r, {});
  Node* m2 = g.add_node(OpId::bernoulli, {}, r, {});  // a second mask, not the first again
  Node* d = g.add_node(OpId::sub, {m1->outputs[0], m2->outputs[0]}, {}, {});
  // Two outputs computed alike are still two tensors for the caller.
  g.set_outputs({a->outputs[0], b->outputs[0], d->outputs[0]});
  EXPECT_EQ(g.eliminate_common_subexpressions(), 0);
  std::vector<Tensor> out = g.interpret({randn({5})});
  EXPECT_NE(out[0].impl(), out[1].impl());
  EXPECT_GT(out[2].abs().sum().item(), 0.0);  // 5 pairs of fair coins: equal with p = 1/32
}

TEST(Graph, DeadRandomNodesStillAdvanceTheGenerator) {
  Fn fn = [](const std::vector<Tensor>& a) {
    Tensor unused = rand({7});  // drawn and dropped
    return std::vector<Tensor>{a[0] + randn({6})};
  };
  Recorder r;
  Tensor x = randn({6});
  record(r, fn, {x});
  EXPECT_EQ(r.g.eliminate_dead_code(), 1);
  EXPECT_TRUE(contains(r.g.str(), "after 8 skipped draws")) << r.g.str();
  manual_seed(11);
  Tensor want = fn({x})[0];
  Tensor want_next = rand({3});
  manual_seed(11);
  Tensor got = r.g.interpret({x})[0];
  Tensor got_next = rand({3});
  expect_bit_equal(got, want);
  expect_bit_equal(got_next, want_next);

  // With no random node after it, the removed draws are reserved at the end of the run.
  Graph g;
  Value* x2 = g.add_input(meta({3}), kCPU, InputKind::Argument, "x");
  Attrs r5;
  r5.shape = {5};
  g.add_node(OpId::randn, {}, r5, {});
  Node* e = g.add_node(OpId::exp, {x2}, {}, {});
  g.set_outputs({e->outputs[0]});
  EXPECT_EQ(g.eliminate_dead_code(), 1);
  EXPECT_TRUE(contains(g.str(), "  skip 8 random draws\n")) << g.str();
  Tensor in = randn({3});
  RngState s0 = get_rng_state();
  g.interpret({in});
  EXPECT_EQ(get_rng_state().offset - s0.offset, 8u);
}

}  // namespace
}  // namespace ember::graph_test
