// Backward graph nodes. An OpNode holds what one op call's grad formula needs; an
// AccumulateGrad node adds incoming gradients into a leaf's .grad.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "ops/op_impl.h"

namespace ember::autograd {

struct Node;

// Where a gradient goes: input `input_nr` of node `fn`.
struct Edge {
  std::shared_ptr<Node> fn;
  uint32_t input_nr = 0;
  bool valid() const { return bool(fn); }
};

// A tensor kept for backward, with the version it had when saved.
struct SavedTensor {
  Tensor tensor;
  uint32_t version = 0;
  void save(const Tensor& t);
  Tensor unpack(const char* op, size_t index, const char* what) const;
};

struct Node {
  virtual ~Node() = default;
  // Grads of this node's outputs in, grads of its inputs (one per next edge) out.
  virtual std::vector<Tensor> apply(std::vector<Tensor>&& grads) = 0;
  virtual std::string name() const = 0;
  virtual void release() {}  // frees saved tensors after a backward without retain_graph
  // Set by the engine before apply(): release() follows it (no retain_graph), so apply may
  // hand its saved tensors over and free them while it runs.
  bool released_after_apply = false;
  std::vector<Edge> next_edges;
  std::vector<TensorMeta> output_meta;  // shape/dtype of each forward output
  uint64_t sequence_nr = 0;             // creation order: later nodes run first
};

struct OpNode : Node {
  OpId op;
  Attrs attrs;
  std::vector<SavedTensor> saved_inputs;   // one slot per input (empty if not saved)
  std::vector<SavedTensor> saved_outputs;  // one slot per output (empty if not saved)
  std::vector<TensorMeta> input_meta;
  std::vector<bool> input_needs_grad;
  bool released = false;
  // View ops: the tensor viewed. If its history is rewritten by an in-place op after the
  // view was taken, the view's history no longer describes its values.
  std::weak_ptr<TensorImpl> view_base;

  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override;
  std::string name() const override { return std::string(op_name(op)) + "_backward"; }
  void release() override;
};

struct AccumulateGrad : Node {
  std::shared_ptr<TensorImpl> leaf;
  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override;
  std::string name() const override { return "AccumulateGrad"; }
};

uint64_t next_sequence_nr();
// The edge a gradient for `t` should flow along (invalid if t needs no grad).
Edge gradient_edge(const Tensor& t);

}  // namespace ember::autograd
