// store_only_changes: a decode step's cache write, where(slot == pos, new, cache) written into
// the cache, becomes a store of the new values where the condition holds, reading nothing of
// the cache; other stored values are left as they are.
#include "compiler/store_only_changes.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <sstream>

#include "compiler/lower.h"
#include "compiler/pointwise_fusion.h"
#include "compiler/render_cuda.h"
#include "compiler/toolchain_cuda.h"

namespace ember::compiler {
namespace {

struct CacheWrite {
  graph::Graph g;
  graph::Value *here = nullptr, *fresh = nullptr, *cache = nullptr;
  explicit CacheWrite(bool kept_when_true) {
    auto in = [&](const Shape& sizes, DType dt, const char* name) {
      return g.add_input(TensorMeta{sizes, contiguous_strides(sizes), 0, dt},
                         Device{DeviceType::CUDA, 0}, graph::InputKind::Argument, name);
    };
    here = in({1, 1, 16, 1}, DType::Bool, "here");
    fresh = in({1, 2, 1, 8}, DType::BFloat16, "k");
    cache = in({1, 2, 16, 8}, DType::BFloat16, "cache");
    graph::Value* picked =
        g.add_node(OpId::where, {here, kept_when_true ? cache : fresh, kept_when_true ? fresh : cache},
                   {}, {})->outputs[0];
    graph::Value* copied = g.add_node(OpId::clone, {picked}, {}, {})->outputs[0];
    g.set_outputs({copied});
  }
  kir::Kernel lowered() const {
    const FusionPlan plan = plan_fusion(g, Device{DeviceType::CUDA, 0});
    EXPECT_EQ(plan.groups.size(), 1u);
    return lower_elementwise(plan.groups.at(0), "cache_write");
  }
  // The kernel buffer of graph input v (the group's inputs come first, in order).
  int buffer_of(const graph::Value* v) const {
    const FusionPlan plan = plan_fusion(g, Device{DeviceType::CUDA, 0});
    const auto& ins = plan.groups.at(0).inputs;
    return int(std::find(ins.begin(), ins.end(), v) - ins.begin());
  }
};

bool loads(const kir::Kernel& k, int buffer) {
  return std::any_of(k.body.begin(), k.body.end(), [&](const kir::Stmt& s) {
    return s.kind == kir::Stmt::Kind::Load && s.buffer == buffer;
  });
}

TEST(StoreOnlyChanges, ACacheWriteStoresTheNewSlotOnly) {
  const CacheWrite w(/*kept_when_true=*/false);
  kir::Kernel k = w.lowered();
  const int cache = w.buffer_of(w.cache);
  ASSERT_TRUE(loads(k, cache)) << kir::print(k);
  ASSERT_TRUE(store_only_changes(k, cache)) << kir::print(k);
  EXPECT_FALSE(loads(k, cache)) << kir::print(k);
  const kir::Stmt& store = k.body.back();
  ASSERT_EQ(store.kind, kir::Stmt::Kind::Store);
  EXPECT_FALSE(store.store_if.empty());
  EXPECT_NE(kir::print(k).find(" where "), std::string::npos) << kir::print(k);
  EXPECT_EQ(std::count_if(k.body.begin(), k.body.end(),
                          [](const kir::Stmt& s) { return s.kind == kir::Stmt::Kind::Call; }),
            0)
      << kir::print(k);
  std::ostringstream os;
  os << cuda_prelude();
  const CudaLaunch l = render_cuda_kernel(os, k);
  const std::string src = os.str();
  EXPECT_EQ(l.vector, 1) << src;  // a vector store would write the kept elements too
  EXPECT_NE(src.find("if (" + store.store_if + ") out[i] = "), std::string::npos) << src;
  if (nvrtc_available()) {
    EXPECT_FALSE(nvrtc_compile(src, "sm_90a").empty()) << src;
  }
}

TEST(StoreOnlyChanges, OtherStoresStayWhole) {
  {  // the cache kept where the condition holds: not a write of the changed elements
    const CacheWrite w(/*kept_when_true=*/true);
    kir::Kernel k = w.lowered();
    const std::string before = kir::print(k);
    EXPECT_FALSE(store_only_changes(k, w.buffer_of(w.cache)));
    EXPECT_EQ(kir::print(k), before);
  }
  {  // written into another buffer than the one the where keeps
    const CacheWrite w(/*kept_when_true=*/false);
    kir::Kernel k = w.lowered();
    EXPECT_FALSE(store_only_changes(k, w.buffer_of(w.fresh)));
    EXPECT_FALSE(store_only_changes(k, w.buffer_of(w.here)));
    EXPECT_TRUE(loads(k, w.buffer_of(w.cache)));
  }
}

}  // namespace
}  // namespace ember::compiler
