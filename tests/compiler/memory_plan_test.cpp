// The compiler's memory plan: peak bytes of intermediates of the fused plan against eager
// execution of the same graph.
#include <gtest/gtest.h>

#include "capture/capture.h"
#include "compiler/compiled_graph.h"
#include "compiler/compiler_test_util.h"
#include "compiler/memory_plan.h"
#include "compiler/toolchain.h"
#include "ember/autograd.h"

namespace ember {
namespace {

using graph::Graph;
using graph::InputKind;
using graph::Value;

// relu(x) + 1, then * 2, over f32[1000]: eager holds relu's and add's results at once; the
// fused plan holds only the output (plus the two one-element constants).
std::shared_ptr<Graph> chain_graph() { return test::relu_add_mul_graph({1000}); }

TEST(MemoryPlan, EagerPeakCountsLiveIntermediatesAndViewsAreFree) {
  auto g = chain_graph();
  // relu (4000) + the constant (4) + add (4000) alive while add runs.
  EXPECT_EQ(compiler::eager_peak_bytes(*g), 8004);
  // A view of an intermediate costs nothing but keeps its base alive.
  auto v = std::make_shared<Graph>();
  TensorMeta m;
  m.sizes = {10, 10};
  Value* x = v->add_input(m, kCPU, InputKind::Argument, "x");
  Value* e = v->add_node(OpId::exp, {x}, {}, {})->outputs[0];  // 400 bytes
  Attrs t;
  t.dims = {1, 0};
  Value* p = v->add_node(OpId::permute, {e}, t, {})->outputs[0];  // a view of e
  Value* s = v->add_node(OpId::tanh, {x}, {}, {})->outputs[0];     // 400 more, e still alive
  Value* y = v->add_node(OpId::add, {p, s}, {}, {})->outputs[0];  // and 400 for y
  v->set_outputs({y});
  EXPECT_EQ(compiler::eager_peak_bytes(*v), 1200);
}

TEST(MemoryPlan, FusedPlanHoldsOnlyWhatItMaterializes) {
  ASSERT_TRUE(compiler::compiler_available());
  test::CacheDir dir{test::kSharedCompilerCache};
  NoGradGuard no_grad;
  auto cg = test::compile_graph(chain_graph());
  ASSERT_TRUE(cg);
  EXPECT_EQ(cg->kernel_count(), 1u);
  EXPECT_EQ(cg->eager_peak_bytes(), 8004);
  EXPECT_EQ(cg->peak_bytes(), 4008);  // the output and the two constants
}

}  // namespace
}  // namespace ember
