// The "compiler" backend: a graph compiled into steps, fused kernels from generated C++ and
// eager nodes through the dispatcher.
#pragma once
#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "capture/capture.h"
#include "compiler/codegen_cpp.h"
#include "compiler/families.h"
#include "compiler/graph_run.h"
#include "compiler/lower.h"
#include "compiler/render_cpp.h"
#include "compiler/memory_plan.h"
#include "compiler/pointwise_fusion.h"
#include "compiler/toolchain.h"
#include "kernels/cpu/gemm.h"

namespace ember::compiler {

class CompiledGraph : public capture::Runnable {
 public:
  explicit CompiledGraph(std::shared_ptr<const graph::Graph> g);
  std::vector<Tensor> run(const std::vector<Tensor>& inputs) const override;
  // Without write-backs into the inputs, each input is dropped after its last reader.
  std::vector<Tensor> run_consuming(std::vector<Tensor>&& inputs) const override;

  size_t kernel_count() const { return plan_.groups.size(); }
  // The ops of the steps left to the eager kernels (views aside; matmuls without an epilogue
  // are BLAS calls either way) and their result dtypes, in run order.
  std::vector<std::pair<std::string, DType>> eager_ops() const;
  // Whether the kernels are its family's over symbolic sizes (families.h), shared with graphs
  // of the same program at other sizes.
  bool shares_compiled_code() const override { return shared_; }
  bool defers_build() const override { return deferred_.pending(); }
  const std::string& source() const { return source_; }
  // Peak bytes of intermediates alive at once: this plan's (fused intermediates never exist)
  // and eager execution's of the same graph (memory_plan.h).
  int64_t peak_bytes() const { return peak_bytes_; }
  int64_t eager_peak_bytes() const { return eager_peak_bytes_; }

 private:
  using KernelFn = void (*)(void* const*);
  // A fused kernel over buffers, or (kernel < 0) one node through the dispatcher.
  struct Step {
    int kernel = -1;
    const graph::Node* node = nullptr;
    int index = -1;  // the node's index in the graph
  };
  // run() and run_consuming(): `owned`, when given, is `inputs` itself, emptied once its
  // tensors are in the run's environment.
  std::vector<Tensor> execute(const std::vector<Tensor>& inputs,
                              std::vector<Tensor>* owned) const;
  void run_group_eagerly(const FusionGroup& grp, std::vector<Tensor>& env) const;
  // Which kernels write their result straight into a graph input that the graph mutates.
  void plan_in_place_writes(const std::vector<StepIO>& io);
  // Runs of consecutive pointwise kernels that run as one batch (codegen_cpp.h, KernelBatch):
  // fills batches_ and batch_at_, returns what codegen needs.
  std::vector<KernelBatch> plan_batches();
  // A kernel step's arguments and freshly made outputs; false when a buffer's layout differs
  // from the captured one (the group then runs eagerly).
  bool prepare_kernel(const Step& st, const std::vector<Tensor>& inputs,
                      std::vector<Tensor>& env, std::vector<void*>& args,
                      std::vector<Tensor>& outs) const;
  void finish_kernel(const Step& st, std::vector<Tensor>& env, std::vector<Tensor>& outs) const;
  void run_kernel(const Step& st, const std::vector<Tensor>& inputs,
                  std::vector<Tensor>& env) const;
  bool run_batch(size_t b, const std::vector<Tensor>& inputs, std::vector<Tensor>& env) const;
  // What step s runs, for EMBER_PROFILE: the op left to the eager kernels, the fused kernel
  // (its kind, ops and result), or the batch starting there.
  std::string describe_step(size_t s) const;

  // Generates, builds and loads the kernels (families.h decides: shared over symbolic sizes
  // or this graph's own); with defer_first, the first graph of its form at varying sizes
  // builds nothing until its second call.
  void build(bool defer_first);
  DeferredBuild deferred_;

  std::shared_ptr<const graph::Graph> g_;
  FusionPlan plan_;
  std::string source_;
  bool draws_ = false;  // the graph draws random numbers (or skips removed draws)
  std::shared_ptr<const Library> lib_;
  bool shared_ = false;
  std::vector<kir::Kernel> lowered_;  // per group: its kernel IR
  std::vector<int64_t> dims_;  // the graph inputs' dims: the values of the kernels' symbols
  std::vector<KernelFn> kernels_;
  std::vector<cpu::RowEpilogue> epilogues_;  // per kernel: a gemm group's kernel, as called
  std::vector<Step> steps_;
  std::vector<std::vector<const graph::Value*>> kernel_args_;  // per kernel: buffer arguments
  std::vector<std::vector<int>> release_after_;  // per step: value ids read for the last time
  int64_t peak_bytes_ = 0, eager_peak_bytes_ = 0;
  std::vector<int> in_place_;  // per kernel: the graph input it writes in place, or -1
  struct Batch {
    size_t first, last;  // steps
    KernelFn fn;
  };
  std::vector<Batch> batches_;
  std::vector<int> batch_at_;  // per step: the batch starting there, or -1
  std::vector<int> pair_of_;   // per step: the matmul it runs side by side with (gemm_pairs.h)
  // Eager steps that depend on no graph input and draw nothing (a causal mask: full, triu)
  // give the same values every call: computed by the first call, then reused (results of at
  // most 4 MiB that the graph does not hand out).
  std::vector<char> constant_step_;
  // describe_step of every step, built when the first step is profiled (EMBER_PROFILE):
  // profiling then costs a clock read and a table lookup per step, not string building.
  mutable std::once_flag step_names_once_;
  mutable std::vector<std::string> step_names_;
  mutable std::once_flag constants_once_;
  mutable std::vector<std::pair<int, Tensor>> constants_;  // value id, its tensor
  void plan_constants();
  // One node the generated code does not cover: through the dispatcher, or for a view of a
  // tensor laid out as captured, the captured view made directly.
  void run_node(const graph::Node& n, std::vector<Tensor>& env,
                const RandomRange* draws = nullptr) const;
  // Runs the matmuls of steps a and b at once, one per thread.
  void run_pair(const Step& a, const Step& b, std::vector<Tensor>& env) const;
};

// "compiler", or with reduce_overhead "compiler/reduce-overhead" (CompileOptions::mode).
std::unique_ptr<capture::Backend> make_compiler_backend(bool reduce_overhead = false);

}  // namespace ember::compiler
