// Backward nodes: running grad formulas and accumulating into leaves.
#include "autograd/node.h"

#include <memory>

#include "autograd/hooks.h"
#include "core/shape.h"
#include "ember/ops.h"

namespace ember::autograd {

void SavedTensor::save(const Tensor& t) {
  tensor = t;
  version = t.impl()->storage ? t.version() : 0;
}

Tensor SavedTensor::unpack(const char* op, size_t index, const char* what) const {
  if (tensor.defined() && tensor.impl()->storage) {
    EMBER_CHECK(tensor.version() == version, "backward of ", op, ": ", what, " ", index,
                " (shape ", tensor.shape_str(), ", ", dtype_name(tensor.dtype()),
                ") was saved for the gradient at version ", version,
                " but has been modified by an in-place op since (now version ",
                tensor.version(), "); clone it before modifying it, or modify a copy");
  }
  return tensor;
}

std::vector<Tensor> OpNode::apply(std::vector<Tensor>&& grads) {
  const char* name = op_name(op).data();
  EMBER_CHECK(!released, "backward of ", name,
              ": trying to backward through the graph a second time, but its saved tensors "
              "were freed by the first backward; pass retain_graph=true to the first one");
  bool any = false;
  for (const Tensor& g : grads) any |= g.defined();
  if (!any) return std::vector<Tensor>(next_edges.size());
  std::vector<Tensor> ins(saved_inputs.size()), outs(saved_outputs.size());
  for (size_t i = 0; i < ins.size(); ++i) ins[i] = saved_inputs[i].unpack(name, i, "input");
  for (size_t i = 0; i < outs.size(); ++i) outs[i] = saved_outputs[i].unpack(name, i, "output");
  // One flag per input, however many (variadic ops such as cat take any number).
  const size_t n = input_needs_grad.size();
  std::unique_ptr<bool[]> needs(new bool[n]);
  for (size_t i = 0; i < n; ++i) needs[i] = input_needs_grad[i] && next_edges[i].valid();
  GradCtx ctx{op, attrs, ins, outs, grads, input_meta, std::span<const bool>(needs.get(), n)};
  std::vector<Tensor> result = op_impl(op).grad(ctx);
  EMBER_CHECK(result.size() == next_edges.size(), "internal: grad formula of ", name, " returned ",
              result.size(), " grads for ", next_edges.size(), " inputs");
  for (size_t i = 0; i < result.size(); ++i) {
    if (!result[i].defined() || !next_edges[i].valid()) {
      result[i] = Tensor();
      continue;
    }
    EMBER_CHECK(result[i].sizes() == input_meta[i].sizes, "internal: grad formula of ", name,
                " gave shape ", result[i].shape_str(), " for input ", i, " of shape ",
                shape_str(input_meta[i].sizes));
    if (result[i].dtype() != input_meta[i].dtype) result[i] = result[i].to(input_meta[i].dtype);
  }
  return result;
}

void OpNode::release() {
  saved_inputs.clear();
  saved_outputs.clear();
  saved_inputs.resize(input_meta.size());
  saved_outputs.resize(output_meta.size());
  released = true;
}

namespace {
// A view counts when it is all of its memory (a reshape of a result whose base is gone): with
// the storage held by this handle alone, nothing else can see the grad's elements.
bool sole_owner(const Tensor& g) {
  const TensorImpl& t = *g.impl();
  if (!t.storage) return false;
  const bool whole = !t.is_view || t.storage->nbytes == size_t(g.numel()) * dtype_size(g.dtype());
  return g.impl_ptr().use_count() == 1 && t.storage.use_count() == 1 && whole &&
         t.offset == 0 && t.is_contiguous() && !t.requires_grad() &&
         !(t.autograd && t.autograd->grad_fn) && !t.symbolic;
}
}  // namespace

std::vector<Tensor> AccumulateGrad::apply(std::vector<Tensor>&& grads) {
  Tensor g = std::move(grads[0]);
  if (!g.defined()) return {};
  AutogradMeta& m = leaf->autograd_meta();
  EMBER_CHECK(g.sizes() == leaf->sizes, "internal: gradient of shape ", g.shape_str(),
              " for a leaf of shape ", shape_str(leaf->sizes));
  if (g.dtype() != leaf->dtype) g = g.to(leaf->dtype);
  if (!m.grad) {
    // The grad becomes the leaf's own copy. When nothing else holds the tensor or its memory
    // (no other handle, no view, no history) it is taken as it is; otherwise it is copied, as
    // it may be shared with other leaves.
    m.grad = sole_owner(g) ? g.impl_ptr() : g.detach().clone().impl_ptr();
  } else {
    m.grad = (Tensor(m.grad) + g).impl_ptr();
  }
  run_post_accumulate_hooks(leaf);
  return {};
}

}  // namespace ember::autograd
