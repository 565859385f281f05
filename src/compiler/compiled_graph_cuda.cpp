// Running a graph compiled for a GPU (compiled_graph_cuda.h). Each fused kernel's buffers are
// checked against the captured layout (its index math is specialized to it); a buffer laid out
// otherwise runs that group's nodes eagerly instead. Intermediates are released after their
// last reader, as eager execution frees them.
#include "compiler/compiled_graph_cuda.h"

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdio>
#include <future>
#include <map>
#include <optional>
#include <thread>

#include "compiler/codegen_util.h"
#include "compiler/cuda_graphed.h"
#include "core/env.h"
#include "compiler/cuda_folds.h"
#include "compiler/families.h"
#include "compiler/lower.h"
#include "compiler/store_only_changes.h"
#include "compiler/toolchain.h"
#include "compiler/toolchain_cuda.h"
#include "core/logs.h"
#include "core/make_tensor.h"
#include "core/shape.h"
#include "dispatch/op_profile.h"
#include "ember/autograd.h"
#include "ember/ops.h"
#include "graph/graph_util.h"
#include "kernels/cached_attention_append.h"
#include "kernels/cuda_graph.h"
#include "kernels/cross_entropy_grad.h"
#include "kernels/embedding_add.h"
#include "kernels/gemm_bias.h"
#include "kernels/layer_norm_grad.h"
#include "kernels/multi_tensor.h"

