// The "compiler" backend on a GPU: a graph of CUDA tensors compiled into steps, fused kernels
// rendered as CUDA C++ (render_cuda.h) and built by NVRTC (toolchain_cuda.h), and eager nodes
// through the dispatcher (matmuls on cuBLAS, attention on its fused kernels, everything the
// plan leaves out). Kernels launch on the device's stream in graph order, as eager ops do.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "capture/capture.h"
#include "compiler/cuda_folds.h"
#include "compiler/graph_run.h"
#include "compiler/kernel_ir.h"
#include "compiler/pointwise_fusion.h"
#include "compiler/render_cuda.h"
#include "kernels/device_code.h"

namespace ember::cuda_graph {
class SideBranch;
}

namespace ember::compiler {

class CudaCompiledGraph : public capture::Runnable {
 public:
  CudaCompiledGraph(std::shared_ptr<const graph::Graph> g, Device device);
  std::vector<Tensor> run(const std::vector<Tensor>& inputs) const override;
  std::vector<Tensor> run_consuming(std::vector<Tensor>&& inputs) const override;

  bool shares_compiled_code() const override { return shared_; }
  bool defers_build() const override { return deferred_.pending(); }

 private:
  struct Step {
    int kernel = -1;  // a fused kernel, or (< 0) `node` through the dispatcher
    const graph::Node* node = nullptr;
    int index = -1;  // the node's index in the graph
    // The batched casts instead of the above: 1 the parameter casts (first_casts_), 2 the
    // grad casts (last_casts_).
    int casts = 0;
  };
  std::vector<Tensor> execute(const std::vector<Tensor>& inputs,
                              std::vector<Tensor>* owned) const;
  // Group `kernel`'s step: its kernel, or (a cache write an AppendFold's attention makes) its
  // result bound to the input it writes, the write left to that attention.
  void run_kernel(int kernel, std::vector<Tensor>& env) const;
  void launch_group(int kernel, std::vector<Tensor>& env) const;
  // The graph input group `kernel` writes its result into (plan_writes_into_inputs), when this
  // run's tensor there is laid out as captured; else null.
  const Tensor* in_place_target(int kernel, const std::vector<Tensor>& env) const;
  // The cast groups `groups`, reading sources[i] for groups[i], in one launch a pair of dtypes
  // (multi_tensor::cast_); a group whose source is not laid out as captured runs its own kernel.
  void run_casts(const std::vector<int>& groups, const std::vector<const graph::Value*>& sources,
                 std::vector<Tensor>& env) const;
  // A layer_norm_backward with its folded neighbours in one kernel (the plan's steps where the
  // kernel does not take the tensors); the values it reads. With `side`, the weight and bias
  // grads' fold goes on that branch, its partials kept in `side_reads` until the join.
  void run_fold(const LayerNormFold& f, std::vector<Tensor>& env,
                cuda_graph::SideBranch* side = nullptr,
                std::vector<Tensor>* side_reads = nullptr) const;
  std::vector<const graph::Value*> fold_reads(const LayerNormFold& f) const;
  // A matmul with the bias add after it in one gemm (the matmul and the add group where the
  // gemm does not take the tensors).
  void run_bias_fold(const BiasFold& f, std::vector<Tensor>& env) const;
  // cross_entropy's grad by its own kernel; false (nothing run) where it does not take the
  // tensors, and the group's generated kernel runs.
  bool run_cross_entropy_grad(const CrossEntropyGradFold& f, std::vector<Tensor>& env) const;
  // cached_attention with the two cache writes before it in one launch (the writes' kernels
  // and the op, where the kernel does not take the tensors).
  void run_append_fold(const AppendFold& f, std::vector<Tensor>& env) const;
  // Finds the AppendFolds (after lowering: they need changes_only_) and keeps the values they
  // read alive until their attention's step.
  void plan_append_folds();
  // Two embedding lookups and their add in one launch (the lookups and the add's kernel, where
  // the kernel does not take the tensors).
  void run_embedding_fold(const EmbeddingFold& f, std::vector<Tensor>& env) const;
  void run_group_eagerly(const FusionGroup& grp, std::vector<Tensor>& env) const;
  void run_node(const graph::Node& n, std::vector<Tensor>& env,
                const RandomRange* draws = nullptr) const;
  // Renders the kernels, builds (or finds) their modules and looks their functions up: its
  // family's kernels over symbolic sizes when they serve this graph (families.h), else its
  // own. With defer_first, the first graph of its form at varying sizes builds nothing (its
  // first call is interpreted) until its second call, as on the CPU (compiled_graph.h).
  void build(bool defer_first);
  // Decides write_into_ from each value's last reading step.
  void plan_writes_into_inputs(const std::vector<int>& last);
  std::vector<int> write_into_;  // per plan group: the graph input its result is written into, or -1
  // Per plan group: its kernel stores only the elements it changes (store_only_changes.h), so
  // it runs only writing into its input, else eagerly.
  std::vector<char> changes_only_;
  DeferredBuild deferred_;
  bool shared_ = false;

