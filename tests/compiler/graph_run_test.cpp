// made_once (compiler/graph_run.h): which nodes a compiled graph makes once, when it is built,
// instead of at every run. An arange whose value only feeds other nodes is; one that is a
// graph output, viewed by one or written back into an input is not (the caller could write
// into it, or see another run's value), nor any in a graph shared across sizes.
#include <gtest/gtest.h>

#include "compiler/graph_run.h"
#include "graph/graph.h"

namespace ember::compiler {
namespace {

// slots = arange(16); out = eq(slots, pos) [+ the variant's use of slots].
enum class Use { Inner, Output, ViewedOutput, WrittenBack, Dynamic };

std::vector<int> made_once_with(Use use) {
  graph::Graph g;
  const Device cpu{};
  const Shape s{16};
  graph::Value* pos = g.add_input(TensorMeta{{1}, {1}, 0, DType::Int64}, cpu,
                                  graph::InputKind::Argument, "pos");
  graph::Value* buf = g.add_input(TensorMeta{s, {1}, 0, DType::Int64}, cpu,
                                  graph::InputKind::Argument, "buf");
  Attrs a;
  a.shape = s;
  a.value = 0;
  a.value2 = 1;
  a.dtype = DType::Int64;
  a.device = cpu;
  graph::Value* slots = g.add_node(OpId::arange, {}, a, {})->outputs[0];
  std::vector<graph::Value*> outs = {g.add_node(OpId::eq, {slots, pos}, {}, {})->outputs[0]};
  if (use == Use::Output) outs.push_back(slots);
  if (use == Use::ViewedOutput) {
    Attrs v;
    v.shape = Shape{4, 4};
    outs.push_back(g.add_node(OpId::view, {slots}, v, {})->outputs[0]);
  }
  if (use == Use::WrittenBack) g.add_mutation(buf, slots);
  g.set_outputs(outs);
  if (use == Use::Dynamic) g.set_dynamic_sizes(true);
  return made_once(g);
}

TEST(MadeOnce, AnArangeOnlyOtherNodesReadIsMadeOnce) {
  EXPECT_EQ(made_once_with(Use::Inner), std::vector<int>{0});
}

TEST(MadeOnce, AnArangeTheCallerSeesOrThatSizesVaryIsMadeAtEachRun) {
  EXPECT_TRUE(made_once_with(Use::Output).empty());
  EXPECT_TRUE(made_once_with(Use::ViewedOutput).empty());
  EXPECT_TRUE(made_once_with(Use::WrittenBack).empty());
  EXPECT_TRUE(made_once_with(Use::Dynamic).empty());
}

}  // namespace
}  // namespace ember::compiler
