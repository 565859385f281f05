// Running a compiled graph: fused kernels (alone or batched in one parallel region) called on raw
// buffers, gemms with their groups as epilogues, other nodes dispatched as in eager mode, then the
// write-backs into inputs. Graphs the compiled form cannot run faithfully (autograd recording per
// op, random ops) are interpreted as the eager backend would.
#include "compiler/compiled_graph.h"
#include "compiler/cuda_graphed.h"

#include <omp.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <sstream>

#include "compiler/codegen_cpp.h"
#include "compiler/compiled_graph_cuda.h"
#include "compiler/gemm_pairs.h"
#include "compiler/memory_plan.h"
#include "compiler/step_profile.h"
#include "compiler/widen.h"
#include "core/logs.h"
#include "core/make_tensor.h"
#include "core/shape.h"
#include "ember/autograd.h"
#include "ember/ops.h"
#include "graph/graph_util.h"
#include "kernels/cpu/index.h"
#include "kernels/cpu/loops.h"

namespace ember::compiler {

namespace {

// EMBER_LOGS categories of the compiler: output_code prints generated sources, compiler its
// decisions (kernel counts, why a graph runs eagerly).
struct CompilerLogs {
  bool output_code = log_category_enabled("output_code");
  bool decisions = log_category_enabled("compiler");
};
const CompilerLogs& logs() {
  static const CompilerLogs l;
  return l;
}
void log(bool on, const char* tag, const std::string& text) {
  if (!on) return;
  static std::mutex mu;
  std::lock_guard<std::mutex> g(mu);
  std::fprintf(stderr, "[ember:%s] %s\n", tag, text.c_str());
}

// Whether v is `target` (a graph input) or a view of it: shares its buffer.
bool aliases(const graph::Value* v, const graph::Value* target) {
  return graph::view_root(v) == target;
}

// A float32 product of a matrix that no kernel takes as its gemm (the lm_head; a backward's
// input grad dy @ W, or weight grad dy^T @ x): ember's gemm runs it, with no epilogue, and it
// is not paired with another matmul (gemm_pairs.h).
bool own_gemm_step(const graph::Node& n) {
  return n.op == OpId::matmul && cpu::own_gemm_enabled() && pairable_matmul(n) &&
         n.outputs[0]->meta.dtype == DType::Float32 && n.inputs[0]->meta.sizes.size() >= 2 &&
         n.inputs[1]->meta.sizes.size() == 2;
}

}  // namespace

// 16-bit float graphs compile their matmuls and row ops widened to float32 (widen.h).
CompiledGraph::CompiledGraph(std::shared_ptr<const graph::Graph> g)
    : g_(widen_16bit(std::move(g))) {
  // Random nodes run through the dispatcher with this run's draws, reserved in node order at
  // the start of each run (Graph::reserve_draws), so the masks equal eager's.
  draws_ = graph::draws_random(*g_);
  plan_ = plan_fusion(*g_);
  const auto& nodes = g_->nodes();
  for (size_t i = 0; i < nodes.size(); ++i) {
    const int k = plan_.group_of_node[i];
    if (k < 0) {
      steps_.push_back({-1, nodes[i].get(), int(i)});
    } else if (nodes[i]->outputs[0] == plan_.groups[size_t(k)].output) {
      steps_.push_back({k, nullptr});  // at the root: every input of the group exists by then
    }
  }
  // What each step produces and reads: the memory plan's peak, and last reads, so
  // intermediates are freed as early as eager code would free them.
  // A kernel's buffer arguments, fixed once here: the run reads them without building lists.
  for (const FusionGroup& grp : plan_.groups) {
    std::vector<const graph::Value*> args = grp.inputs;
    if (grp.attn_qk)
      args.insert(args.end(),
                  {grp.attn_qk->inputs[0], grp.attn_qk->inputs[1], grp.attn_pv->inputs[1]});
    kernel_args_.push_back(std::move(args));
  }
  std::vector<StepIO> io(steps_.size());
  for (size_t s = 0; s < steps_.size(); ++s) {
    const Step& st = steps_[s];
    if (st.kernel >= 0) {
      const FusionGroup& grp = plan_.groups[size_t(st.kernel)];
      io[s].reads = kernel_args_[size_t(st.kernel)];
      if (grp.gemm)  // the gemm's operands
        io[s].reads.insert(io[s].reads.end(), grp.gemm->inputs.begin(), grp.gemm->inputs.end());
      io[s].produces = {grp.output};
      io[s].produces.insert(io[s].produces.end(), grp.extra_outputs.begin(),
                            grp.extra_outputs.end());
    } else {
      io[s].reads.assign(st.node->inputs.begin(), st.node->inputs.end());
      io[s].produces.assign(st.node->outputs.begin(), st.node->outputs.end());
    }
  }
  peak_bytes_ = compiler::peak_bytes(*g_, io);
  eager_peak_bytes_ = compiler::eager_peak_bytes(*g_);
  std::vector<int> last(g_->values().size(), -1);
  for (size_t s = 0; s < steps_.size(); ++s)
    for (const graph::Value* v : io[s].reads) last[size_t(v->id)] = int(s);
  for (const graph::Value* v : g_->outputs()) last[size_t(v->id)] = INT_MAX;
  for (const graph::Mutation& m : g_->mutations()) last[size_t(m.value->id)] = INT_MAX;
  plan_in_place_writes(io);
  {
    std::vector<const graph::Node*> step_nodes;
    for (const Step& st : steps_)
      step_nodes.push_back(st.kernel < 0 && !own_gemm_step(*st.node) ? st.node : nullptr);
    pair_of_ = plan_gemm_pairs(step_nodes);
  }
  plan_constants();
  release_after_.resize(steps_.size());
  for (size_t id = 0; id < last.size(); ++id)
    if (last[id] >= 0 && last[id] != INT_MAX) release_after_[size_t(last[id])].push_back(int(id));

  if (logs().decisions) {  // which ops stay eager, most frequent first
    std::map<std::string, int> eager_ops;
    for (const Step& st : steps_)
      if (st.kernel < 0) ++eager_ops[std::string(op_name(st.node->op))];
    std::vector<std::pair<int, std::string>> by_count;
    for (const auto& [op, c] : eager_ops) by_count.push_back({-c, op});
    std::sort(by_count.begin(), by_count.end());
    std::string list;
    for (const auto& [c, op] : by_count)
      list += (list.empty() ? "" : ", ") + op + " x" + std::to_string(-c);
    if (!list.empty()) log(true, "compiler", "eager nodes: " + list);
  }
  log(logs().decisions, "compiler",
      std::to_string(plan_.groups.size()) + " fused kernel(s), " +
          std::to_string(steps_.size() - plan_.groups.size()) + " eager node(s); peak " +
          std::to_string(peak_bytes_) +
          " bytes of intermediates (eager: " + std::to_string(eager_peak_bytes_) + ")");
  if (plan_.groups.empty()) return;
  // Each group is lowered once, here: the family lookup, batching and code generation read it.
  for (size_t k = 0; k < plan_.groups.size(); ++k) {
    const FusionGroup& grp = plan_.groups[k];
    if (is_pattern(grp))
      lowered_.push_back(lower_pattern(grp, kernel_name(k)));
    else if (grp.row)
      lowered_.push_back(lower_rows(grp, kernel_name(k)));
    else
      lowered_.push_back(lower_elementwise(grp, kernel_name(k)));
  }
  dims_ = input_dims(*g_);
  kernels_.assign(plan_.groups.size(), nullptr);
  epilogues_.assign(plan_.groups.size(), nullptr);
  batch_at_.assign(steps_.size(), -1);
  build(/*defer_first=*/g_->dynamic_sizes());
}

void CompiledGraph::build(bool defer_first) {
  // A program called at varying sizes: its family's kernels over symbolic sizes serve this
  // graph if they reproduce its kernels exactly at its sizes (families.h); the library built
  // from them is then found in the caches, and each call passes this graph's sizes. No
  // batches then (a batch's parts take no sizes). The first graph of its form at varying
  // sizes builds nothing yet: its first call runs through eager interpretation, so that the
  // next size of the form (which fits the family) is the one compiled; called again, it is
  // compiled then.
  FamilyLookup family =
      family_kernels(lowered_, dims_, g_->dynamic_sizes(), g_->static_dims());
  if (!family.kernels && defer_first && family.first) {
    deferred_.defer();
    log(logs().decisions, "compiler",
        "the first graph of its form at varying sizes: its first call runs through eager "
        "interpretation, its kernels are built with the next size's");
    return;
  }
  if (family.kernels) {
    shared_ = true;
    log(logs().decisions, "compiler",
        "kernels over symbolic sizes shared with this program's graphs at other sizes");
    source_ = generate_cpp(plan_, {}, &*family.kernels);
  } else {
    source_ = generate_cpp(plan_, plan_batches(), &lowered_);
  }
  log(logs().output_code, "output_code", "\n" + source_);
  std::vector<char> batched(plan_.groups.size(), 0);  // written only inside their batch
  for (const Batch& b : batches_)
    for (size_t s = b.first; s <= b.last; ++s) batched[size_t(steps_[s].kernel)] = 1;
  // The library is checked for one function it must have: the first kernel or batch.
  const size_t first = size_t(std::find(batched.begin(), batched.end(), 0) - batched.begin());
  lib_ = load_source(source_, first < batched.size() ? kernel_name(first) : batch_name(0));
  for (size_t k = 0; k < plan_.groups.size(); ++k) {
    void* fn = batched[k] ? nullptr : lib_->symbol(kernel_name(k));
    kernels_[k] = reinterpret_cast<KernelFn>(fn);
    epilogues_[k] = plan_.groups[k].gemm ? reinterpret_cast<cpu::RowEpilogue>(fn) : nullptr;
  }
  for (size_t b = 0; b < batches_.size(); ++b)
    batches_[b].fn = reinterpret_cast<KernelFn>(lib_->symbol(batch_name(b)));
  deferred_.built();
}

std::vector<std::pair<std::string, DType>> CompiledGraph::eager_ops() const {
  std::vector<std::pair<std::string, DType>> ops;
  for (const Step& st : steps_)
    if (st.kernel < 0 && op_info(st.node->op).kind != OpKind::View)
      ops.emplace_back(op_name(st.node->op), st.node->outputs[0]->meta.dtype);
  return ops;
}

void CompiledGraph::run_group_eagerly(const FusionGroup& grp, std::vector<Tensor>& env) const {
  std::vector<const graph::Node*> nodes = grp.nodes;
  if (grp.gemm) nodes.insert(nodes.begin(), grp.gemm);
  if (grp.attn_qk) {
    nodes.insert(nodes.begin(), grp.attn_qk);
    nodes.push_back(grp.attn_pv);
    if (grp.out_copy) {
      nodes.push_back(grp.out_permute);
      nodes.push_back(grp.out_copy);
    }
  }
  for (const graph::Node* n : nodes) dispatch_node(*n, env);
}

std::vector<Tensor> CompiledGraph::run(const std::vector<Tensor>& inputs) const {
  return execute(inputs, nullptr);
}

std::vector<Tensor> CompiledGraph::run_consuming(std::vector<Tensor>&& inputs) const {
  return execute(inputs, g_->mutations().empty() ? &inputs : nullptr);
}

std::vector<Tensor> CompiledGraph::execute(const std::vector<Tensor>& inputs,
                                           std::vector<Tensor>* owned) const {
  if (deferred_.interpret_now([&] { const_cast<CompiledGraph*>(this)->build(false); }))
    return g_->interpret(inputs);
  if (records_grad(inputs)) {
    log(logs().decisions, "compiler",
        "inputs require grad with grad mode on: running through eager interpretation");
    return g_->interpret(inputs);
  }
  std::vector<Tensor> env = bind_inputs(*g_, inputs);
  std::call_once(constants_once_, [&] {
    std::vector<Tensor> scratch(g_->values().size());
    for (size_t s = 0; s < steps_.size(); ++s) {
      if (!constant_step_[s]) continue;
      run_node(*steps_[s].node, scratch);
      for (const graph::Value* o : steps_[s].node->outputs)
        constants_.push_back({o->id, scratch[size_t(o->id)]});
    }
  });
  for (const auto& [id, t] : constants_) env[size_t(id)] = t;
  // From here on, inputs are read through env only (a graph without write-backs has no
  // in-place targets), and each is released after its last reader.
  if (owned) owned->clear();
  const std::vector<RandomRange> draws = draws_ ? g_->reserve_draws() : std::vector<RandomRange>();
  for (size_t s = 0; s < steps_.size(); ++s) {
    const Step& st = steps_[s];
    StepTimer timer([&, s]() -> const std::string& {
      std::call_once(step_names_once_, [&] {
        for (size_t k = 0; k < steps_.size(); ++k) step_names_.push_back(describe_step(k));
      });
      return step_names_[s];
    });
    if (pair_of_[s] > int(s)) {
      // The views between the pair first (they do not need the first matmul), then both.
      const size_t s2 = size_t(pair_of_[s]);
      for (size_t t = s + 1; t < s2; ++t) run_node(*steps_[t].node, env);
      run_pair(st, steps_[s2], env);
      for (size_t t = s; t < s2; ++t)
        for (int id : release_after_[t]) env[size_t(id)] = Tensor();
      s = s2;
    } else if (st.kernel < 0) {
      if (!constant_step_[s]) run_node(*st.node, env, draws_ ? &draws[size_t(st.index)] : nullptr);
    } else if (batch_at_[s] >= 0 && run_batch(size_t(batch_at_[s]), inputs, env)) {
      const Batch& b = batches_[size_t(batch_at_[s])];
      for (size_t t = s; t < b.last; ++t)
        for (int id : release_after_[t]) env[size_t(id)] = Tensor();
      s = b.last;
    } else {
      run_kernel(st, inputs, env);
    }
    for (int id : release_after_[s]) env[size_t(id)] = Tensor();
  }
  return finish_run(*g_, inputs, env);
}

void CompiledGraph::plan_constants() {
  constant_step_.assign(steps_.size(), 0);
  std::vector<char> constant(g_->values().size(), 0);
  std::vector<char> handed_out(g_->values().size(), 0);  // the caller may write into these
  for (const graph::Value* v : g_->outputs()) handed_out[size_t(v->id)] = 1;
  for (const graph::Mutation& m : g_->mutations()) handed_out[size_t(m.value->id)] = 1;
  // A view handed out hands out the buffer it views (a kept constant would be shared by the
  // results of every run).
  for (size_t s = steps_.size(); s-- > 0;) {
    const graph::Node* n = steps_[s].node;
    if (steps_[s].kernel >= 0 || !n || op_info(n->op).kind != OpKind::View || n->inputs.empty())
      continue;
    for (const graph::Value* o : n->outputs)
      if (handed_out[size_t(o->id)]) handed_out[size_t(n->inputs[0]->id)] = 1;
  }
  for (size_t s = 0; s < steps_.size(); ++s) {
    const graph::Node* n = steps_[s].node;
    if (steps_[s].kernel >= 0 || pair_of_[s] >= 0 || graph::is_random(n->op) || n->skipped_draws)
      continue;
    bool c = true;
    for (const graph::Value* v : n->inputs) c &= v->producer && constant[size_t(v->id)];
    // Kept for the graph's lifetime: only small values (masks, index ranges).
    for (const graph::Value* o : n->outputs)
      c &= !handed_out[size_t(o->id)] &&
           shape_numel(o->meta.sizes) * int64_t(dtype_size(o->meta.dtype)) <= (int64_t(1) << 22);
    if (!c) continue;
    constant_step_[s] = 1;
    for (const graph::Value* o : n->outputs) constant[size_t(o->id)] = 1;
  }
}

void CompiledGraph::run_node(const graph::Node& n, std::vector<Tensor>& env,
                             const RandomRange* draws) const {
  if (own_gemm_step(n)) {
    const Tensor &a = env[size_t(n.inputs[0]->id)], &b = env[size_t(n.inputs[1]->id)];
    Shape sizes = a.sizes();
    sizes.back() = b.sizes()[1];
    Tensor out = empty(sizes, TensorOptions(DType::Float32));
    cpu::matmul_epilogue(a, b, out, nullptr, nullptr);
    env[size_t(n.outputs[0]->id)] = std::move(out);
    return;
  }
  if (!run_captured_view(n, env)) dispatch_node(n, env, draws);
}

void CompiledGraph::run_pair(const Step& a, const Step& b, std::vector<Tensor>& env) const {
  std::vector<Tensor> ins[2], outs[2];
  const graph::Node* nodes[2] = {a.node, b.node};
  for (int i = 0; i < 2; ++i) {
    for (const graph::Value* v : nodes[i]->inputs) ins[i].push_back(env[size_t(v->id)]);
    const TensorMeta& m = nodes[i]->outputs[0]->meta;
    outs[i].push_back(empty(m.sizes, TensorOptions(m.dtype)));
  }
  // Inside the region BLAS runs single-threaded; errors cross the region's end as values.
  std::string errors[2];
#pragma omp parallel num_threads(2) if (omp_get_max_threads() > 1)
  {
    const int n = omp_get_num_threads(), t = omp_get_thread_num();
    for (int i = 0; i < 2; ++i) {
      if (n > 1 && i != t) continue;
      try {
        cpu::matmul(ins[i], outs[i], nodes[i]->attrs);
      } catch (const std::exception& e) {
        errors[i] = e.what();
      }
    }
  }
  for (int i = 0; i < 2; ++i) {
    EMBER_CHECK(errors[i].empty(), errors[i]);
    env[size_t(nodes[i]->outputs[0]->id)] = std::move(outs[i][0]);
  }
}

std::string CompiledGraph::describe_step(size_t s) const {
  const Step& st = steps_[s];
  if (pair_of_[s] > int(s))
    return "2 matmuls side by side -> " + value_type_str(*st.node->outputs[0]) + " | " +
           value_type_str(*steps_[size_t(pair_of_[s])].node->outputs[0]);
  if (st.kernel < 0)
    return (own_gemm_step(*st.node) ? "gemm -> "
                                    : "eager " + std::string(op_name(st.node->op)) + " -> ") +
           value_type_str(*st.node->outputs[0]);
  auto kernel = [&](int k) {
    const FusionGroup& g = plan_.groups[size_t(k)];
    std::string d = g.col        ? "columns"
                    : g.attn_qk  ? "attention"
                    : g.attn_bwd ? "attention backward"
                    : g.ln_bwd   ? "layer_norm backward"
                    : g.gemm     ? "gemm + epilogue"
                    : g.row      ? "row"
                                 : "pointwise";
    return d + " " + group_ops_str(g);
  };
  if (batch_at_[s] < 0) return kernel(st.kernel);
  const Batch& b = batches_[size_t(batch_at_[s])];
  return "batch of " + std::to_string(b.last - b.first + 1) + " kernels, first " +
         kernel(st.kernel);
}

void CompiledGraph::plan_in_place_writes(const std::vector<StepIO>& io) {
  in_place_.assign(plan_.groups.size(), -1);
  const auto& outs = g_->outputs();
  for (const graph::Mutation& m : g_->mutations()) {
    if (m.value == m.target || !m.value->producer) continue;
    if (std::find(outs.begin(), outs.end(), m.value) != outs.end()) continue;
    const graph::Value& t = *m.target;
    if (t.meta.sizes != m.value->meta.sizes || t.meta.dtype != m.value->meta.dtype ||
        t.meta.strides != contiguous_strides(t.meta.sizes))
      continue;
    // The step producing the value: a plain pointwise kernel (its reads of the target are at
    // the element it writes), after which no step reads the target's old contents.
    size_t at = io.size();
    for (size_t s = 0; s < io.size(); ++s)
      if (std::find(io[s].produces.begin(), io[s].produces.end(), m.value) != io[s].produces.end())
        at = s;
    if (at == io.size() || steps_[at].kernel < 0) continue;
    const FusionGroup& grp = plan_.groups[size_t(steps_[at].kernel)];
    if (!grp.elementwise() || grp.gemm || grp.output != m.value) continue;
    // Nothing reads the old contents afterwards, and the kernel reads the target only
    // directly (a view of it would be read at other elements than the one written).
    bool conflict = false;
    for (size_t s = at + 1; s < io.size(); ++s)
      for (const graph::Value* v : io[s].reads) conflict |= aliases(v, m.target);
    for (const graph::Value* v : io[at].reads) conflict |= v != m.target && aliases(v, m.target);
    if (conflict) continue;
    int writers = 0;  // one write-back per target
    for (const graph::Mutation& o : g_->mutations()) writers += o.target == m.target;
    if (writers == 1) in_place_[size_t(steps_[at].kernel)] = t.input_index;
  }
}

bool CompiledGraph::prepare_kernel(const Step& st, const std::vector<Tensor>& inputs,
                                   std::vector<Tensor>& env, std::vector<void*>& args,
                                   std::vector<Tensor>& outs) const {
  const FusionGroup& grp = plan_.groups[size_t(st.kernel)];
  // Strides are constants in the kernel: a buffer laid out otherwise runs eagerly.
  for (const graph::Value* v : kernel_args_[size_t(st.kernel)]) {
    const Tensor& t = env[size_t(v->id)];
    if (t.sizes() != v->meta.sizes || t.dtype() != v->meta.dtype ||
        (shape_numel(v->meta.sizes) > 1 && t.strides() != v->meta.strides))
      return false;
    args.push_back(t.impl()->data());
  }
  // A pointwise kernel whose result is written back into an input whose old contents nothing
  // reads afterwards writes straight into that input.
  const int target = in_place_[size_t(st.kernel)];
  const bool direct = target >= 0 && inputs[size_t(target)].is_contiguous();
  outs.push_back(direct ? inputs[size_t(target)]
                        : empty(grp.output->meta.sizes, TensorOptions(grp.output->meta.dtype)));
  args.push_back(outs.back().impl()->data());
  for (const graph::Value* e : grp.extra_outputs) {
    outs.push_back(empty(e->meta.sizes, TensorOptions(e->meta.dtype)));
    args.push_back(outs.back().impl()->data());
  }
  // Kernels over symbolic sizes read this graph's sizes after their buffers.
  if (shared_) args.push_back(const_cast<int64_t*>(dims_.data()));
  return true;
}

void CompiledGraph::finish_kernel(const Step& st, std::vector<Tensor>& env,
                                  std::vector<Tensor>& outs) const {
  const FusionGroup& grp = plan_.groups[size_t(st.kernel)];
  env[size_t(grp.output->id)] = std::move(outs[0]);
  for (size_t j = 0; j < grp.extra_outputs.size(); ++j)
    env[size_t(grp.extra_outputs[j]->id)] = std::move(outs[j + 1]);
}

void CompiledGraph::run_kernel(const Step& st, const std::vector<Tensor>& inputs,
                               std::vector<Tensor>& env) const {
  std::vector<void*> args;
  std::vector<Tensor> outs;
  // A batched kernel has no function of its own: when its batch could not run, nor can it.
  if (!kernels_[size_t(st.kernel)] || !prepare_kernel(st, inputs, env, args, outs)) {
    run_group_eagerly(plan_.groups[size_t(st.kernel)], env);
    return;
  }
  const FusionGroup& grp = plan_.groups[size_t(st.kernel)];
  if (grp.gemm)  // the gemm writes the product, the kernel is its epilogue
    cpu::matmul_epilogue(env[size_t(grp.gemm->inputs[0]->id)], env[size_t(grp.gemm->inputs[1]->id)],
                         outs[0], epilogues_[size_t(st.kernel)], args.data());
  else
    kernels_[size_t(st.kernel)](args.data());
  finish_kernel(st, env, outs);
}

bool CompiledGraph::run_batch(size_t b, const std::vector<Tensor>& inputs,
                              std::vector<Tensor>& env) const {
  const Batch& batch = batches_[b];
  std::vector<void*> args;
  std::vector<std::vector<Tensor>> outs(batch.last - batch.first + 1);
  // Each result's buffer goes into env as soon as it exists: later kernels of the batch read
  // it (they run after its writer, at the barriers the batch plan put in). If a layout check
  // fails halfway, the caller reruns the steps one by one, replacing these buffers.
  for (size_t s = batch.first; s <= batch.last; ++s) {
    std::vector<Tensor>& o = outs[s - batch.first];
    if (!prepare_kernel(steps_[s], inputs, env, args, o)) return false;
    const FusionGroup& grp = plan_.groups[size_t(steps_[s].kernel)];
    env[size_t(grp.output->id)] = o[0];
  }
  batch.fn(args.data());
  return true;
}

std::vector<KernelBatch> CompiledGraph::plan_batches() {
  std::vector<KernelBatch> plans;
  batch_at_.assign(steps_.size(), -1);
  std::vector<bool> row_loop;  // per kernel: codegen's loop shape
  for (size_t k = 0; k < plan_.groups.size(); ++k)
    row_loop.push_back(plan_.groups[k].elementwise() && cpp_row_loop(lowered_[k]));
  auto plain = [&](size_t s) {
    if (steps_[s].kernel < 0) return false;
    const FusionGroup& grp = plan_.groups[size_t(steps_[s].kernel)];
    return grp.elementwise() && !grp.gemm && grp.extra_outputs.empty();
  };
  // Whether v is read element for element by a kernel over n elements.
  auto identity = [](const graph::Value* v, const FusionGroup& reader) {
    return v->meta.sizes == reader.output->meta.sizes &&
           v->meta.strides == contiguous_strides(v->meta.sizes);
  };
  for (size_t s = 0; s < steps_.size();) {
    size_t e = s;
    while (e < steps_.size() && plain(e)) ++e;
    if (e - s >= 2) {
      KernelBatch kb;
      int64_t work = 0;  // elements written by the batch's kernels
      for (size_t t = s; t < e; ++t) {
        const FusionGroup& gi = plan_.groups[size_t(steps_[t].kernel)];
        bool barrier = false;
        for (size_t u = s; u < t; ++u) {
          const FusionGroup& gj = plan_.groups[size_t(steps_[u].kernel)];
          // Same range and same loop shape: each thread gets the same elements in both.
          const bool rows_i = row_loop[size_t(steps_[t].kernel)];
          const bool same_n =
              shape_numel(gi.output->meta.sizes) == shape_numel(gj.output->meta.sizes) &&
              rows_i == row_loop[size_t(steps_[u].kernel)] &&
              (!rows_i || gi.output->meta.sizes.back() == gj.output->meta.sizes.back());
          // Reads of an earlier kernel's result: safe without a barrier only element for
          // element over the same range (a static schedule gives each thread the same slice).
          for (const graph::Value* v : gi.inputs)
            if (v == gj.output) barrier |= !(same_n && identity(v, gi));
          // Writing in place into an input an earlier kernel reads: likewise.
          const int target = in_place_[size_t(steps_[t].kernel)];
          if (target >= 0)
            for (const graph::Value* v : gj.inputs)
              if (aliases(v, g_->inputs()[size_t(target)]))
                barrier |= !(v == g_->inputs()[size_t(target)] && same_n && identity(v, gj));
        }
        kb.kernels.push_back(steps_[t].kernel);
        kb.barrier_before.push_back(barrier && t > s);
        work += shape_numel(gi.output->meta.sizes);
      }
      kb.parallel = work >= cpu::kParallelGrain;
      batch_at_[s] = int(batches_.size());
      batches_.push_back({s, e - 1, nullptr});
      plans.push_back(std::move(kb));
    }
    s = e == s ? s + 1 : e;
  }
  return plans;
}

namespace {

class CompilerBackend : public capture::Backend {
 public:
  // reduce_overhead: GPU graphs replay as recorded CUDA graphs (cuda_graphed.h).
  explicit CompilerBackend(bool reduce_overhead) : reduce_overhead_(reduce_overhead) {}
  std::string name() const override {
    return reduce_overhead_ ? "compiler/reduce-overhead" : "compiler";
  }
  // Recordings keep device memory: it goes back with the last callable that uses them.
  bool held_by_callables() const override { return reduce_overhead_; }
  std::shared_ptr<const capture::Runnable> compile(std::shared_ptr<const graph::Graph> g) override {
    bool on_gpu = false;
    for (const auto& v : g->values()) on_gpu |= v->device.type != DeviceType::CPU;
    if (!on_gpu && !compiler_available()) {
      static std::once_flag once;
      std::call_once(once, [] {
        capture::warn(
            "backend \"compiler\": no C++ compiler found ($CXX or c++); graphs run "
            "through eager interpretation");
      });
      return capture::backend("eager").compile(std::move(g));
    }
    Device device = kCPU;
    std::string why;
    if (on_gpu && !cuda_compilable(*g, &device, &why)) {
      static std::once_flag once;
      std::call_once(once, [&] {
        capture::warn("backend \"compiler\": a graph of GPU tensors runs through eager "
                      "interpretation (its eager GPU kernels): " + why);
      });
      return capture::backend("eager").compile(std::move(g));
    }
    try {
      if (on_gpu) {
        auto r = std::make_shared<CudaCompiledGraph>(g, device);
        if (!reduce_overhead_) return r;
        return record_cuda_graphs(std::move(r), g, device);
      }
      return std::make_shared<CompiledGraph>(g);
    } catch (const Error& e) {
      // A failed build or load (full disk, unwritable cache directory, a compiler bug) must
      // not take the program down: this graph runs as under the eager backend.
      // EMBER_COMPILER_STRICT=1 raises instead (the test suite sets it, so that a code
      // generation bug fails its tests rather than passing them eagerly).
      const char* strict = std::getenv("EMBER_COMPILER_STRICT");
      if (strict && std::string(strict) != "0") throw;
      capture::warn(std::string("backend \"compiler\": ") + e.what() +
                    "\nthis graph runs through eager interpretation instead");
      return capture::backend("eager").compile(std::move(g));
    }
  }

 private:
  bool reduce_overhead_;
};

}  // namespace

std::unique_ptr<capture::Backend> make_compiler_backend(bool reduce_overhead) {
  return std::make_unique<CompilerBackend>(reduce_overhead);
}

}  // namespace ember::compiler
