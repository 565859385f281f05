// OpImpl: what each op entry must provide. Family files define one `op_impl_<name>` each.
#pragma once
#include <span>
#include <vector>

#include "ember/tensor.h"
#include "ops/attrs.h"
#include "ops/op.h"

namespace ember {

// Metadata of one output, as computed by an op's shape rule.
struct TensorMeta {
  Shape sizes;
  Shape strides;  // only meaningful for views (relative to the input's storage)
  int64_t offset = 0;  // views: storage offset
  DType dtype = DType::Float32;
};
using MetaList = std::vector<TensorMeta>;

// What a grad formula sees. Inputs/outputs not saved by the op are undefined tensors.
struct GradCtx {
  OpId op;
  const Attrs& attrs;
  std::span<const Tensor> inputs;     // saved inputs (undefined if not saved)
  std::span<const Tensor> outputs;    // saved outputs (undefined if not saved)
  std::span<const Tensor> grads;      // grad of each output (undefined if none flowed)
  std::span<const TensorMeta> input_meta;  // sizes and dtype of every input, always present
  std::span<const bool> needs_grad;   // which inputs want a gradient
};

using InferFn = MetaList (*)(std::span<const Tensor> in, const Attrs& a);
using KernelFn = void (*)(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a);
using GradFn = std::vector<Tensor> (*)(const GradCtx& ctx);

struct OpImpl {
  InferFn infer = nullptr;  // shape/dtype rule (views: also strides and offset)
  KernelFn cpu = nullptr;   // writes into outputs allocated by the dispatcher (not for views)
  GradFn grad = nullptr;    // required iff kDifferentiable; returns one grad per input
  uint32_t save_inputs = 0;   // bitmask of inputs the grad formula reads
  uint32_t save_outputs = 0;  // bitmask of outputs the grad formula reads
};

const OpImpl& op_impl(OpId op);

// Checks every entry: differentiable ops have a grad, non-views a kernel, all a shape rule.
// Returns a list of problems (empty when the table is complete).
std::vector<std::string> validate_op_table();

#define EMBER_OP(name, kind, nin, nout, flags) extern const OpImpl op_impl_##name;
#include "ops/defs/all.def"
#undef EMBER_OP

}  // namespace ember
