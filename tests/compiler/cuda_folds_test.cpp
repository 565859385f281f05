// What compiled GPU graphs batch and fold (compiler/cuda_folds.h), found in graphs a GPU never
// has to run: a GPT training step under bfloat16 autocast, captured on the CPU, has its
// parameters' casts to bfloat16 (read through views that keep the parameter's layout) and its
// grads' casts back (handed out through views); a hand-made backward has layer_norm_backward
// between the cast of its grad and the add of its dx. tests/cuda runs them on a GPU.
#include <gtest/gtest.h>

#include "capture/capture.h"
#include "capture/capture_test_util.h"
#include "compiler/cuda_folds.h"
#include "compiler/lower.h"
#include "compiler/store_only_changes.h"
#include "ember/autocast.h"
#include "ember/compile.h"
#include "ember/ember.h"

namespace ember::compiler {
namespace {

const Device kGpu{DeviceType::CUDA, 0};

// A backend that keeps the graphs it is given and runs them eagerly.
class GraphKeeper : public capture::Backend {
 public:
  std::string name() const override { return name_; }
  std::shared_ptr<const capture::Runnable> compile(std::shared_ptr<const graph::Graph> g) override {
    graphs.push_back(g);
    return capture::backend("eager").compile(g);
  }
  std::vector<std::shared_ptr<const graph::Graph>> graphs;
  std::string name_ = "keep-graphs-for-cuda-folds";
};

TEST(CudaFolds, AutocastTrainingCastsParametersAndGradsInBatches) {
  auto keeper = std::make_unique<GraphKeeper>();
  GraphKeeper* kept = keeper.get();
  capture::register_backend(std::move(keeper));
  manual_seed(4);
  auto model = std::make_shared<nn::GPT>(test::tiny_gpt());
  CompileOptions o;
  o.backend = kept->name();
  auto loss_fn = compile([model](const Tensor& a, const Tensor& b) { return model->loss(a, b); }, o);
  const Tensor x = randint(0, 11, {2, 8}), y = randint(0, 11, {2, 8});
  Tensor loss;
  {
    EnableGradGuard grad;
    autocast scope(DType::BFloat16);
    loss = loss_fn(x, y);
  }
  loss.backward();
  ASSERT_EQ(kept->graphs.size(), 2u) << "a forward and a backward graph";
  // Every 2-D weight is cast to bfloat16 once in the forward, its grad back in the backward
  // (the two graphs in either order: which one the backend sees first is not fixed).
  int64_t weights = 0;
  for (const Tensor& p : model->parameters()) weights += p.dim() == 2;
  int64_t casts = 0, grads = 0, biased = 0, losses = 0;
  std::vector<const graph::Node*> views;
  for (const auto& g : kept->graphs) {
    // The graphs' tensors are on the CPU, so the CPU's plan (its cast groups are the GPU's too).
    const FusionPlan plan = plan_fusion(*g);
    std::vector<int> at_start;
    for (size_t k = 0; k < plan.groups.size(); ++k) {
      const FusionGroup& grp = plan.groups[k];
      if (const graph::Value* src = parameter_cast(grp)) {
        ++casts;
        at_start.push_back(int(k));
        EXPECT_EQ(src->producer, nullptr) << "a source is a graph input";
        EXPECT_EQ(src->meta.dtype, DType::Float32);
      }
      grads += grad_cast(grp, *g, &views);
    }
    // Matmuls whose bias add goes into the gemm: a bfloat16 product read by the add alone,
    // the bias cast at the start (so there before the matmul), the sum of the product's shape.
    for (const BiasFold& f : bias_folds(*g, plan, at_start)) {
      ++biased;
      const graph::Node& mm = *g->nodes()[size_t(f.node)];
      EXPECT_EQ(mm.op, OpId::matmul);
      EXPECT_EQ(f.sum->meta.dtype, DType::BFloat16);
      EXPECT_EQ(f.sum->meta.sizes, mm.outputs[0]->meta.sizes);
      EXPECT_EQ(f.bias->meta.sizes, Shape{mm.outputs[0]->meta.sizes.back()});
      EXPECT_EQ(plan.groups[size_t(f.add_group)].nodes.size(), 1u);
      EXPECT_EQ(plan.groups[size_t(f.add_group)].nodes[0]->op, OpId::add);
    }
    // The loss's grad over the bfloat16 logits: one group, its inputs the logits [N, C] and
    // the per-row lse, targets and scale [N, 1].
    for (const CrossEntropyGradFold& f : cross_entropy_grad_folds(plan)) {
      ++losses;
      const Shape& ls = f.logits->meta.sizes;
      ASSERT_EQ(ls.size(), 2u);
      EXPECT_EQ(ls[1], test::tiny_gpt().vocab_size);
      EXPECT_EQ(f.logits->meta.dtype, DType::BFloat16);
      EXPECT_EQ(plan.groups[size_t(f.group)].output->meta.sizes, ls);
      EXPECT_EQ(f.lse->meta.sizes, (Shape{ls[0], 1}));
      EXPECT_EQ(f.targets->meta.dtype, DType::Int64);
      EXPECT_EQ(f.scale->meta.dtype, DType::Float32);
    }
    // Without the casts at the start, a fold's bias must be made by an earlier node.
    for (const BiasFold& f : bias_folds(*g, plan, {})) {
      if (!f.bias->producer) continue;
      int made = -1;
      for (size_t i = 0; i < g->nodes().size(); ++i)
        if (g->nodes()[i].get() == f.bias->producer) made = int(i);
      EXPECT_LT(made, f.node) << "a fold's bias is made before its matmul";
    }
  }
  EXPECT_GE(casts, weights);
  EXPECT_GE(grads, weights);
  // Each layer's attention input projection and first MLP layer (the output projections' sums
  // go on into a float32 residual add, a group of three ops).
  EXPECT_GE(biased, 2 * test::tiny_gpt().n_layer);
  EXPECT_EQ(losses, 1);
  // The views after the casts lead to handed-out grads only.
  for (const graph::Node* n : views) EXPECT_EQ(op_info(n->op).kind, OpKind::View);
}

// A bfloat16 model's blocks: each block's two output projections add their bias and then the
// residual stream. In a decode step (one row a projection, the weight read through w.t()) both
// adds go into the gemm, the residual its C operand: the gemm of a few rows rounds the product
// first, as the fused adds see it, and the MLP's first projection takes its gelu too. In a graph
// recorded without grad over more rows the residual add stays a kernel of its own (cuBLASLt
// would round once over the unrounded product); in a graph autograd differentiates it goes into
// the gemm too. The gelu goes in only with few rows (cuBLASLt's is the tanh form).
// The graphs of a bfloat16 GPT's decode step and (with `forward_rows`) of its forward over
// that many positions, captured on the CPU by a GraphKeeper registered as `name`.
GraphKeeper* capture_decode(const std::string& name, const nn::GPTConfig& config, uint64_t seed,
                            int64_t forward_rows = 0) {
  auto keeper = std::make_unique<GraphKeeper>();
  GraphKeeper* kept = keeper.get();
  kept->name_ = name;
  capture::register_backend(std::move(keeper));
  manual_seed(seed);
  auto model = std::make_shared<nn::GPT>(config);
  model->to(DType::BFloat16);
  model->eval();
  NoGradGuard no_grad;
  CompileOptions o;
  o.backend = kept->name();
  auto step = compile([model](const Tensor& x, const Tensor& pos, const std::vector<Tensor>& k,
                              const std::vector<Tensor>& v) {
    return model->decode_step(x, pos, k, v);
  }, o);
  nn::KVCache cache = model->preallocated_cache(1);
  step(zeros({1, 1}, DType::Int64), zeros({1}, DType::Int64), cache.k, cache.v);
  if (forward_rows > 0) {
    auto forward = compile([model](const Tensor& x) { return model->forward(x); }, o);
    forward(zeros({1, forward_rows}, DType::Int64));
  }
  return kept;
}

TEST(CudaFolds, ResidualAddsOfBfloat16ProjectionsGoIntoTheGemm) {
  GraphKeeper* kept =
      capture_decode("keep-graphs-for-residual-folds", test::tiny_gpt(), 5, /*forward_rows=*/8);
  ASSERT_EQ(kept->graphs.size(), 2u);
  // The folds of g's plan: those with a residual, those with the bias alone, those with gelu.
  struct Counts {
    int64_t residual = 0, bias = 0, gelu = 0;
  };
  auto count = [&](const graph::Graph& g) {
    const FusionPlan plan = plan_fusion(g);
    Counts n;
    for (const BiasFold& f : bias_folds(g, plan, {})) {
      const graph::Node& mm = *g.nodes()[size_t(f.node)];
      EXPECT_EQ(f.sum->meta.dtype, DType::BFloat16);
      EXPECT_EQ(f.sum->meta.sizes, mm.outputs[0]->meta.sizes);
      if (f.gelu) {
        ++n.gelu;
        EXPECT_EQ(f.residual, nullptr);
        EXPECT_EQ(f.sum->producer->op, OpId::gelu);
        continue;
      }
      if (!f.residual) {
        ++n.bias;
        continue;
      }
      ++n.residual;
      EXPECT_EQ(f.residual->meta.sizes, mm.outputs[0]->meta.sizes);
      EXPECT_EQ(f.residual->meta.dtype, DType::BFloat16);
      const auto& grp = plan.groups[size_t(f.add_group)].nodes;
      EXPECT_EQ(grp.size(), 2u);
      EXPECT_EQ(grp[0]->op, OpId::add);
      EXPECT_EQ(grp.back()->op, OpId::add);
      EXPECT_EQ(grp.back()->outputs[0], f.sum);
      // The residual exists when the matmul runs.
      int made = -1;
      for (size_t i = 0; i < g.nodes().size(); ++i)
        if (g.nodes()[i].get() == f.residual->producer) made = int(i);
      EXPECT_LT(made, f.node);
    }
    return n;
  };
  const int64_t layers = test::tiny_gpt().n_layer;
  const graph::Graph& decode = *kept->graphs[0];
  const graph::Graph& rows = *kept->graphs[1];
  const Counts one_row = count(decode);
  EXPECT_EQ(one_row.residual, 2 * layers);
  EXPECT_EQ(one_row.bias, layers);  // the attention's input projection
  EXPECT_EQ(one_row.gelu, layers);  // the MLP's first projection
  const Counts inference = count(rows);
  EXPECT_EQ(inference.residual, 0);
  EXPECT_EQ(inference.gelu, 0);  // cuBLASLt's gelu is the tanh form
  EXPECT_GE(inference.bias, layers);
  for (const auto& n : rows.nodes()) n->no_grad = false;  // as a differentiated graph records them
  const Counts training = count(rows);
  EXPECT_EQ(training.residual, 2 * layers);
  EXPECT_EQ(training.gelu, 0);
  EXPECT_GE(training.bias, layers);
}

graph::Value* input(graph::Graph& g, const Shape& sizes, DType t) {
  return g.add_input(TensorMeta{sizes, contiguous_strides(sizes), 0, t}, kGpu,
                     graph::InputKind::Argument, "x");
}

// cast(g16) -> layer_norm_backward -> add(dx, residual), as the GPU's training graphs have it.
TEST(CudaFolds, LayerNormBackwardTakesItsGradsCastAndItsResidualAdd) {
  for (bool residual_first : {false, true})
    for (bool read_elsewhere : {false, true}) {
      graph::Graph g;
      const Shape rows{6, 32}, cols{32}, stats{6, 1};
      graph::Value* g16 = input(g, rows, DType::BFloat16);
      graph::Value* x = input(g, rows, DType::Float32);
      graph::Value* mean = input(g, stats, DType::Float32);
      graph::Value* rstd = input(g, stats, DType::Float32);
      graph::Value* w = input(g, cols, DType::Float32);
      graph::Value* r = input(g, rows, DType::Float32);
      Attrs c;
      c.dtype = DType::Float32;
      graph::Value* g32 = g.add_node(OpId::cast, {g16}, c, {})->outputs[0];
      Attrs a;
      a.shape = cols;
      a.value = 1e-5;
      graph::Node* ln = g.add_node(OpId::layer_norm_backward, {g32, x, mean, rstd, w}, a, {});
      graph::Value* dx = ln->outputs[0];
      graph::Value* sum = g.add_node(OpId::add, residual_first ? std::vector<graph::Value*>{r, dx}
                                                                : std::vector<graph::Value*>{dx, r},
                                     {}, {})->outputs[0];
      std::vector<graph::Value*> outs = {sum, ln->outputs[1], ln->outputs[2]};
      // A grad that something else reads too stays a cast of its own.
      if (read_elsewhere) outs.push_back(g.add_node(OpId::neg, {g32}, {}, {})->outputs[0]);
      g.set_outputs(outs);
      const FusionPlan plan = plan_fusion(g, kGpu);
      const std::vector<LayerNormFold> folds = layer_norm_folds(g, plan);
      ASSERT_EQ(folds.size(), 1u);
      const LayerNormFold& f = folds[0];
      EXPECT_EQ(g.nodes()[size_t(f.node)].get(), ln);
      if (read_elsewhere) {
        EXPECT_EQ(f.cast_group, -1);
        EXPECT_EQ(f.grad, g32);
      } else {
        EXPECT_GE(f.cast_group, 0);
        EXPECT_EQ(f.grad, g16);
      }
      EXPECT_GE(f.add_group, 0);
      EXPECT_EQ(f.residual, r);
      EXPECT_EQ(f.sum, sum);
    }
}

// A decode step's attention: the two cache writes where(put, new, cache), each written into its
// cache storing only the changed slot, then cached_attention over the written caches. The
// attention's kernel takes the writes (one launch, not three) only where nothing else reads the
// written caches in the graph and both writes mark the slots with the same put.
TEST(CudaFolds, ADecodeStepsCacheWritesJoinItsAttention) {
  for (const int variant : {0, 1, 2}) {  // 0: the fold; 1: the cache read elsewhere; 2: two puts
    graph::Graph g;
    auto in = [&](const Shape& sizes, DType dt, const char* name) {
      return g.add_input(TensorMeta{sizes, contiguous_strides(sizes), 0, dt}, kGpu,
                         graph::InputKind::Argument, name);
    };
    graph::Value* k_cache = in({1, 2, 16, 8}, DType::BFloat16, "k_cache");
    graph::Value* v_cache = in({1, 2, 16, 8}, DType::BFloat16, "v_cache");
    graph::Value* put = in({1, 1, 16, 1}, DType::Bool, "put");
    graph::Value* put2 = in({1, 1, 16, 1}, DType::Bool, "put2");
    graph::Value* q = in({1, 2, 1, 8}, DType::BFloat16, "q");
    graph::Value* k_new = in({1, 2, 1, 8}, DType::BFloat16, "k");
    graph::Value* v_new = in({1, 2, 1, 8}, DType::BFloat16, "v");
    graph::Value* pos = in({1}, DType::Int64, "pos");
    auto write = [&](graph::Value* mark, graph::Value* fresh, graph::Value* cache) {
      graph::Value* w = g.add_node(OpId::where, {mark, fresh, cache}, {}, {})->outputs[0];
      return g.add_node(OpId::clone, {w}, {}, {})->outputs[0];
    };
    graph::Value* kw = write(put, k_new, k_cache);
    graph::Value* vw = write(variant == 2 ? put2 : put, v_new, v_cache);
    Attrs a;
    a.value2 = 1 / std::sqrt(8.0);
    graph::Node* att = g.add_node(OpId::cached_attention, {q, kw, vw, pos}, a, {});
    std::vector<graph::Value*> outs = {att->outputs[0]};
    if (variant == 1) outs.push_back(g.add_node(OpId::neg, {kw}, {}, {})->outputs[0]);
    g.set_outputs(outs);
    g.add_mutation(k_cache, kw);
    g.add_mutation(v_cache, vw);
    const FusionPlan plan = plan_fusion(g, kGpu);
    // The writes into the caches, as the compiled graph decides them.
    std::vector<int> write_into(plan.groups.size(), -1);
    std::vector<char> changes_only(plan.groups.size(), 0);
    int groups = 0;
    for (size_t k = 0; k < plan.groups.size(); ++k) {
      const FusionGroup& grp = plan.groups[k];
      graph::Value* cache = grp.output == kw ? k_cache : grp.output == vw ? v_cache : nullptr;
      if (!cache) continue;
      ++groups;
      write_into[k] = cache->input_index;
      kir::Kernel kernel = lower_elementwise(grp, "write");
      const auto at = std::find(grp.inputs.begin(), grp.inputs.end(), cache);
      ASSERT_NE(at, grp.inputs.end());
      changes_only[k] = store_only_changes(kernel, int(at - grp.inputs.begin())) ? 1 : 0;
      EXPECT_TRUE(changes_only[k]);
    }
    ASSERT_EQ(groups, 2);
    const std::vector<AppendFold> folds = append_folds(g, plan, write_into, changes_only);
    if (variant != 0) {
      EXPECT_TRUE(folds.empty()) << "variant " << variant;
      continue;
    }
    ASSERT_EQ(folds.size(), 1u);
    const AppendFold& f = folds[0];
    EXPECT_EQ(g.nodes()[size_t(f.node)].get(), att);
    EXPECT_EQ(plan.groups[size_t(f.k_group)].output, kw);
    EXPECT_EQ(plan.groups[size_t(f.v_group)].output, vw);
    EXPECT_EQ(f.put, put);
    EXPECT_EQ(f.k_new, k_new);
    EXPECT_EQ(f.v_new, v_new);
    EXPECT_EQ(f.k_cache, k_cache);
    EXPECT_EQ(f.v_cache, v_cache);
    // Without the writes stored only where they change (a whole-cache write), no fold.
    std::vector<char> whole(plan.groups.size(), 0);
    EXPECT_TRUE(append_folds(g, plan, write_into, whole).empty());
  }
}

// The same on a GPT's own decode step (captured on the CPU): every layer's two cache
// writes join its cached_attention, reading the slot mask, the new key and the new value
// through the views the step makes of them.
TEST(CudaFolds, AGptDecodeStepsCacheWritesJoinItsAttentions) {
  // Wider than 512, so the gemv takes the layer_norms too.
  nn::GPTConfig config = test::tiny_gpt();
  config.n_embd = 640;
  GraphKeeper* kept = capture_decode("keep-graphs-for-append-folds", config, 6);
  ASSERT_EQ(kept->graphs.size(), 1u);
  const graph::Graph& g = *kept->graphs[0];
  // Captured on the CPU, so planned as there (a GPU plan takes the GPU's values); the cache
  // writes and the attention are grouped alike on both.
  const FusionPlan plan = plan_fusion(g);
  std::vector<int> write_into(plan.groups.size(), -1);
  std::vector<char> changes_only(plan.groups.size(), 0);
  for (const graph::Mutation& m : g.mutations())
    for (size_t k = 0; k < plan.groups.size(); ++k) {
      const FusionGroup& grp = plan.groups[k];
      if (grp.output != m.value || grp.row || grp.gemm) continue;
      write_into[k] = m.target->input_index;
      const auto at = std::find(grp.inputs.begin(), grp.inputs.end(), m.target);
      ASSERT_NE(at, grp.inputs.end());
      kir::Kernel kernel = lower_elementwise(grp, "write");
      changes_only[k] = store_only_changes(kernel, int(at - grp.inputs.begin())) ? 1 : 0;
    }
  const int64_t layers = config.n_layer;
  EXPECT_EQ(std::count(changes_only.begin(), changes_only.end(), 1), 2 * layers);
  const std::vector<AppendFold> folds = append_folds(g, plan, write_into, changes_only);
  ASSERT_EQ(int64_t(folds.size()), layers);
  for (const AppendFold& f : folds) {
    EXPECT_EQ(g.nodes()[size_t(f.node)]->op, OpId::cached_attention);
    EXPECT_EQ(f.put->meta.dtype, DType::Bool);
    EXPECT_EQ(f.k_new->meta.sizes.size(), 4u);
    EXPECT_NE(f.k_cache, f.v_cache);
  }
  // Each layer's two layer_norms join the gemvs after them (the attention's input projection
  // and the MLP's first layer), and ln_f the logits' product, a fold without a bias: the
  // step's one graph output.
  int64_t with_ln = 0, without_bias = 0;
  for (const BiasFold& f : bias_folds(g, plan, {})) {
    if (f.ln_node < 0) continue;
    ++with_ln;
    const graph::Node& l = *g.nodes()[size_t(f.ln_node)];
    EXPECT_EQ(l.op, OpId::layer_norm);
    EXPECT_EQ(l.outputs[0], g.nodes()[size_t(f.node)]->inputs[0]);
    EXPECT_EQ(f.ln_x, l.inputs[0]);
    EXPECT_EQ(f.residual, nullptr);
    if (!f.bias) {
      ++without_bias;
      EXPECT_EQ(f.add_group, -1);
      EXPECT_FALSE(f.gelu);
      EXPECT_EQ(f.sum, g.nodes()[size_t(f.node)]->outputs[0]);
      ASSERT_EQ(g.outputs().size(), 1u);
      EXPECT_EQ(f.sum, g.outputs()[0]);
    }
  }
  EXPECT_EQ(with_ln, 2 * layers + 1);
  EXPECT_EQ(without_bias, 1);
  // The token and position embeddings and their add: one fold of two lookups.
  const std::vector<EmbeddingFold> embeddings = embedding_folds(g, plan);
  ASSERT_EQ(embeddings.size(), 1u);
  EXPECT_EQ(embeddings[0].nodes.size(), 3u);  // two index_selects and the token rows' view
}

// A GPT's embeddings as captured: index_select(wpe, pos), index_select(wte, view(idx)) viewed as
// [1, 1, C], and their add. The fold takes both lookups (and the view after one) where nothing
// else reads them; not where a lookup is read elsewhere, nor for a lookup along dim 1.
TEST(CudaFolds, EmbeddingLookupsSummedAreOneFold) {
  for (const int variant : {0, 1, 2}) {  // 0: the fold; 1: a lookup read elsewhere; 2: dim 1
    graph::Graph g;
    graph::Value* idx = input(g, {1, 1}, DType::Int64);
    graph::Value* pos = input(g, {1}, DType::Int64);
    graph::Value* wte = input(g, {65, 64}, DType::BFloat16);
    graph::Value* wpe = input(g, {32, 64}, DType::BFloat16);
    Attrs rows;
    rows.dim = 0;
    graph::Node* pe = g.add_node(OpId::index_select, {wpe, pos}, rows, {});
    Attrs flat;
    flat.shape = Shape{1};
    graph::Value* ids = g.add_node(OpId::view, {idx}, flat, {})->outputs[0];
    Attrs te_dim;
    te_dim.dim = variant == 2 ? 1 : 0;
    graph::Value* te_src = variant == 2 ? input(g, {64, 65}, DType::BFloat16) : wte;
    graph::Node* te = g.add_node(OpId::index_select, {te_src, ids}, te_dim, {});
    Attrs shaped;
    shaped.shape = variant == 2 ? Shape{1, 64, 1} : Shape{1, 1, 64};
    graph::Node* tv = g.add_node(OpId::view, {te->outputs[0]}, shaped, {});
    graph::Node* sum = g.add_node(OpId::add, {tv->outputs[0], pe->outputs[0]}, {}, {});
    // Read as the decode step reads it: by a layer_norm, and kept (the residual stream).
    Attrs ln;
    ln.shape = Shape{64};
    ln.value = 1e-5;
    graph::Value* lw = input(g, {64}, DType::BFloat16);
    graph::Value* lb = input(g, {64}, DType::BFloat16);
    std::vector<graph::Value*> outs = {
        g.add_node(OpId::layer_norm, {sum->outputs[0], lw, lb}, ln, {})->outputs[0],
        sum->outputs[0]};
    if (variant == 1) outs.push_back(g.add_node(OpId::exp, {pe->outputs[0]}, {}, {})->outputs[0]);
    g.set_outputs(outs);
    const FusionPlan plan = plan_fusion(g, kGpu);
    const std::vector<EmbeddingFold> folds = embedding_folds(g, plan);
    if (variant != 0) {
      EXPECT_TRUE(folds.empty()) << "variant " << variant;
      continue;
    }
    ASSERT_EQ(folds.size(), 1u);
    const EmbeddingFold& f = folds[0];
    EXPECT_EQ(f.a_weight, wte);
    EXPECT_EQ(f.a_index, ids);
    EXPECT_EQ(f.b_weight, wpe);
    EXPECT_EQ(f.b_index, pos);
    std::vector<int> nodes = f.nodes;
    std::sort(nodes.begin(), nodes.end());
    const auto at = [&](const graph::Node* n) {
      for (size_t i = 0; i < g.nodes().size(); ++i)
        if (g.nodes()[i].get() == n) return int(i);
      return -1;
    };
    std::vector<int> want = {at(pe), at(te), at(tv)};
    std::sort(want.begin(), want.end());
    EXPECT_EQ(nodes, want);
  }
}

}  // namespace
}  // namespace ember::compiler