namespace ember::compiler {

namespace {

// Two embedding lookups summed run as one kernel (EmbeddingFold), unless EMBER_EMBEDDING_FOLD=0.
// Read as each graph is compiled, as is the switch below.
bool embedding_fold_on() { return env_switch("EMBER_EMBEDDING_FOLD", true); }
// A layer_norm joins the gemv of a product without a bias (a GPT's ln_f and logits: a BiasFold
// with no bias), unless EMBER_LN_LOGITS_FOLD=0.
bool plain_layer_norm_fold_on() { return env_switch("EMBER_LN_LOGITS_FOLD", true); }

void log_decision(const std::string& text) {
  static const bool on = log_category_enabled("compiler");
  if (on) std::fprintf(stderr, "[ember:compiler] %s\n", text.c_str());
}

void log_side_steps(int count) {
  if (count > 0)
    log_decision(std::to_string(count) + " step(s) recorded on a side branch beside the others");
}

// The EMBER_PROFILE_OPS row of a generated kernel: its kind, its ops and its output's type.
std::string profile_key(const FusionGroup& g) {
  return (g.row ? "generated row " : "generated pointwise ") + group_ops_str(g);
}

// Runs `launch` on `device`; under EMBER_PROFILE_OPS, timed by events as the row key() names
// (built only then). `launch` returns false when it launched nothing, which is not recorded.
template <class Launch, class Key>
bool profiled(Device device, Launch launch, Key key) {
  if (!op_profile::enabled()) return launch();
  const op_profile::GpuMark mark = op_profile::gpu_begin(device);
  const bool ran = launch();
  if (ran)
    op_profile::gpu_end(mark, key(), device);
  else
    op_profile::gpu_cancel(mark);
  return ran;
}

}  // namespace

bool cuda_compilable(const graph::Graph& g, Device* device, std::string* why) {
  bool found = false;
  for (const auto& v : g.values()) {
    if (v->device.type != DeviceType::CUDA) continue;
    if (found && v->device != *device) {
      *why = "its tensors are on more than one GPU";
      return false;
    }
    *device = v->device;
    found = true;
  }
  if (!found) {
    *why = "it has no GPU tensor";
    return false;
  }
  if (!nvrtc_available()) {
    *why = "NVRTC (libnvrtc.so) cannot be loaded";
    return false;
  }
  return true;
}

CudaCompiledGraph::CudaCompiledGraph(std::shared_ptr<const graph::Graph> g, Device device)
    : g_(std::move(g)), device_(device) {
  // Random nodes run through the dispatcher with this run's draws, reserved in node order at
  // the start of each run (Graph::reserve_draws), so the masks equal eager's.
  draws_ = graph::draws_random(*g_);
  plan_ = plan_fusion(*g_, device_);
  std::vector<const graph::Node*> views;
  for (size_t k = 0; k < plan_.groups.size(); ++k) {
    if (const graph::Value* src = parameter_cast(plan_.groups[k])) {
      first_casts_.push_back(int(k));
      first_sources_.push_back(src);
    }
    if (grad_cast(plan_.groups[k], *g_, &views)) {
      last_casts_.push_back(int(k));
      last_sources_.push_back(plan_.groups[k].inputs[0]);
    }
  }
  if (first_casts_.size() < 2) {
    first_casts_.clear();
    first_sources_.clear();
  }
  if (last_casts_.size() < 2) {
    last_casts_.clear();
    last_sources_.clear();
    views.clear();
  }
  const auto& all_nodes = g_->nodes();
  for (size_t i = 0; i < all_nodes.size(); ++i)
    if (std::find(views.begin(), views.end(), all_nodes[i].get()) != views.end())
      tail_views_.push_back(int(i));
  if (!first_casts_.empty()) steps_.push_back({-1, nullptr, -1, 1});
  folds_ = layer_norm_folds(*g_, plan_);
  fold_of_node_.assign(g_->nodes().size(), -1);
  for (size_t f = 0; f < folds_.size(); ++f) fold_of_node_[size_t(folds_[f].node)] = int(f);
  ce_folds_ = cross_entropy_grad_folds(plan_);
  ce_fold_of_group_.assign(plan_.groups.size(), -1);
  for (size_t f = 0; f < ce_folds_.size(); ++f) ce_fold_of_group_[size_t(ce_folds_[f].group)] = int(f);
  bias_folds_ = bias_folds(*g_, plan_, first_casts_);
  if (!plain_layer_norm_fold_on())
    std::erase_if(bias_folds_, [](const BiasFold& f) { return !f.bias; });
  bias_fold_of_node_.assign(g_->nodes().size(), -1);
  for (size_t f = 0; f < bias_folds_.size(); ++f)
    bias_fold_of_node_[size_t(bias_folds_[f].node)] = int(f);
  // Filled by plan_append_folds; sized here, as a graph without fused groups never reaches it
  // but its steps still look their nodes up.
  append_fold_of_node_.assign(g_->nodes().size(), -1);
  append_fold_of_group_.assign(plan_.groups.size(), -1);
  // Groups run by a batched-casts step, a folded layer_norm_backward or a matmul's epilogue.
  auto batched = [&](int k) {
    for (const LayerNormFold& f : folds_)
      if (f.cast_group == k || f.add_group == k) return true;
    for (const BiasFold& f : bias_folds_)
      if (f.add_group == k) return true;
    return std::find(first_casts_.begin(), first_casts_.end(), k) != first_casts_.end() ||
           std::find(last_casts_.begin(), last_casts_.end(), k) != last_casts_.end();
  };
  const auto& nodes = g_->nodes();
  // layer_norms the gemv of a bias fold computes: no step of their own.
  std::vector<char> in_gemv(nodes.size(), 0);
  for (const BiasFold& f : bias_folds_)
    if (f.ln_node >= 0) in_gemv[size_t(f.ln_node)] = 1;
  // Embedding lookups summed in one launch: the lookups' nodes take no step of their own.
  embedding_fold_of_group_.assign(plan_.groups.size(), -1);
  std::vector<char> in_embedding(nodes.size(), 0);
  if (embedding_fold_on()) embedding_folds_ = embedding_folds(*g_, plan_);
  for (size_t f = 0; f < embedding_folds_.size(); ++f) {
    embedding_fold_of_group_[size_t(embedding_folds_[f].group)] = int(f);
    for (int i : embedding_folds_[f].nodes) in_embedding[size_t(i)] = 1;
  }
  // Nodes whose value is the same at every run: made here, once (a decode step's slot indices).
  std::vector<char> once(nodes.size(), 0);
  for (int i : made_once(*g_)) once[size_t(i)] = 1;
  for (size_t i = 0; i < nodes.size(); ++i) {
    const int k = plan_.group_of_node[i];
    if (k < 0 && once[i]) {
      std::vector<Tensor> env(g_->values().size());
      run_node(*nodes[i], env);
      const int id = nodes[i]->outputs[0]->id;
      constants_.emplace_back(id, env[size_t(id)]);
    } else if (k < 0) {
      if (std::find(tail_views_.begin(), tail_views_.end(), int(i)) == tail_views_.end() &&
          !in_gemv[i] && !in_embedding[i])
        steps_.push_back({-1, nodes[i].get(), int(i)});
    }
    else if (nodes[i]->outputs[0] == plan_.groups[size_t(k)].output && !batched(k))
      steps_.push_back({k, nullptr});
  }
  if (!last_casts_.empty()) steps_.push_back({-1, nullptr, -1, 2});
  hoist_keep_steps();
  // Last readers: intermediates are released as early as eager code would release them.
  std::vector<int> last(g_->values().size(), -1);
  for (size_t s = 0; s < steps_.size(); ++s)
    for (const graph::Value* v : step_reads(s)) last[size_t(v->id)] = int(s);
  for (const graph::Value* v : g_->outputs()) last[size_t(v->id)] = INT_MAX;
  plan_writes_into_inputs(last);
  for (const graph::Mutation& m : g_->mutations()) {
    last[size_t(m.value->id)] = INT_MAX;
    if (m.value != m.target) last[size_t(m.target->id)] = INT_MAX;  // kept for the write-back
  }
  release_after_.resize(steps_.size());
  for (size_t id = 0; id < last.size(); ++id)
    if (last[id] >= 0 && last[id] != INT_MAX) release_after_[size_t(last[id])].push_back(int(id));
  const auto eager = std::count_if(steps_.begin(), steps_.end(),
                                   [](const Step& st) { return st.node != nullptr; });
  auto folds_with = [&](auto pred) {
    return std::to_string(std::count_if(bias_folds_.begin(), bias_folds_.end(), pred));
  };
  log_decision(std::to_string(plan_.groups.size()) + " fused CUDA kernel(s) (" +
               std::to_string(first_casts_.size() + last_casts_.size()) +
               " parameter and grad casts batched), " + std::to_string(eager) +
               " eager node(s) (" + std::to_string(folds_.size()) +
               " layer_norm_backward with a cast or add folded in, " +
               folds_with([](const BiasFold& f) { return f.bias; }) +
               " matmul(s) with the bias add (and " +
               folds_with([](const BiasFold& f) { return f.residual; }) + " with a residual add, " +
               folds_with([](const BiasFold& f) { return f.gelu; }) + " with a gelu) in the gemm, " +
               folds_with([](const BiasFold& f) { return f.ln_node >= 0; }) +
               " layer_norm(s) in a gemv, " +
               std::to_string(ce_folds_.size()) + " cross_entropy grad(s) by their own kernel), " +
               std::to_string(constants_.size()) + " value(s) made once, not at each run");
  if (plan_.groups.empty()) {
    log_side_steps(plan_side_steps());
    return;
  }
  lowered_.reserve(plan_.groups.size());
  for (size_t k = 0; k < plan_.groups.size(); ++k) {
    const FusionGroup& grp = plan_.groups[k];
    const std::string name = "kernel_" + std::to_string(k);
    lowered_.push_back(grp.row ? lower_rows(grp, name) : lower_elementwise(grp, name));
  }
  changes_only_.assign(plan_.groups.size(), 0);
  for (size_t k = 0; k < plan_.groups.size(); ++k) {
    if (write_into_[k] < 0) continue;
    const auto& ins = plan_.groups[k].inputs;
    const graph::Value* t = g_->inputs()[size_t(write_into_[k])];
    const auto at = std::find(ins.begin(), ins.end(), t);
    if (at != ins.end())
      changes_only_[k] = store_only_changes(lowered_[k], int(at - ins.begin())) ? 1 : 0;
  }
  if (const auto n = std::count(changes_only_.begin(), changes_only_.end(), 1); n > 0)
    log_decision(std::to_string(n) +
                 " kernel(s) writing into the input they change store only the changed elements");
  plan_append_folds();
  log_side_steps(plan_side_steps());
  dims_ = input_dims(*g_);
  sms_ = device_code::multiprocessors(device_.index);
  build(/*defer_first=*/g_->dynamic_sizes());
}

void CudaCompiledGraph::build(bool defer_first) {
  const auto t0 = std::chrono::steady_clock::now();
  FamilyLookup family = family_kernels(lowered_, dims_, g_->dynamic_sizes(), g_->static_dims());
  if (!family.kernels && defer_first && family.first) {
    deferred_.defer();
    log_decision("the first graph of its form at varying sizes: its first call runs through "
                 "eager interpretation, its kernels are built with the next size's");
    return;
  }
  shared_ = family.kernels.has_value();
  if (shared_)
    log_decision("kernels over symbolic sizes shared with this program's graphs at other sizes");
  const std::vector<kir::Kernel>& kernels = shared_ ? *family.kernels : lowered_;
  symbols_.clear();
  launches_.clear();
  kernels_.clear();
  modules_.clear();
  for (const kir::Kernel& k : kernels) symbols_.push_back(k.size_symbols());
  // Kernels that differ only in the names of their values (a model's layers) are one function.
  std::map<std::string, size_t> distinct;  // canonical text -> index in `texts`
  std::vector<std::string> texts, names;
  std::vector<size_t> function_of(kernels.size());
  for (size_t k = 0; k < kernels.size(); ++k) {
    kir::Kernel named = kernels[k];
    named.name = "ember_kernel_fn";
    std::ostringstream os;
    launches_.push_back(render_cuda_kernel(os, named));
    const std::string text = os.str();
    const std::string canonical = canonical_names(kir::strip_comments(text));
    auto [it, fresh] = distinct.emplace(canonical, texts.size());
    if (fresh) {
      // Named by its content: the same kernel has the same name in every graph.
      names.push_back("ember_" + cache_entry::key(canonical).substr(0, 16));
      texts.push_back(replace_all(text, "ember_kernel_fn", names.back()));
    }
    function_of[k] = it->second;
  }
  // The distinct kernels in modules built side by side (NVRTC builds one program per thread),
  // a few kernels each at least.
  const size_t threads = std::max<size_t>(1, std::thread::hardware_concurrency());
  const size_t modules = std::clamp<size_t>((texts.size() + 3) / 4, 1, threads);
  std::vector<std::string> sources(modules, cuda_prelude());
  std::vector<size_t> module_of(texts.size());
  for (size_t u = 0; u < texts.size(); ++u) {
    module_of[u] = u % modules;
    sources[u % modules] += texts[u];
  }
  std::vector<std::future<std::shared_ptr<const device_code::Module>>> built;
  for (const std::string& src : sources)
    built.push_back(std::async(std::launch::async, [&src, d = device_.index] {
      return load_cuda_source(src, d);
    }));
  for (auto& f : built) modules_.push_back(f.get());
  for (size_t k = 0; k < kernels.size(); ++k) {
    const size_t u = function_of[k];
    kernels_.push_back(modules_[module_of[u]]->kernel(names[u]));
  }
  static const bool output_code = log_category_enabled("output_code");
  if (output_code)
    for (const std::string& src : sources) std::fprintf(stderr, "[ember:output_code]\n%s\n", src.c_str());
  const double s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  deferred_.built();
  log_decision(std::to_string(kernels.size()) + " CUDA kernel(s), " +
               std::to_string(texts.size()) + " distinct, in " + std::to_string(modules) +
               " module(s), built or loaded in " + std::to_string(s) + " s");
}

void CudaCompiledGraph::run_group_eagerly(const FusionGroup& grp, std::vector<Tensor>& env) const {
  for (const graph::Node* n : grp.nodes) run_node(*n, env);
}

void CudaCompiledGraph::run_node(const graph::Node& n, std::vector<Tensor>& env,
                                 const RandomRange* draws) const {
  if (!run_captured_view(n, env)) dispatch_node(n, env, draws);
}

std::vector<const graph::Value*> CudaCompiledGraph::fold_reads(const LayerNormFold& f) const {
  const graph::Node& n = *g_->nodes()[size_t(f.node)];
  std::vector<const graph::Value*> r = {f.grad, n.inputs[1], n.inputs[2], n.inputs[3],
                                        n.inputs[4]};
  if (f.residual) r.push_back(f.residual);
  return r;
}

void CudaCompiledGraph::run_fold(const LayerNormFold& f, std::vector<Tensor>& env,
                                 cuda_graph::SideBranch* side,
                                 std::vector<Tensor>* side_reads) const {
  const graph::Node& n = *g_->nodes()[size_t(f.node)];
  auto at = [&](const graph::Value* v) -> const Tensor& { return env[size_t(v->id)]; };
  const Tensor& x = at(n.inputs[1]);
  const Tensor& w = at(n.inputs[4]);
  TensorOptions o(DType::Float32);
  o.device = device_;
  Tensor dx = empty(x.sizes(), o), dw = empty(w.sizes(), o), db = empty(w.sizes(), o);
  layer_norm_grad::FoldLauncher defer;  // made only where there is a branch to launch on
  if (side)
    defer = [&](const Tensor& partials, const std::function<void()>& launch) {
      side_reads->push_back(partials);
      side->run(launch);
    };
  const bool done = profiled(
      device_,
      [&] {
        return layer_norm_grad::backward_fused(at(f.grad), x, at(n.inputs[2]), at(n.inputs[3]),
                                               w, f.residual ? at(f.residual) : Tensor(), dx,
                                               dw, db, side ? &defer : nullptr);
      },
      [&] {
        return std::string("layer_norm_backward") + (f.cast_group >= 0 ? " + grad cast" : "") +
               (f.add_group >= 0 ? " + residual add" : "") + " " + x.shape_str();
      });
  if (!done) {  // the kernel does not take these tensors: the plan's steps, one by one
    if (f.cast_group >= 0) run_kernel(f.cast_group, env);
    run_node(n, env);
    if (f.add_group >= 0) run_kernel(f.add_group, env);
    return;
  }
  env[size_t((f.sum ? f.sum : n.outputs[0])->id)] = std::move(dx);
  env[size_t(n.outputs[1]->id)] = std::move(dw);
  env[size_t(n.outputs[2]->id)] = std::move(db);
}

void CudaCompiledGraph::run_bias_fold(const BiasFold& f, std::vector<Tensor>& env) const {
  const graph::Node& n = *g_->nodes()[size_t(f.node)];
  const Tensor& b = env[size_t(n.inputs[1]->id)];
  const Tensor residual = f.residual ? env[size_t(f.residual->id)] : Tensor();
  // One gemm of `a` (with the layer_norm `ln` before it, when given) into a new sum; false
  // (nothing run) where gemm_bias does not take the tensors.
  auto gemm = [&](const Tensor& a, const gemm_bias::LayerNormIn* ln) {
    if (!a.defined() || !b.defined() || a.dim() < 2 || b.dim() != 2 ||
        (f.residual && !residual.defined()))
      return false;
    Shape sizes = a.sizes();
    sizes.back() = b.sizes()[1];
    TensorOptions o(f.sum->meta.dtype);
    o.device = device_;
    Tensor out = empty(sizes, o);
    const bool done = profiled(
        device_,
        [&] {
          return gemm_bias::run(a, b, f.bias ? env[size_t(f.bias->id)] : Tensor(), out, residual,
                                f.gelu, ln);
        },
        [&] {
          return std::string(ln ? "layer_norm + " : "") +
                 (f.residual ? "matmul + bias + residual "
                  : f.gelu   ? "matmul + bias + gelu "
                  : f.bias   ? "matmul + bias "
                             : "matmul ") +
                 a.shape_str() + ", " + b.shape_str();
        });
    if (done) env[size_t(f.sum->id)] = std::move(out);
    return done;
  };
  if (f.ln_node >= 0) {  // the layer_norm in the gemv's blocks, else its own step first
    const graph::Node& l = *g_->nodes()[size_t(f.ln_node)];
    const gemm_bias::LayerNormIn ln{env[size_t(l.inputs[1]->id)], env[size_t(l.inputs[2]->id)],
                                    l.attrs.value};
    if (gemm(env[size_t(f.ln_x->id)], &ln)) return;
    run_node(l, env);
  }
  if (!gemm(env[size_t(n.inputs[0]->id)], nullptr)) {  // the plan's steps
    run_node(n, env);
    if (f.add_group >= 0) run_kernel(f.add_group, env);
  }
}

bool CudaCompiledGraph::run_cross_entropy_grad(const CrossEntropyGradFold& f,
                                               std::vector<Tensor>& env) const {
  auto at = [&](const graph::Value* v) -> const Tensor& { return env[size_t(v->id)]; };
  const graph::Value* o = plan_.groups[size_t(f.group)].output;
  const Tensor& logits = at(f.logits);
  if (!logits.defined() || logits.sizes() != o->meta.sizes) return false;
  TensorOptions opts(o->meta.dtype);
  opts.device = device_;
  Tensor out = empty(o->meta.sizes, opts);
  const bool done = profiled(
      device_,
      [&] { return cross_entropy_grad::run(logits, at(f.lse), at(f.targets), at(f.scale), out); },
      [&] { return "cross_entropy grad " + logits.shape_str(); });
  if (done) env[size_t(o->id)] = std::move(out);
  return done;
}

void CudaCompiledGraph::plan_append_folds() {
  // The tables it fills were sized, all -1, with the other folds' (the constructor).
  std::vector<AppendFold> found = append_folds(*g_, plan_, write_into_, changes_only_);
  for (const AppendFold& a : found) {
    // The attention's step: what the writes read is read there now, and released after it.
    size_t at = 0;
    while (at < steps_.size() && steps_[at].index != a.node) ++at;
    if (at == steps_.size()) continue;
    const int f = int(append_folds_.size());
    append_folds_.push_back(a);
    append_fold_of_node_[size_t(a.node)] = f;
    append_fold_of_group_[size_t(a.k_group)] = f;
    append_fold_of_group_[size_t(a.v_group)] = f;
    for (const graph::Value* v : {a.put, a.k_new, a.v_new})
      for (size_t s = 0; s < at && s < release_after_.size(); ++s) {
        auto& ids = release_after_[s];
        const auto it = std::find(ids.begin(), ids.end(), v->id);
        if (it == ids.end()) continue;
        ids.erase(it);
        release_after_[at].push_back(v->id);
      }
  }
  if (!append_folds_.empty())
    log_decision(std::to_string(append_folds_.size()) +
                 " cached_attention(s) writing the cache slots of the two writes before them");
}

void CudaCompiledGraph::run_append_fold(const AppendFold& f, std::vector<Tensor>& env) const {
  const graph::Node& n = *g_->nodes()[size_t(f.node)];
  auto at = [&](const graph::Value* v) -> const Tensor& { return env[size_t(v->id)]; };
  const Tensor &kc = at(f.k_cache), &vc = at(f.v_cache);
  // The writes' groups bound their results to the caches, unwritten (run_kernel).
  auto bound = [&](const graph::Value* result, const Tensor& cache) {
    const Tensor& t = at(result);
    return t.defined() && cache.defined() && t.impl()->storage == cache.impl()->storage &&
           t.impl()->offset == cache.impl()->offset && t.sizes() == cache.sizes();
  };
  Tensor out;
  if (bound(n.inputs[1], kc) && bound(n.inputs[2], vc) && at(n.inputs[0]).defined() &&
      at(n.inputs[3]).defined() && at(f.put).defined() && at(f.k_new).defined() &&
      at(f.v_new).defined()) {
    TensorOptions o(n.outputs[0]->meta.dtype);
    o.device = device_;
    out = empty(n.outputs[0]->meta.sizes, o);
  }
  const bool done = out.defined() && profiled(
      device_,
      [&] {
        return cached_attention_append::run(at(n.inputs[0]), kc, vc, at(n.inputs[3]), at(f.put),
                                            at(f.k_new), at(f.v_new), n.attrs.value2, out);
      },
      [&] { return std::string("cached_attention + cache writes ") + kc.shape_str(); });
  if (done) {
    env[size_t(n.outputs[0]->id)] = std::move(out);
    return;
  }
  // The plan's steps: the two writes, then the op.
  launch_group(f.k_group, env);
  launch_group(f.v_group, env);
  run_node(n, env);
}

void CudaCompiledGraph::run_embedding_fold(const EmbeddingFold& f,
                                           std::vector<Tensor>& env) const {
  auto at = [&](const graph::Value* v) -> const Tensor& { return env[size_t(v->id)]; };
  const graph::Value* sum = plan_.groups[size_t(f.group)].output;
  TensorOptions o(sum->meta.dtype);
  o.device = device_;
  Tensor out = empty(sum->meta.sizes, o);
  const bool done = profiled(
      device_,
      [&] {
        return embedding_add::run(at(f.a_weight), at(f.a_index), at(f.b_weight), at(f.b_index),
                                  out);
      },
      [&] { return std::string("index_select x2 + add ") + out.shape_str(); });
  if (done) {
    env[size_t(sum->id)] = std::move(out);
    return;
  }
  // The plan's steps: the lookups (and their views), in graph order, then the add's kernel.
  std::vector<int> nodes = f.nodes;
  std::sort(nodes.begin(), nodes.end());
  for (int i : nodes) run_node(*g_->nodes()[size_t(i)], env);
  run_kernel(f.group, env);
}

void CudaCompiledGraph::run_kernel(int kernel, std::vector<Tensor>& env) const {
  if (append_fold_of_group_[size_t(kernel)] >= 0) {
    // The write is the fold's attention's: the result is the input it would be written into.
    if (const Tensor* target = in_place_target(kernel, env)) {
      env[size_t(plan_.groups[size_t(kernel)].output->id)] = *target;
      return;
    }
  }
  launch_group(kernel, env);
}

const Tensor* CudaCompiledGraph::in_place_target(int kernel, const std::vector<Tensor>& env) const {
  if (write_into_[size_t(kernel)] < 0) return nullptr;
  const graph::Value* out = plan_.groups[size_t(kernel)].output;
  const Tensor& t = env[size_t(g_->inputs()[size_t(write_into_[size_t(kernel)])]->id)];
  const bool laid_out = t.defined() && t.sizes() == out->meta.sizes &&
                        t.dtype() == out->meta.dtype && t.device() == device_ && t.is_contiguous();
  return laid_out ? &t : nullptr;
}

void CudaCompiledGraph::launch_group(int kernel, std::vector<Tensor>& env) const {
  if (const int f = ce_fold_of_group_[size_t(kernel)];
      f >= 0 && run_cross_entropy_grad(ce_folds_[size_t(f)], env))
    return;
  const FusionGroup& grp = plan_.groups[size_t(kernel)];
  const CudaLaunch& l = launches_[size_t(kernel)];
  const int64_t work = l.work.eval(dims_);
  // A row kernel takes a block per row: more rows than a grid holds run eagerly.
  if (l.rows && work > 0x7fffffff) {
    run_group_eagerly(grp, env);
    return;
  }
  std::vector<void*> ptrs;
  for (const graph::Value* v : grp.inputs) {
    const Tensor& t = env[size_t(v->id)];
    // Index math is specialized to the captured layout: another one runs eagerly.
    if (t.sizes() != v->meta.sizes || t.dtype() != v->meta.dtype || t.device() != device_ ||
        (shape_numel(v->meta.sizes) > 1 && t.strides() != v->meta.strides)) {
      run_group_eagerly(grp, env);
      return;
    }
    ptrs.push_back(t.impl()->data());
  }
  std::vector<Tensor> outs;
  auto fresh = [&](const graph::Value* v) {
    TensorOptions o(v->meta.dtype);
    o.device = device_;
    outs.push_back(empty(v->meta.sizes, o));
    ptrs.push_back(outs.back().impl()->data());
  };
  // The input this kernel's result replaces, written in place (plan_writes_into_inputs) when
  // it is laid out as captured.
  const Tensor* target = in_place_target(kernel, env);
  if (target) {
    outs.push_back(*target);
    ptrs.push_back(target->impl()->data());
  } else if (changes_only_[size_t(kernel)]) {  // it would leave the rest of a new buffer unset
    run_group_eagerly(grp, env);
    return;
  } else {
    fresh(grp.output);
  }
  for (const graph::Value* e : grp.extra_outputs) fresh(e);
  std::vector<void*> args;
  for (void*& p : ptrs) args.push_back(&p);
  for (int sym : symbols_[size_t(kernel)])
    args.push_back(const_cast<int64_t*>(&dims_[size_t(sym)]));
  const unsigned grid = cuda_grid(l, work, sms_);
  if (grid > 0) {
    profiled(
        device_,
        [&] {
          device_code::launch(kernels_[size_t(kernel)], device_.index, grid, unsigned(l.block),
                              args.data(), "generated CUDA kernel launch");
          return true;
        },
        [&] { return profile_key(grp); });
  }
  env[size_t(grp.output->id)] = std::move(outs[0]);
  for (size_t j = 0; j < grp.extra_outputs.size(); ++j)
    env[size_t(grp.extra_outputs[j]->id)] = std::move(outs[j + 1]);
}

void CudaCompiledGraph::run_casts(const std::vector<int>& groups,
                                  const std::vector<const graph::Value*>& sources,
                                  std::vector<Tensor>& env) const {
  const std::pair<DType, DType> pairs[] = {{DType::Float32, DType::BFloat16},
                                           {DType::Float32, DType::Float16},
                                           {DType::BFloat16, DType::Float32},
                                           {DType::Float16, DType::Float32}};
  for (const auto& [from, to] : pairs) {
    std::vector<Tensor> src, dst;
    std::vector<const graph::Value*> outs;
    for (size_t j = 0; j < groups.size(); ++j) {
      const int k = groups[j];
      const FusionGroup& grp = plan_.groups[size_t(k)];
      const graph::Value* v = sources[j];
      if (v->meta.dtype != from || grp.output->meta.dtype != to) continue;
      const Tensor& t = env[size_t(v->id)];
      if (!t.defined() || t.dtype() != from || t.device() != device_ ||
          t.sizes() != v->meta.sizes || !t.is_contiguous()) {
        // Its own kernel, reading its input (the source's views may not have run yet).
        if (v != grp.inputs[0] && !env[size_t(grp.inputs[0]->id)].defined())
          env[size_t(grp.inputs[0]->id)] = t;
        run_kernel(k, env);
        continue;
      }
      TensorOptions o(to);
      o.device = device_;
      src.push_back(t);
      dst.push_back(empty(v->meta.sizes, o));
      outs.push_back(grp.output);
    }
    if (src.empty()) continue;
    profiled(
        device_,
        [&] {
          multi_tensor::cast_(src, dst);
          return true;
        },
        [&] {
          return std::string("generated batched casts ")
              .append(dtype_name(from))
              .append(" -> ")
              .append(dtype_name(to))
              .append(" (" + std::to_string(src.size()) + " tensors)");
        });
    for (size_t i = 0; i < outs.size(); ++i) env[size_t(outs[i]->id)] = std::move(dst[i]);
  }
}

std::vector<Tensor> CudaCompiledGraph::run(const std::vector<Tensor>& inputs) const {
  return execute(inputs, nullptr);
}

std::vector<Tensor> CudaCompiledGraph::run_consuming(std::vector<Tensor>&& inputs) const {
  return execute(inputs, g_->mutations().empty() ? &inputs : nullptr);
}

std::vector<Tensor> CudaCompiledGraph::execute(const std::vector<Tensor>& inputs,
                                               std::vector<Tensor>* owned) const {
  if (deferred_.interpret_now([&] { const_cast<CudaCompiledGraph*>(this)->build(false); }))
    return g_->interpret(inputs);
  if (records_grad(inputs)) {
    log_decision("inputs require grad with grad mode on: running through eager interpretation");
    return g_->interpret(inputs);
  }
  std::vector<Tensor> env = bind_inputs(*g_, inputs);
  for (const auto& [id, t] : constants_) env[size_t(id)] = t;
  if (owned) owned->clear();
  const std::vector<RandomRange> draws = draws_ ? g_->reserve_draws() : std::vector<RandomRange>();
  // Recording: the side steps on a branch of their own, what they read kept until the join.
  std::optional<cuda_graph::SideBranch> side;
  std::vector<Tensor> side_reads;
  if (has_side_) {
    side.emplace(device_.index);
    if (!side->recording()) side.reset();
  }
  for (size_t s = 0; s < steps_.size(); ++s) {
    const Step& st = steps_[s];
    auto step = [&] {
      if (st.casts == 1) {
        run_casts(first_casts_, first_sources_, env);
      } else if (st.casts == 2) {
        run_casts(last_casts_, last_sources_, env);
        for (int i : tail_views_) run_node(*g_->nodes()[size_t(i)], env);
      }
      else if (st.kernel >= 0 && embedding_fold_of_group_[size_t(st.kernel)] >= 0)
        run_embedding_fold(embedding_folds_[size_t(embedding_fold_of_group_[size_t(st.kernel)])], env);
      else if (st.kernel >= 0)
        run_kernel(st.kernel, env);
      else if (const int f = fold_of_node_[size_t(st.index)]; f >= 0)
        run_fold(folds_[size_t(f)], env, side && fold_on_side_[s] ? &*side : nullptr,
                 &side_reads);
      else if (const int b = bias_fold_of_node_[size_t(st.index)]; b >= 0)
        run_bias_fold(bias_folds_[size_t(b)], env);
      else if (const int a = append_fold_of_node_[size_t(st.index)]; a >= 0)
        run_append_fold(append_folds_[size_t(a)], env);
      else
        run_node(*st.node, env, draws_ ? &draws[size_t(st.index)] : nullptr);
    };
    if (side && side_[s]) {
      for (int id : side_reads_[s]) side_reads.push_back(env[size_t(id)]);
      side->run(step);
    } else {
      if (side && join_before_[s]) {
        side->join();
        side_reads.clear();
      }
      step();
    }
    for (int id : release_after_[s]) env[size_t(id)] = Tensor();
  }
  if (side) {
    side->join();
    side_reads.clear();
    count_side_steps(side->steps());
  }
  return finish_run(*g_, inputs, env);
}

}  // namespace ember::compiler
