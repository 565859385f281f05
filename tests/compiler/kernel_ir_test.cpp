// The kernel IR of elementwise groups: the loads lowering derives (broadcast, strided and
// contiguous inputs as index expressions over the output's coordinates), its printed form,
// and what the C++ renderer makes of it (row loop or flat loop, per-row bases).
#include <gtest/gtest.h>

#include "compiler/kernel_ir.h"
#include "compiler/lower.h"
#include "compiler/pointwise_fusion.h"
#include "compiler/render_cpp.h"
#include "core/shape.h"

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

TEST(KernelIR, SymbolicDomainsPrintTheirSymbols) {
  kir::Kernel k;
  k.name = "k";
  k.domain = {kir::Index::symbol(0), 16};
  k.buffers = {{DType::Float32, k.numel(), false, "x"}, {DType::Float32, k.numel(), true, "y"}};
  kir::Stmt ld;
  ld.out = "x";
  ld.buffer = 0;
  ld.index = k.contiguous_index();
  kir::Stmt st;
  st.kind = kir::Stmt::Kind::Store;
  st.buffer = 1;
  st.index = k.contiguous_index();
  st.args = {"x"};
  k.body = {ld, st};
  EXPECT_EQ(k.numel(), kir::Index::symbol(0) * 16);
  const std::string text = kir::print(k);
  EXPECT_NE(text.find("over [s0, 16]"), std::string::npos) << text;
  EXPECT_NE(text.find("load #0[16*c0 + c1]"), std::string::npos) << text;
  // The C++ renderer takes static sizes only, for now, and says so.
  std::ostringstream os;
  EXPECT_THROW(render_cpp_elementwise(os, k, 0, false, "  "), Error);
}

}  // namespace
}  // namespace ember::compiler