  std::shared_ptr<const graph::Graph> g_;
  Device device_;
  FusionPlan plan_;
  bool draws_ = false;  // the graph draws random numbers (or skips removed draws)
  std::vector<kir::Kernel> lowered_;
  std::vector<CudaLaunch> launches_;
  std::vector<std::shared_ptr<const device_code::Module>> modules_;
  std::vector<const void*> kernels_;
  std::vector<int64_t> dims_;  // the values of the size symbols
  std::vector<std::vector<int>> symbols_;  // per kernel: the symbols it takes
  int sms_ = 1;
  // Groups that only cast a float32 graph input (a parameter) to a 16-bit float, run together
  // first (reading first_sources_); and groups that only cast a 16-bit value to a float32
  // graph output (a parameter's grad), run together last (reading their inputs), followed by
  // the views of their results (tail_views_, node indices in graph order).
  std::vector<int> first_casts_, last_casts_;
  std::vector<const graph::Value*> first_sources_, last_sources_;
  std::vector<int> tail_views_;
  std::vector<LayerNormFold> folds_;
  std::vector<int> fold_of_node_;  // per graph node: its fold in folds_, or -1
  std::vector<BiasFold> bias_folds_;
  std::vector<int> bias_fold_of_node_;  // per graph node: its fold in bias_folds_, or -1
  std::vector<CrossEntropyGradFold> ce_folds_;
  std::vector<int> ce_fold_of_group_;  // per plan group: its fold in ce_folds_, or -1
  std::vector<AppendFold> append_folds_;
  std::vector<int> append_fold_of_node_;   // per graph node: its fold in append_folds_, or -1
  std::vector<int> append_fold_of_group_;  // per plan group: the fold making its write, or -1
  std::vector<EmbeddingFold> embedding_folds_;
  std::vector<int> embedding_fold_of_group_;  // per plan group: its fold, or -1
  std::vector<Step> steps_;
  std::vector<std::vector<int>> release_after_;  // per step: value ids read for the last time
  // The values step s reads.
  std::vector<const graph::Value*> step_reads(size_t s) const;
  // Moves each attention_keep step (the flags of a layer's attention dropout, which read only
  // the draws' rng_state) up to just after the attention step before it, or to where its input
  // is made when that is later: the step's work then waits on nothing recorded after it.
  void hoist_keep_steps();
  // Steps recorded on a side branch (cuda_graph::SideBranch) beside the others: a matmul, a sum
  // or a fused kernel (or a view of their results) whose results only the grad casts read, or
  // the caller (a weight's grad, a bias's); and attention_keep (the next attention's flags,
  // drawn beside the layer before it; the attention joins the branch). In a graph that writes
  // no input. Gives the count of those that launch work (views launch nothing).
  int plan_side_steps();
  bool has_side_ = false;                   // some step goes on the side branch
  std::vector<char> side_;                  // per step: on the side branch
  std::vector<char> join_before_;           // per step: reads what the side branch wrote
  // Per step: a layer_norm_backward fold (run_fold) whose weight and bias grads' fold goes on
  // the side branch (those grads are read only by the grad casts or the caller).
  std::vector<char> fold_on_side_;
  std::vector<std::vector<int>> side_reads_;  // per side step: value ids it reads
  // Values made once, when the graph is built, instead of by a step of every run (made_once):
  // (value id, its tensor), bound into each run's environment.
  std::vector<std::pair<int, Tensor>> constants_;
};

// Whether the graph's tensors are on one CUDA device that NVRTC can build for (else the
// backend interprets it); the device in `device`.
bool cuda_compilable(const graph::Graph& g, Device* device, std::string* why);

}  // namespace ember::compiler
