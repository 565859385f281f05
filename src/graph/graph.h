// Graph IR: a captured program as a list of op nodes over values with metadata.
// Nodes are in execution (topological) order; values are produced by exactly one node or are
// graph inputs. A graph also records mutations: after running, the value on the right is
// written back into the graph input on the left (in-place updates of inputs and buffers).
#pragma once
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/generator.h"
#include "ops/op_impl.h"

namespace ember::graph {

struct Node;

// Where an op was called from in user code (file:line), when known.
struct SourceLoc {
  const char* file = nullptr;
  uint32_t line = 0;
  std::string str() const;  // "file.cpp:12" or "<unknown>"
};

struct Value {
  int id = 0;            // dense, unique within the graph
  TensorMeta meta;       // sizes, strides, offset (views), dtype
  Device device = kCPU;
  Node* producer = nullptr;  // null for graph inputs
  int output_index = 0;
  int input_index = -1;      // position in Graph::inputs for graph inputs
};

enum class InputKind : uint8_t {
  Argument,  // a tensor passed to the compiled function
  Captured,  // a real tensor met while tracing (module parameter/buffer, lambda capture)
};

struct Node {
  int id = 0;
  OpId op;
  Attrs attrs;
  std::vector<Value*> inputs;
  std::vector<Value*> outputs;
  SourceLoc loc;
  // Recorded with grad mode off (inside a NoGradGuard): replayed without autograd history.
  bool no_grad = false;
  // Random draws of random nodes that dead-code elimination removed just before this one:
  // they are still reserved from the generator at each run, so that the random stream stays
  // where eager would leave it.
  uint64_t skipped_draws = 0;
};

// How many 32-bit draws a random node reserves from the global generator at each run: the
// count its front end (src/ops/random.cpp) reserves for the same call.
uint64_t random_draws(const Node& node);

struct RunPlan;  // what interpret() precomputes once per graph (interpreter.cpp)

struct Mutation {
  Value* target;  // a graph input
  Value* value;   // its new contents
};

class Graph {
 public:
  Graph() = default;
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  Value* add_input(const TensorMeta& meta, Device device, InputKind kind, std::string name);
  // Appends a node; output metadata comes from the op's shape rule run on `inputs`' metadata
  // (or is given explicitly).
  Node* add_node(OpId op, std::vector<Value*> inputs, const Attrs& attrs,
                 const std::vector<TensorMeta>& output_meta, SourceLoc loc = {});
  void set_outputs(std::vector<Value*> outputs);
  void add_mutation(Value* target, Value* value);

  const std::vector<Value*>& inputs() const { return inputs_; }
  // Whether this program is called at varying sizes (CompileOptions::dynamic, or a size guard
  // missed before): the compiler then shares code between its graphs of one form at different
  // sizes (compiler/families.h). Not part of the graph's identity.
  bool dynamic_sizes() const { return dynamic_sizes_; }
  void set_dynamic_sizes(bool on) { dynamic_sizes_ = on; }
  // Dims of the inputs marked static (mark_dynamic / mark_static, compile.h), as positions in
  // the inputs' dims counted over the inputs in order: code shared over sizes never makes them
  // symbols. Not part of the graph's identity.
  const std::vector<int>& static_dims() const { return static_dims_; }
  void set_static_dims(std::vector<int> dims) { static_dims_ = std::move(dims); }
  const std::vector<InputKind>& input_kinds() const { return input_kinds_; }
  const std::vector<std::string>& input_names() const { return input_names_; }
  const std::vector<Value*>& outputs() const { return outputs_; }
  const std::vector<Mutation>& mutations() const { return mutations_; }
  // Nodes may be edited in place (the capture sets no_grad, tests break wiring on purpose),
  // but only before the first interpret(): the run plan it builds is kept.
  const std::vector<std::unique_ptr<Node>>& nodes() const { return nodes_; }
  // Every value, indexed by id.
  const std::vector<std::unique_ptr<Value>>& values() const { return values_; }
  size_t num_ops() const { return nodes_.size(); }
  // Draws of random nodes removed after the last kept one (reserved at the end of each run).
  uint64_t trailing_skipped_draws() const { return trailing_skipped_draws_; }

  // One line per node, like an FX graph:
  //   %3 = add(%1, %2)  # f32[4, 8]
  std::string str() const;
  // Structural hash: ops, attrs, wiring, input and output metadata (not value ids or
  // source locations). Equal graphs hash equal.
  size_t structural_hash() const;
  bool structurally_equal(const Graph& other) const;
  // Throws Error when the graph is malformed (use before def, dangling values, bad arity).
  void validate() const;

  // Passes. Both keep inputs, outputs and mutations valid. They delete the nodes and values
  // they remove (pointers to those dangle afterwards) and renumber the rest densely.
  int eliminate_dead_code();        // returns nodes removed
  int eliminate_common_subexpressions();  // same op, attrs and inputs -> one node (not random ops)
  // transpose(a @ b) -> b^T @ a^T when the product has no other reader: the result comes out
  // contiguous instead of as a transposed view (a linear layer's weight grad). Returns the
  // products rewritten.
  int transpose_matmul_products();

  // Runs the graph through the full dispatcher (so autograd records when inputs require
  // grad); applies mutations by copy_ into the given input tensors. Returns the outputs.
  // Nodes read a mutated input's contents from before the run; an output that is a graph
  // input returns the caller's tensor itself (holding the new contents). Random nodes draw
  // a fresh range of the global generator at each run, in node order, as eager calls would.
  std::vector<Tensor> interpret(const std::vector<Tensor>& inputs) const;
  // The draws of one run, reserved from the global generator at once in the order interpret()
  // reserves them (each node's skipped draws, then a random node's own, the trailing skipped
  // draws last): per node, the range a random node draws from (zeros for the others). For runs
  // that execute the nodes in another order (compiled graphs).
  std::vector<RandomRange> reserve_draws() const;

 private:
  Value* new_value(const TensorMeta& meta, Device device);
  void renumber();       // dense ids again after a pass removed nodes
  void invalidate_plan() { plan_.reset(); }
  std::shared_ptr<const RunPlan> run_plan() const;
  std::vector<std::unique_ptr<Value>> values_;
  std::vector<std::unique_ptr<Node>> nodes_;
  std::vector<Value*> inputs_;
  bool dynamic_sizes_ = false;
  std::vector<int> static_dims_;
  std::vector<InputKind> input_kinds_;
  std::vector<std::string> input_names_;
  std::vector<Value*> outputs_;
  std::vector<Mutation> mutations_;
  uint64_t trailing_skipped_draws_ = 0;  // removed random draws after the last random node
  // Built lazily by interpret() and dropped by every change to the graph.
  mutable std::shared_ptr<const RunPlan> plan_;
  mutable std::mutex plan_mutex_;
};

}  // namespace ember::graph
