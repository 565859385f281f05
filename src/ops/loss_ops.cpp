// Cross entropy: shape rules, grad and front end.
#include "kernels/cpu/rowwise.h"
#include "ember/autocast.h"
#include "ops/frontend.h"

namespace ember {

namespace {
// attrs.flag: the loss in float32 for half logits (autocast's cross entropy, which reads the
// half logits as they are instead of a float32 copy of them).
MetaList infer_cross_entropy(std::span<const Tensor> in, const Attrs& a) {
  const Tensor& logits = in[0];
  return {TensorMeta{{}, {}, 0, a.flag ? stats_dtype(logits.dtype()) : logits.dtype()},
          TensorMeta{{logits.sizes()[0]}, {}, 0, stats_dtype(logits.dtype())}};
}


// loss = mean over counted rows of lse - logit[target], so
//   dlogits = (softmax(logits) - onehot(target)) * g / count on counted rows, 0 on ignored ones.
// Written with pointwise ops and a comparison against the class index (no one-hot or
// probability tensor of its own), each read once, so a compiled backward computes it in one
// fused pass over the logits. Half logits (autocast) get their grad in their own dtype, computed
// in lse's float32. When nothing is counted the grad is all zeros.
std::vector<Tensor> grad_cross_entropy(const GradCtx& c) {
  const Tensor& g = c.grads[0];
  if (!g.defined() || !c.needs_grad[0]) return {Tensor(), Tensor()};
  const Tensor& logits = c.inputs[0];
  const Tensor& targets = c.inputs[1];
  const Tensor& lse = c.outputs[1];
  TensorOptions ids(DType::Int64);
  ids.device = logits.device();
  const Tensor counted = targets.ne(double(c.attrs.end)).unsqueeze(1).to(lse.dtype());
  const Tensor scale = counted * (g / counted.sum().clamp(1.0, std::nullopt));
  const Tensor onehot = targets.unsqueeze(1).eq(arange(logits.sizes()[1], ids));
  const Tensor probs = (logits - lse.unsqueeze(1)).exp();
  return {((probs - onehot.to(lse.dtype())) * scale).to(logits.dtype()), Tensor()};
}
}  // namespace

const OpImpl op_impl_cross_entropy{infer_cross_entropy, cpu::cross_entropy, grad_cross_entropy,
                                   0b11, 0b10};

Tensor cross_entropy(const Tensor& logits_in, const Tensor& targets, int64_t ignore_index) {
  EMBER_CHECK(logits_in.defined() && targets.defined(), "cross_entropy: undefined tensor argument");
  // Under autocast, half logits are read as they are (the kernels compute in float32 and the
  // loss is float32, as for a float32 copy, without that copy or its saved 2x memory).
  const bool half_logits = autocast_dtype().has_value() && logits_in.defined() &&
                           (logits_in.dtype() == DType::BFloat16 ||
                            logits_in.dtype() == DType::Float16);
  const Tensor logits = half_logits ? logits_in : autocast_float32(logits_in);
  EMBER_CHECK(logits.dim() >= 1,
              "cross_entropy: logits need a class dim (the last), got a 0-dim tensor");
  EMBER_CHECK(is_floating(logits.dtype()), "cross_entropy: logits must be floating point, got ",
              dtype_name(logits.dtype()));
  EMBER_CHECK(is_integral(targets.dtype()),
              "cross_entropy: targets must be class indices of an integer dtype (int64), got ",
              dtype_name(targets.dtype()), "; class-probability targets are not supported");
  const Shape lead(logits.sizes().begin(), logits.sizes().end() - 1);
  EMBER_CHECK(targets.sizes() == lead, "cross_entropy: targets of shape ", targets.shape_str(),
              " do not match logits of shape ", logits.shape_str(), " (expected targets of shape ",
              shape_str(lead), ": one class index per row of logits)");
  const int64_t classes = logits.sizes().back(), rows = shape_numel(lead);
  EMBER_CHECK(classes > 0 || rows == 0, "cross_entropy: logits of shape ", logits.shape_str(),
              " have no classes (the last dim is 0)");
  Attrs a;
  a.end = ignore_index;
  a.flag = half_logits;
  return dispatch(OpId::cross_entropy,
                  {logits.reshape({rows, classes}), cast_to(targets, DType::Int64).reshape({rows})},
                  a)[0];
}

}  // namespace ember
