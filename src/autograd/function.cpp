// Recording op calls on the autograd tape.
#include "autograd/function.h"

#include <atomic>

#include "autograd/node.h"
#include "core/make_tensor.h"
#include "core/shape.h"
#include "dispatch/dispatcher.h"
#include "ember/autograd.h"

namespace ember::autograd {

uint64_t next_sequence_nr() {
  static std::atomic<uint64_t> n{0};
  return n++;
}

Edge gradient_edge(const Tensor& t) {
  if (!t.defined() || !t.requires_grad()) return {};
  AutogradMeta& m = t.impl()->autograd_meta();
  if (m.grad_fn) return {m.grad_fn, m.output_nr};
  std::shared_ptr<Node> acc = m.grad_accumulator.lock();
  if (!acc) {
    auto a = std::make_shared<AccumulateGrad>();
    a->leaf = t.impl_ptr();
    a->sequence_nr = next_sequence_nr();
    a->output_meta.push_back(TensorMeta{t.sizes(), {}, 0, t.dtype()});
    m.grad_accumulator = a;
    acc = a;
  }
  return {acc, 0};
}

bool needs_history(OpId op, const std::vector<Tensor>& inputs) {
  if (!is_grad_enabled()) return false;
  bool any = false;
  for (const Tensor& t : inputs) any |= t.requires_grad();
  if (!any) return false;
  const OpInfo& info = op_info(op);
  EMBER_CHECK(!info.has(kNoGrad), info.name,
              " has no gradient, but an input requires grad; call detach() on the input or "
              "run under NoGradGuard");
  return info.has(kDifferentiable);
}

Tensor alias_without_history(const Tensor& t) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = t.impl()->storage;
  impl->symbolic = t.impl()->symbolic;
  impl->sizes = t.sizes();
  impl->strides = t.strides();
  impl->offset = t.storage_offset();
  impl->dtype = t.dtype();
  impl->device = t.device();
  impl->is_view = t.impl()->is_view;
  return Tensor(std::move(impl));
}

namespace {
// Rejects a view whose base (or the base's base ...) had its history rewritten by an in-place
// op after the view was taken: the view's values changed with the base, but its history did
// not, so gradients through it would be silently wrong.
void check_view_current(OpId op, const Tensor& t, size_t index) {
  // Walk the chain of view nodes back to the first tensor that is not a view. A base that no
  // longer exists cannot have been modified; the walk then continues from its node.
  std::shared_ptr<Node> fn = t.impl()->autograd->grad_fn;
  while (auto* node = dynamic_cast<OpNode*>(fn.get())) {
    if (op_info(node->op).kind != OpKind::View) return;
    const std::shared_ptr<Node>& then = node->next_edges[0].fn;
    if (std::shared_ptr<TensorImpl> base = node->view_base.lock()) {
      std::shared_ptr<Node> now = base->autograd ? base->autograd->grad_fn : nullptr;
      bool base_was_leaf = dynamic_cast<AccumulateGrad*>(then.get()) != nullptr;
      EMBER_CHECK(base_was_leaf ? now == nullptr : now == then, op_name(op), ": input ", index,
                  " (shape ", t.shape_str(), ") is a view of a tensor that was modified in "
                  "place after the view was taken, so the view's gradient history is out of "
                  "date; take the view again after the in-place op");
    }
    fn = then;
  }
}
}  // namespace

std::vector<Tensor> record(OpId op, const std::vector<Tensor>& inputs, const Attrs& attrs) {
  for (size_t i = 0; i < inputs.size(); ++i)
    if (inputs[i].requires_grad() && inputs[i].impl()->is_view)
      check_view_current(op, inputs[i], i);
  std::vector<Tensor> outs;
  {
    // Kernels and the capture hook below never record history themselves.
    NoGradGuard no_grad;
    outs = dispatch_below_autograd(op, inputs, attrs);
  }
  const OpImpl& impl = op_impl(op);
  auto node = std::make_shared<OpNode>();
  node->op = op;
  node->attrs = attrs;
  node->sequence_nr = next_sequence_nr();
  node->saved_inputs.resize(inputs.size());
  node->saved_outputs.resize(outs.size());
  node->input_meta.reserve(inputs.size());
  node->input_needs_grad.reserve(inputs.size());
  if (op_info(op).kind == OpKind::View) node->view_base = inputs[0].impl_ptr();
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& t = inputs[i];
    node->next_edges.push_back(gradient_edge(t));
    node->input_meta.push_back(TensorMeta{t.sizes(), {}, 0, t.dtype()});
    node->input_needs_grad.push_back(t.requires_grad());
    if (impl.save_inputs & (1u << i)) node->saved_inputs[i].save(t);
  }
  for (size_t j = 0; j < outs.size(); ++j) {
    node->output_meta.push_back(TensorMeta{outs[j].sizes(), {}, 0, outs[j].dtype()});
    if (impl.save_outputs & (1u << j)) node->saved_outputs[j].save(alias_without_history(outs[j]));
  }
  for (size_t j = 0; j < outs.size(); ++j) {
    if (!is_floating(outs[j].dtype())) continue;
    AutogradMeta& m = outs[j].impl()->autograd_meta();
    m.requires_grad = true;
    m.grad_fn = node;
    m.output_nr = uint32_t(j);
  }
  return outs;
}

void record_inplace(OpId op, const Tensor& self, const std::vector<Tensor>& inputs,
                    const Attrs& attrs) {
  const char* name = op_name(op).data();
  EMBER_CHECK(!(self.requires_grad() && self.is_leaf()), name,
              "_: a leaf tensor that requires grad (shape ", self.shape_str(),
              ") cannot be modified in place while grad mode is on; run the update under "
              "NoGradGuard, or use the out-of-place op");
  EMBER_CHECK(!self.impl()->is_view, name,
              "_: in-place update of a view while recording gradients is not supported "
              "(shape ",
              self.shape_str(), "); use the out-of-place op and build a new tensor");
  // Inputs that alias self are cloned first, so the values the grad formula saves are not
  // overwritten by the write below.
  std::vector<Tensor> ins = inputs;
  for (Tensor& t : ins)
    if (t.impl()->storage && t.impl()->storage == self.impl()->storage) t = t.clone();
  std::vector<Tensor> outs = dispatch(op, ins, attrs);
  Tensor result = outs[0];
  EMBER_CHECK(result.sizes() == self.sizes(), name, "_: the result has shape ",
              result.shape_str(), ", which does not match the shape ", self.shape_str(),
              " of the tensor written in place");
  EMBER_CHECK(result.dtype() == self.dtype(), name, "_: result dtype ",
              dtype_name(result.dtype()), " cannot be written into a ", dtype_name(self.dtype()),
              " tensor in place");
  {
    NoGradGuard no_grad;
    Tensor src[1] = {result};
    std::span<const Tensor> src_span(src, 1);
    if (capture_hook())
      capture_hook()->on_inplace(OpId::clone, src_span, self, Attrs{});
    else
      run_backend_into(OpId::clone, src_span, self, Attrs{});
  }
  if (result.requires_grad()) {
    AutogradMeta& m = self.impl()->autograd_meta();
    AutogradMeta& r = result.impl()->autograd_meta();
    m.requires_grad = true;
    m.grad_fn = r.grad_fn;
    m.output_nr = r.output_nr;
  } else if (self.impl()->autograd) {
    // Overwritten by values that need no grad: the old history no longer applies.
    self.impl()->autograd->grad_fn = nullptr;
    self.impl()->autograd->requires_grad = false;
  }
}

}  // namespace ember::autograd
