// The kernel IR of elementwise groups: the loads lowering derives (broadcast, strided and
// contiguous inputs as index expressions over the output's coordinates), its printed form,
// and what the C++ renderer makes of it (row loop or flat loop, per-row bases).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>

#include "compiler/generalize.h"
#include "compiler/kernel_ir.h"
#include "compiler/lower.h"
#include "compiler/pointwise_fusion.h"
#include "compiler/render_cpp.h"
#include "compiler/toolchain.h"
#include "compiler/compiler_test_util.h"
#include "core/shape.h"
#include "ember/ember.h"

namespace ember::compiler {
namespace {

using graph::Value;
using kir::coord;

graph::Value* input(graph::Graph& g, const Shape& sizes, const Shape& strides,
                    const std::string& name) {
  return g.add_input(TensorMeta{sizes, strides, 0, DType::Float32}, kCPU,
                     graph::InputKind::Argument, name);
}

// The one group of g's plan, lowered.
kir::Kernel lower_only_group(const graph::Graph& g) {
  const FusionPlan plan = plan_fusion(g);
  EXPECT_EQ(plan.groups.size(), 1u);
  return lower_elementwise(plan.groups.at(0), "kernel_0");
}

const kir::Stmt& load_of(const kir::Kernel& k, int buffer) {
  for (const kir::Stmt& s : k.body)
    if (s.kind == kir::Stmt::Kind::Load && s.buffer == buffer) return s;
  ADD_FAILURE() << "no load of buffer " << buffer;
  return k.body.front();
}

TEST(KernelIR, BroadcastInputsIndexByTheCoordinatesTheyVaryAlong) {
  graph::Graph g;
  Value* x = input(g, {4, 32}, {32, 1}, "x");
  Value* b = input(g, {32}, {1}, "b");
  Value* s = g.add_node(OpId::add, {x, b}, {}, {})->outputs[0];
  Value* y = g.add_node(OpId::relu, {s}, {}, {})->outputs[0];
  g.set_outputs({y});
  const kir::Kernel k = lower_only_group(g);
  ASSERT_EQ(k.domain.size(), 2u);
  EXPECT_EQ(k.numel(), kir::Index(128));
  EXPECT_EQ(load_of(k, 0).index, coord(0) * 32 + coord(1));  // x: its own layout
  EXPECT_EQ(load_of(k, 1).index, coord(1));                  // b: along the columns only
  EXPECT_EQ(k.body.back().kind, kir::Stmt::Kind::Store);
  EXPECT_EQ(k.body.back().index, k.contiguous_index());
  const std::string text = kir::print(k);
  EXPECT_NE(text.find("load #1[c1]"), std::string::npos) << text;
  EXPECT_NE(text.find("= Relu("), std::string::npos) << text;
  // The broadcast makes the C++ kernel loop over rows: x's row base, b by column.
  EXPECT_TRUE(cpp_row_loop(k));
  std::ostringstream os;
  render_cpp_elementwise(os, k, 0, false, "  ");
  EXPECT_NE(os.str().find("= 32*r;"), std::string::npos) << os.str();
  EXPECT_NE(os.str().find("in1[j]"), std::string::npos) << os.str();
}

TEST(KernelIR, TransposedInputsIndexWithTheirStridesAndContiguousOnesFlat) {
  graph::Graph g;
  Value* a = input(g, {8, 16}, {1, 8}, "a");  // a transposed [16, 8]
  Value* c = input(g, {8, 16}, {16, 1}, "c");
  Value* y = g.add_node(OpId::mul, {a, c}, {}, {})->outputs[0];
  g.set_outputs({y});
  const kir::Kernel k = lower_only_group(g);
  EXPECT_EQ(load_of(k, 0).index, coord(0) + coord(1) * 8);
  EXPECT_EQ(load_of(k, 1).index, k.contiguous_index());
  EXPECT_TRUE(cpp_row_loop(k));

  graph::Graph h;
  Value* p = input(h, {8, 16}, {16, 1}, "p");
  Value* q = input(h, {8, 16}, {16, 1}, "q");
  h.set_outputs({h.add_node(OpId::sub, {p, q}, {}, {})->outputs[0]});
  const kir::Kernel flat = lower_only_group(h);
  EXPECT_FALSE(cpp_row_loop(flat));  // every offset is the element's own: one flat loop
  std::ostringstream os;
  render_cpp_elementwise(os, flat, 0, false, "  ");
  EXPECT_NE(os.str().find("in0[i]"), std::string::npos) << os.str();
  EXPECT_NE(os.str().find("out[i] ="), std::string::npos) << os.str();
}

TEST(KernelIR, FusedSoftmaxLowersToARowProgram) {
  graph::Graph g;
  Value* x = input(g, {4, 64}, {64, 1}, "x");
  Value* t = input(g, {}, {}, "t");
  Value* scaled = g.add_node(OpId::mul, {x, t}, {}, {})->outputs[0];
  Attrs last;
  last.dim = 1;  // normalized, as the front end records it
  Value* p = g.add_node(OpId::softmax, {scaled}, last, {})->outputs[0];
  g.set_outputs({p});
  const FusionPlan plan = plan_fusion(g);
  ASSERT_EQ(plan.groups.size(), 1u);
  ASSERT_NE(plan.groups[0].row, nullptr);
  const kir::Kernel k = lower_rows(plan.groups[0], "kernel_0");
  ASSERT_TRUE(k.rows.has_value());
  const kir::RowProgram& rp = *k.rows;
  // The producer (x * t) computes the row op's input; max, then the kept exponentials' sum,
  // then the reciprocal; the output scales the kept values.
  EXPECT_EQ(rp.input, "v2");
  ASSERT_EQ(rp.steps.size(), 3u);
  EXPECT_EQ(rp.steps[0].kind, kir::RowStep::Kind::Max);
  EXPECT_EQ(rp.steps[1].kind, kir::RowStep::Kind::Sum);
  EXPECT_TRUE(rp.steps[1].keep);
  EXPECT_EQ(rp.steps[2].kind, kir::RowStep::Kind::Let);
  EXPECT_EQ(rp.out.back().kind, kir::Stmt::Kind::Store);
  const std::string text = kir::print(k);
  EXPECT_NE(text.find("mx = max over the row of v2"), std::string::npos) << text;
  EXPECT_NE(text.find("(kept)"), std::string::npos) << text;
  EXPECT_NE(text.find("= kept"), std::string::npos) << text;
  std::ostringstream os;
  render_cpp_rows(os, k);
  EXPECT_NE(os.str().find("ember::fn::ExpFtz{}"), std::string::npos) << os.str();
  EXPECT_NE(os.str().find("row[j] = kept;"), std::string::npos) << os.str();
  if (std::getenv("EMBER_PRINT_IR")) std::printf("%s\n%s", text.c_str(), os.str().c_str());
}

// y = x + b over a domain of `domain` (x contiguous, b one value per column), built by hand.
kir::Kernel add_columns(const std::vector<kir::Index>& domain) {
  kir::Kernel k;
  k.name = "add_columns";
  k.domain = domain;
  const kir::Index n = k.numel();
  k.buffers = {{DType::Float32, n, false, "x"},
               {DType::Float32, domain.back(), false, "b"},
               {DType::Float32, n, true, "y"}};
  kir::Stmt x, b, y, st;
  x.out = "x";
  x.buffer = 0;
  x.index = k.contiguous_index();
  b.out = "b";
  b.buffer = 1;
  b.index = coord(int(domain.size()) - 1);
  y.kind = kir::Stmt::Kind::Call;
  y.out = "y";
  y.functor = "Add";
  y.args = {"x", "b"};
  st.kind = kir::Stmt::Kind::Store;
  st.buffer = 2;
  st.index = k.contiguous_index();
  st.args = {"y"};
  k.body = {x, b, y, st};
  return k;
}

// Builds k's C++ (static or with size symbols) and runs it on [rows, cols] data.
void expect_adds_columns(const kir::Kernel& k, int64_t rows, int64_t cols,
                         std::vector<int64_t> sizes, std::string* source = nullptr) {
  std::ostringstream body;
  render_cpp_elementwise(body, k, 0, false, "  ");
  const std::string text = generated_includes() + "\nextern \"C\" void " + k.name +
                           "(void* const* args) {\n" + body.str() + "}\n";
  if (source) *source = text;
  std::shared_ptr<const Library> lib = load_source(text, k.name);
  auto fn = reinterpret_cast<void (*)(void* const*)>(lib->symbol(k.name));
  std::vector<float> x(static_cast<size_t>(rows * cols)), b(static_cast<size_t>(cols));
  std::vector<float> y(x.size(), -1.0f);
  for (size_t i = 0; i < x.size(); ++i) x[i] = float(i % 97) * 0.5f;
  for (size_t j = 0; j < b.size(); ++j) b[j] = float(j) * 0.25f;
  void* args[] = {x.data(), b.data(), y.data(), sizes.data()};
  fn(args);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      ASSERT_EQ(y[size_t(r * cols + c)], x[size_t(r * cols + c)] + b[size_t(c)])
          << "row " << r << " column " << c << " of [" << rows << ", " << cols << "]";
}

TEST(KernelIR, SymbolicDomainsPrintTheirSymbols) {
  const kir::Kernel k = add_columns({kir::Index::symbol(0), 16});
  EXPECT_EQ(k.numel(), kir::Index::symbol(0) * 16);
  EXPECT_EQ(k.size_symbols(), std::vector<int>{0});
  const std::string text = kir::print(k);
  EXPECT_NE(text.find("over [s0, 16]"), std::string::npos) << text;
  EXPECT_NE(text.find("load #0[16*c0 + c1]"), std::string::npos) << text;
}

TEST(KernelIR, OneCompiledKernelServesEverySizeOfItsSymbols) {
  test::CacheDir cache(test::kSharedCompilerCache);
  // Rows symbolic: the row loop, its bound read from the sizes argument.
  const kir::Kernel rows = add_columns({kir::Index::symbol(0), 64});
  std::string source;
  for (int64_t r : {1, 3, 700})  // 700 rows: past the parallel grain, threads split the rows
    expect_adds_columns(rows, r, 64, {r}, &source);
  EXPECT_NE(source.find("const int64_t s0 = sizes[0];"), std::string::npos) << source;
  EXPECT_NE(source.find("const int64_t rows = s0;"), std::string::npos) << source;
  // Columns symbolic (s1; s0 unused): a flat loop dividing by the symbol.
  const kir::Kernel cols = add_columns({5, kir::Index::symbol(1)});
  for (int64_t c : {1, 17, 9000}) expect_adds_columns(cols, 5, c, {-1, c}, &source);
  EXPECT_NE(source.find("const int64_t n = 5*s1;"), std::string::npos) << source;
  EXPECT_NE(source.find("if (n >= "), std::string::npos) << source;
  const ToolchainStats before = toolchain_stats();
  expect_adds_columns(cols, 5, 123, {-1, 123});
  EXPECT_EQ(toolchain_stats().compiler_runs, before.compiler_runs);  // no new build
}

// layer_norm(x + b, [t], w) over x [4, t]: a row kernel whose sizes, strides and row length
// all follow t.
kir::Kernel layer_norm_kernel(int64_t t) {
  graph::Graph g;
  Value* x = input(g, {4, t}, {t, 1}, "x");
  Value* b = input(g, {t}, {1}, "b");
  Value* w = input(g, {t}, {1}, "w");
  Value* h = g.add_node(OpId::add, {x, b}, {}, {})->outputs[0];
  Attrs a;
  a.shape = {t};
  a.value = 1e-5;
  Value* y = g.add_node(OpId::layer_norm, {h, w}, a, {})->outputs[0];
  g.set_outputs({y});
  const FusionPlan plan = plan_fusion(g);
  EXPECT_EQ(plan.groups.size(), 1u);
  return lower_rows(plan.groups.at(0), "kernel_0");
}

TEST(KernelIR, KernelsAtSeveralSizesGeneralizeToOneOverSymbols) {
  std::vector<KernelSample> samples;
  for (int64_t t : {3, 4, 5}) samples.push_back({{t}, layer_norm_kernel(t)});
  const std::optional<kir::Kernel> k = generalize(samples);
  ASSERT_TRUE(k.has_value());
  EXPECT_EQ(k->size_symbols(), std::vector<int>{0});
  EXPECT_EQ(k->domain.back(), kir::Index::symbol(0));
  EXPECT_EQ(k->buffers[0].numel, kir::Index::symbol(0) * 4);
  // Bound to a size no sample had, it is exactly the kernel lowered at that size.
  for (int64_t t : {2, 9, 4096}) {
    const kir::Kernel want = layer_norm_kernel(t);
    const std::vector<int64_t> at{t};
    const kir::Kernel got = kir::bind(*k, at);
    EXPECT_EQ(kir::form(got), kir::form(want)) << t;
    EXPECT_EQ(kir::integers(got), kir::integers(want)) << t;
  }
  // Size 1 broadcasts: another form, which no fit covers.
  samples.push_back({{1}, layer_norm_kernel(1)});
  EXPECT_FALSE(generalize(samples).has_value());
  // Two sizes fit lines (this kernel's integers are all linear in the row length), one is no
  // fit at all.
  const std::optional<kir::Kernel> line =
      generalize({{{3}, layer_norm_kernel(3)}, {{4}, layer_norm_kernel(4)}});
  ASSERT_TRUE(line.has_value());
  const std::vector<int64_t> at9{9};
  EXPECT_EQ(kir::integers(kir::bind(*line, at9)), kir::integers(layer_norm_kernel(9)));
  EXPECT_FALSE(generalize({{{3}, layer_norm_kernel(3)}}).has_value());
  // An integer that is no polynomial of the symbol (here the sample's sizes were mislabeled).
  EXPECT_FALSE(generalize({{{3}, layer_norm_kernel(3)},
                           {{4}, layer_norm_kernel(5)},
                           {{5}, layer_norm_kernel(4)},
                           {{6}, layer_norm_kernel(7)}})
                   .has_value());
}

TEST(KernelIR, AGeneralizedRowKernelRunsAtEverySize) {
  test::CacheDir cache(test::kSharedCompilerCache);
  std::vector<KernelSample> samples;
  for (int64_t t : {3, 4, 5}) samples.push_back({{t}, layer_norm_kernel(t)});
  const std::optional<kir::Kernel> k = generalize(samples);
  ASSERT_TRUE(k.has_value());
  std::ostringstream body;
  render_cpp_rows(body, *k);
  const std::string text = generated_includes() + "\n" + body.str();
  EXPECT_NE(text.find("const int64_t n = s0;"), std::string::npos) << text;
  std::shared_ptr<const Library> lib = load_source(text, k->name);
  auto fn = reinterpret_cast<void (*)(void* const*)>(lib->symbol(k->name));
  const ToolchainStats before = toolchain_stats();
  for (int64_t t : {2, 7, 300, 4096}) {  // row lengths the fit never saw, one compiled kernel
    manual_seed(uint64_t(t));
    const Tensor x = randn({4, t}), b = randn({t}), w = randn({t});
    Tensor y = empty({4, t});
    std::vector<int64_t> sizes{t};
    void* args[] = {x.data_ptr(), b.data_ptr(), w.data_ptr(), y.data_ptr(), sizes.data()};
    fn(args);
    const Tensor want = layer_norm(x + b, {t}, w, Tensor(), 1e-5);
    EXPECT_TRUE(test::close(y, want, 1e-4, 1e-5)) << "row length " << t;
  }
  EXPECT_EQ(toolchain_stats().compiler_runs, before.compiler_runs);
}

}  // namespace
}  // namespace ember::compiler
