// The fused attention ops: shape rules, the grad (through attention_backward, which recomputes
// the probabilities from the saved logsumexp) and the front end fused_attention (ops/attention.h).
#include <cmath>

#include "core/env.h"
#include "core/generator.h"
#include "core/shape.h"
#include "kernels/attention_keep.h"
#include "kernels/attention_layout.h"
#include "kernels/cpu/attention.h"
#include "ops/attention.h"
#include "ops/frontend.h"

namespace ember {

namespace {
MetaList infer_attention(std::span<const Tensor> in, const Attrs& a) {
  const Tensor &q = in[0], &v = in[2];
  Shape out = q.sizes(), lse(q.sizes().begin(), q.sizes().end() - 1);
  out.back() = v.sizes().back();
  if (attention_layout::heads_inner(a)) {
    EMBER_CHECK(q.dim() == 4, "attention: the heads-inner layout (dim 1) takes q [B, H, L, E], "
                "got ", q.shape_str());
    std::swap(out[1], out[2]);  // [B, L, H, F]
  }
  return {TensorMeta{out, {}, 0, q.dtype()}, TensorMeta{lse, {}, 0, stats_dtype(q.dtype())}};
}

MetaList infer_attention_backward(std::span<const Tensor> in, const Attrs& a) {
  MetaList m;
  for (int i = 0; i < 3; ++i) {
    Shape s = in[size_t(i)].sizes();
    if (attention_layout::heads_inner(a)) {
      EMBER_CHECK(s.size() == 4, "attention_backward: the heads-inner layout (dim 1) takes 4-dim "
                  "q, k and v, got ", in[size_t(i)].shape_str());
      std::swap(s[1], s[2]);  // [B, L, H, E]
    }
    m.push_back(TensorMeta{s, {}, 0, in[size_t(i)].dtype()});
  }
  return m;
}

// One attention_backward call gives all three grads (with the same attrs, so the same dropout
// mask). The grad of lse is not propagated: it is a statistic saved for this formula.
std::vector<Tensor> grad_attention(const GradCtx& c) {
  const Tensor& g = c.grads[0];
  if (!g.defined()) return std::vector<Tensor>(c.inputs.size());
  std::vector<Tensor> ins{c.inputs[0], c.inputs[1],  c.inputs[2],
                          c.outputs[0], c.outputs[1], cast_to(g, c.outputs[0].dtype())};
  // The draws' tensor and the flags drawn from it (not differentiable): the forward's mask.
  for (size_t i = 3; i < c.inputs.size(); ++i) ins.push_back(c.inputs[i]);
  std::vector<Tensor> grads = dispatch(OpId::attention_backward, std::move(ins), c.attrs);
  for (size_t i = 0; i < 3; ++i) {
    if (!c.needs_grad[i]) grads[i] = Tensor();
    // Heads-inner grads [B, L, H, E] as the [B, H, L, E] of q, k and v.
    else if (attention_layout::heads_inner(c.attrs)) grads[i] = grads[i].transpose(1, 2);
  }
  grads.resize(c.inputs.size());
  return grads;
}

// Whether the GPU's tensor-core attention kernels would take q, k and v (16-bit, heads of at
// most attention_keep::kHead) with flags of at most attention_keep::kLimitBytes: the flags are
// then drawn ahead (attention_keep). Where they would not after all (operands not aligned for
// their loads), the kernels that run draw their own and ignore the words.
bool keeps_ahead(const Tensor& q, const Tensor& k, const Tensor& v, int64_t batch) {
  static const bool on = env_switch("EMBER_ATTN_KEEP_AHEAD", true);
  const DType t = q.dtype();
  if (!on) return false;
  if (q.device().type != DeviceType::CUDA || (t != DType::BFloat16 && t != DType::Float16))
    return false;
  if (q.size(-1) > attention_keep::kHead || v.size(-1) > attention_keep::kHead) return false;
  const int64_t words = attention_keep::words(batch, q.size(-2), k.size(-2));
  return words > 0 && words <= attention_keep::kLimitBytes / 4;
}
Attrs keep_attrs(const Attrs& a, int64_t batch, const Tensor& q, const Tensor& k) {
  Attrs s;
  s.shape = {batch, q.size(-2), k.size(-2)};
  s.value = a.value;
  s.flag = a.flag;
  return s;
}

Shape batch_of(const Tensor& t) {
  return Shape(t.sizes().begin(), t.sizes().end() - 2);
}
// t with its batch dims expanded to `batch` (a view: no copy).
Tensor expand_batch(const Tensor& t, const Shape& batch) {
  Shape s = batch;
  s.push_back(t.size(-2));
  s.push_back(t.size(-1));
  return t.sizes() == s ? t : t.expand(s);
}
}  // namespace

const OpImpl op_impl_attention{infer_attention, cpu::attention, grad_attention, 0b11111, 0b11};

namespace {
MetaList infer_attention_keep(std::span<const Tensor> in, const Attrs& a) {
  EMBER_CHECK(a.shape.size() == 3 && a.shape[0] >= 0 && a.shape[1] >= 0 && a.shape[2] >= 0,
              "attention_keep: attrs.shape must be the scores' {batch, L, S}, got ",
              shape_str(a.shape));
  EMBER_CHECK(in[0].dtype() == DType::Int64 && in[0].numel() == 2,
              "attention_keep: the draws' tensor must be an rng_state (int64 [2]), got ",
              dtype_name(in[0].dtype()), " ", in[0].shape_str());
  return {TensorMeta{{attention_keep::words(a.shape[0], a.shape[1], a.shape[2])}, {}, 0,
                     DType::Int32}};
}
}  // namespace

const OpImpl op_impl_attention_keep{infer_attention_keep, cpu::attention_keep, nullptr};

namespace {
MetaList infer_cached_attention(std::span<const Tensor> in, const Attrs&) {
  Shape out = in[0].sizes();
  out.back() = in[2].sizes().back();
  return {TensorMeta{out, {}, 0, in[0].dtype()}};
}
}  // namespace

const OpImpl op_impl_cached_attention{infer_cached_attention, cpu::cached_attention, nullptr};
const OpImpl op_impl_attention_backward{infer_attention_backward, cpu::attention_backward, nullptr};

void check_attention_args(const Tensor& q, const Tensor& k, const Tensor& v, double dropout_p,
                          const char* op) {
  EMBER_CHECK(q.defined() && k.defined() && v.defined(), op, ": undefined input");
  EMBER_CHECK(q.dim() >= 2 && k.dim() >= 2 && v.dim() >= 2, op,
              ": q, k, v need at least 2 dims [..., L, E], got ", q.shape_str(), ", ",
              k.shape_str(), ", ", v.shape_str());
  EMBER_CHECK(q.size(-1) == k.size(-1), op, ": q ", q.shape_str(), " and k ", k.shape_str(),
              " must have the same last dim (embedding)");
  EMBER_CHECK(k.size(-2) == v.size(-2), op, ": k ", k.shape_str(), " and v ", v.shape_str(),
              " must have the same sequence length (dim -2)");
  EMBER_CHECK(dropout_p >= 0 && dropout_p < 1, op, ": dropout_p must be in [0, 1), got ",
              dropout_p);
}

AttentionResult fused_attention(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in,
                                bool is_causal, double dropout_p, std::optional<double> scale,
                                const char* op) {
  check_attention_args(q_in, k_in, v_in, dropout_p, op);
  const Tensor q0 = autocast_lower(q_in), k0 = autocast_lower(k_in), v0 = autocast_lower(v_in);
  const DType t = promote_types(promote_types(q0.dtype(), k0.dtype()), v0.dtype());
  EMBER_CHECK(is_floating(t), op, ": q, k and v must be floating point, got ",
              dtype_name(q0.dtype()), ", ", dtype_name(k0.dtype()), " and ", dtype_name(v0.dtype()),
              "; convert them with .to()");
  const Shape batch =
      broadcast_pair(broadcast_pair(batch_of(q0), batch_of(k0), op), batch_of(v0), op);
  const Tensor q = expand_batch(cast_to(q0, t), batch), k = expand_batch(cast_to(k0, t), batch),
               v = expand_batch(cast_to(v0, t), batch);
  Attrs a;
  a.flag = is_causal;
  a.value = dropout_p;
  a.value2 = scale ? *scale : 1.0 / std::sqrt(double(q.size(-1)));
  std::vector<Tensor> ins{q, k, v};
  if (dropout_p > 0) {
    // The draws of bernoulli([..., L, S]) in dropout: the same count from the same place.
    Shape scores = batch;
    scores.push_back(q.size(-2));
    scores.push_back(k.size(-2));
    const uint64_t draws = uint64_t(checked_numel(scores, op));
    if (capture_hook()) {
      // As a tensor (which autograd saves for the backward), not as attrs.
      ins.push_back(reserve_random_tensor(draws, q.device(), op));
      // Where the GPU's tensor-core kernels take the problem, the flags drawn once for the
      // forward and the backward: a captured graph runs both, each of which would draw them.
      const int64_t rows = checked_numel(batch, op);
      if (keeps_ahead(q, k, v, rows))
        ins.push_back(dispatch1(OpId::attention_keep, {ins.back()}, keep_attrs(a, rows, q, k)));
    } else {
      const RandomRange r = reserve_random(draws, op);
      a.seed = r.seed;
      a.offset = r.offset;
    }
  }
  // On a GPU the result is laid out [B, L, H, F] and given as its [B, H, L, F] view, as
  // PyTorch's fused kernels give theirs: the usual transpose back to [B, L, H * F] then copies
  // nothing, forward or backward (kernels/attention_layout.h).
  if (q.device().type == DeviceType::CUDA && q.dim() == 4) a.dim = 1;
  std::vector<Tensor> outs = dispatch(OpId::attention, std::move(ins), a);
  if (attention_layout::heads_inner(a)) return {outs[0].transpose(1, 2), outs[1]};
  return {outs[0], outs[1]};
}

Tensor cached_attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                        const Tensor& pos, std::optional<double> scale) {
  const char* op = "cached_attention";
  EMBER_CHECK(q.defined() && k_cache.defined() && v_cache.defined() && pos.defined(), op,
              ": undefined input");
  EMBER_CHECK(q.dim() >= 2 && k_cache.dim() == q.dim() && v_cache.dim() == q.dim(), op,
              ": q [..., L, E] and caches [..., S, E], [..., S, F] with the same dims, got q ",
              q.shape_str(), ", k ", k_cache.shape_str(), ", v ", v_cache.shape_str());
  EMBER_CHECK(batch_of(q) == batch_of(k_cache) && batch_of(q) == batch_of(v_cache) &&
                  q.size(-1) == k_cache.size(-1) && k_cache.size(-2) == v_cache.size(-2),
              op, ": q ", q.shape_str(), ", k ", k_cache.shape_str(), " and v ",
              v_cache.shape_str(), " must share their batch dims, q and k their last dim, and k "
              "and v their slots (dim -2)");
  EMBER_CHECK(q.dtype() == k_cache.dtype() && q.dtype() == v_cache.dtype() &&
                  is_floating(q.dtype()),
              op, ": q, k and v must share one floating dtype, got ", dtype_name(q.dtype()),
              ", ", dtype_name(k_cache.dtype()), " and ", dtype_name(v_cache.dtype()));
  EMBER_CHECK(pos.numel() == 1 && pos.dtype() == DType::Int64, op,
              ": pos must be an int64 tensor of one element (the first new position), got ",
              dtype_name(pos.dtype()), " ", pos.shape_str());
  EMBER_CHECK(q.device() == k_cache.device() && q.device() == v_cache.device() &&
                  q.device() == pos.device(),
              op, ": q, the caches and pos must be on one device, got ", q.device().str(), ", ",
              k_cache.device().str(), ", ", v_cache.device().str(), " and ", pos.device().str());
  Attrs a;
  a.value2 = scale ? *scale : 1.0 / std::sqrt(double(q.size(-1)));
  return dispatch(OpId::cached_attention, {q, k_cache, v_cache, pos.reshape({1})}, a)[0];
}

}  // namespace ember
