// Free-function ops: factories, random numbers, and ops over several tensors.
#pragma once
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ember/tensor.h"

namespace ember {

// ---- factories ----
// New tensors of `shape` (uninitialized, 0, 1, `value`) with opts' dtype, device, requires_grad.
Tensor empty(const Shape& shape, TensorOptions opts = {});
Tensor zeros(const Shape& shape, TensorOptions opts = {});
Tensor ones(const Shape& shape, TensorOptions opts = {});
Tensor full(const Shape& shape, double value, TensorOptions opts = {});
// Tensors shaped, typed and placed as t, filled with 0, 1 or `value`.
Tensor zeros_like(const Tensor& t);
Tensor ones_like(const Tensor& t);
Tensor full_like(const Tensor& t, double value);
// A 0-dim tensor holding value.
Tensor scalar_tensor(double value, DType dtype);
// [start, end) by step, as PyTorch (float32 by default); arange(end): 0..end-1, int64.
Tensor arange(double start, double end, double step = 1, TensorOptions opts = {});
Tensor arange(int64_t end, TensorOptions opts = DType::Int64);
// Copies host data into a new tensor of the given shape (numel must match).
template <class T>
Tensor from_vector(const std::vector<T>& data, const Shape& shape, TensorOptions opts = {});
// A 1-D tensor of the values.
Tensor tensor(std::initializer_list<double> values, TensorOptions opts = {});

// ---- random (counter-based Philox: the same stream on every device) ----
// Seeds the global generator (offset back to 0); the seed it was last given.
void manual_seed(uint64_t seed);
uint64_t initial_seed();
// The global generator's position, to save and restore in checkpoints.
struct RngState {
  uint64_t seed = 0;
  uint64_t offset = 0;
};
RngState get_rng_state();
void set_rng_state(const RngState& s);
// Uniform in [0, 1), standard normal, and integers in [low, high) from the global generator.
Tensor rand(const Shape& shape, TensorOptions opts = {});
Tensor randn(const Shape& shape, TensorOptions opts = {});
Tensor randint(int64_t low, int64_t high, const Shape& shape, TensorOptions opts = DType::Int64);
// 1 with probability p, else 0 (the mask behind dropout).
Tensor bernoulli(const Shape& shape, double p, TensorOptions opts = {});
// Dropout as nn::Dropout (identity when not training).
Tensor dropout(const Tensor& x, double p, bool training = true);
// Samples indices from each row of non-negative weights (1-D or 2-D).
Tensor multinomial(const Tensor& probs, int64_t num_samples, bool replacement = false);

// ---- multi-tensor and composite ops ----
// cond ? a : b elementwise, broadcast together.
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);
// Joins tensors along an existing dim (cat) or a new one (stack); other dims must agree (Error).
Tensor cat(const std::vector<Tensor>& tensors, int64_t dim = 0);
Tensor stack(const std::vector<Tensor>& tensors, int64_t dim = 0);
// Matrix products by PyTorch's matmul rules; bmm: [B, N, K] x [B, K, M]. Mismatches: Error.
Tensor matmul(const Tensor& a, const Tensor& b);
Tensor bmm(const Tensor& a, const Tensor& b);
// x W^T + b (bias optional).
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());
// Rows of weight picked by int64 indices (any shape of indices).
Tensor embedding(const Tensor& weight, const Tensor& indices);
// Normalizes over the trailing normalized_shape dims, then scales and shifts (both optional).
Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight = Tensor(),
                  const Tensor& bias = Tensor(), double eps = 1e-5);
// Softmax / log-softmax along dim.
Tensor softmax(const Tensor& x, int64_t dim);
Tensor log_softmax(const Tensor& x, int64_t dim);
// GELU, exact (erf) or the tanh approximation.
Tensor gelu(const Tensor& x, bool tanh_approx = false);
// Mean cross entropy of logits [N, C] against int64 targets [N]; targets equal to
// ignore_index do not count. Logits of more dims [..., C] are flattened first.
Tensor cross_entropy(const Tensor& logits, const Tensor& targets, int64_t ignore_index = -100);
// softmax(q k^T * scale [+ causal mask]) v, over [..., L, E] inputs: the math path on the CPU,
// a fused kernel on CUDA (heads up to 128); dropout drops the same elements on both.
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                    bool is_causal = false, double dropout_p = 0.0,
                                    std::optional<double> scale = std::nullopt);
// Attention of new positions over key/value caches: q [..., L, E] holds positions pos ..
// pos + L - 1 (pos an int64 tensor of one element), the caches [..., S, E] and [..., S, F] hold
// S slots with these positions' keys and values already written; query i sees slots 0 ..
// pos + i. scale defaults to 1/sqrt(E). No grad. A decode step's attention in one kernel on
// CUDA, with the position a tensor so that one compiled step serves every position.
Tensor cached_attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                        const Tensor& pos, std::optional<double> scale = std::nullopt);
// x with src added (index_add) or scattered and added (scatter_add) at int64 `index` along dim.
Tensor index_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src);
Tensor scatter_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src);
// Indices of the non-zero elements of x, int64 [n, x.dim()] in row-major order. The result's
// size depends on the data, so under compile this op breaks the graph (`loc` names the caller).
Tensor nonzero(const Tensor& x, ember::SourceLocation loc = ember::SourceLocation::current());
// RMSNorm (LLaMA's): x / sqrt(mean(x^2 over the trailing normalized_shape dims) + eps), times
// weight when given; eps defaults to the machine epsilon of x's dtype, as PyTorch's.
Tensor rms_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight = Tensor(),
                std::optional<double> eps = std::nullopt);
// int64 indices [...] -> int64 [..., num_classes] with a 1 at each index (num_classes -1: the
// largest index + 1). An index outside [0, num_classes) is an Error.
Tensor one_hot(const Tensor& indices, int64_t num_classes = -1);
// x shifted circularly by shifts[i] along dims[i] (elements leaving one end come back at the
// other); with no dims, the flattened tensor is rolled and reshaped back.
Tensor roll(const Tensor& x, const std::vector<int64_t>& shifts,
            const std::vector<int64_t>& dims = {});
// Constant padding as PyTorch's F.pad: pads = {left, right} of the last dim, then of the one
// before, and so on; negative amounts crop.
Tensor pad(const Tensor& x, const std::vector<int64_t>& pads, double value = 0);
// Einstein summation over one or two operands ("ij,jk->ik", "bij,bjk->bik", "ii->" is not
// taken: each letter at most once an operand; without "->" the output is the letters that
// appear once, in alphabetical order). Products run as one batched matmul.
Tensor einsum(const std::string& equation, const std::vector<Tensor>& operands);
// Sums a broadcast tensor back down to `shape` (the reverse of expand).
Tensor sum_to_size(const Tensor& x, const Shape& shape);
// x broadcast to shape as a view (Error when it does not broadcast); the broadcast of two shapes.
Tensor broadcast_to(const Tensor& x, const Shape& shape);
Shape broadcast_shapes(const Shape& a, const Shape& b);

// ---- model-family composites: convolution, pooling, normalization, rotary, sorting ----
// Images are NCHW. Composites of table ops (slices, cat, matmul, reductions), so autograd,
// compile and every device get them; a stride, padding, dilation or kernel size is one value
// for both spatial dims or {height, width}.

// Convolution as PyTorch's F.conv2d: x [N, C, H, W] (or [C, H, W]), weight [O, C/groups, kH,
// kW], bias [O] (optional) -> [N, O, Ho, Wo] with Ho = (H + 2 ph - dh (kH - 1) - 1) / sh + 1.
// Runs as im2col (zero padding, one strided slice a kernel offset) and one batched matmul over
// the groups; groups == C with O a multiple of C is a depthwise convolution.
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(),
              const std::vector<int64_t>& stride = {1}, const std::vector<int64_t>& padding = {0},
              const std::vector<int64_t>& dilation = {1}, int64_t groups = 1);
// conv2d over [N, C, L] (or [C, L]) with weight [O, C/groups, k], as PyTorch's F.conv1d.
Tensor conv1d(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(),
              int64_t stride = 1, int64_t padding = 0, int64_t dilation = 1, int64_t groups = 1);
// Pooling over [N, C, H, W] (or [C, H, W]) as PyTorch's (ceil_mode off): the stride defaults
// to the kernel size, padding is at most half the kernel. max_pool2d pads with -inf;
// avg_pool2d divides by the kernel area, or with count_include_pad false by the number of
// elements of the window inside the input.
Tensor max_pool2d(const Tensor& x, const std::vector<int64_t>& kernel_size,
                  const std::vector<int64_t>& stride = {}, const std::vector<int64_t>& padding = {0},
                  const std::vector<int64_t>& dilation = {1});
Tensor avg_pool2d(const Tensor& x, const std::vector<int64_t>& kernel_size,
                  const std::vector<int64_t>& stride = {}, const std::vector<int64_t>& padding = {0},
                  bool count_include_pad = true);
// Means over the windows [floor(i H / Ho), ceil((i + 1) H / Ho)) (and the same along W), as
// PyTorch's adaptive_avg_pool2d; output_size is {Ho, Wo} or one value for both.
Tensor adaptive_avg_pool2d(const Tensor& x, const std::vector<int64_t>& output_size);
// Batch norm as PyTorch's F.batch_norm over [N, C, ...]: in training, the mean and biased
// variance over every dim but 1 normalize x, and the running stats (when given) are updated in
// place, without history: r = (1 - momentum) r + momentum s, with the unbiased variance. Out of
// training the running stats normalize x. weight and bias [C] are optional.
Tensor batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var,
                  const Tensor& weight = Tensor(), const Tensor& bias = Tensor(),
                  bool training = false, double momentum = 0.1, double eps = 1e-5);
// Group norm as PyTorch's F.group_norm: the C channels of [N, C, ...] in num_groups groups, each
// normalized over its channels and the remaining dims; then weight and bias [C] (optional).
Tensor group_norm(const Tensor& x, int64_t num_groups, const Tensor& weight = Tensor(),
                  const Tensor& bias = Tensor(), double eps = 1e-5);
// Rotary position embedding (LLaMA's rotate-half convention, as transformers'
// apply_rotary_pos_emb) of x [..., T, D]: the pairs (x[i], x[i + D/2]) rotated by the angles
// whose cos and sin are given, [T, D/2] (or broadcastable to [..., T, D/2]), or [..., T, D]
// with each angle twice, as transformers builds them. Apply it to q and k alike.
Tensor rotary_embedding(const Tensor& x, const Tensor& cos, const Tensor& sin);
// The cos and sin tables [seq_len, head_dim/2] of positions 0..seq_len-1 and frequencies
// base^(-2i/head_dim), computed on the host in float64, then cast to opts' dtype and copied to
// its device (build them once, outside a compiled function).
std::pair<Tensor, Tensor> rotary_cos_sin(int64_t seq_len, int64_t head_dim, double base = 10000,
                                         TensorOptions opts = {});
// SwiGLU's gate: silu(a) * b (with a = x W1^T and b = x W3^T in LLaMA's feed-forward).
Tensor swiglu(const Tensor& a, const Tensor& b);
// Inclusive prefix sums along dim (integers and bools sum in int64), as PyTorch's cumsum: log2(n)
// shifted adds, O(n log n) work.
Tensor cumsum(const Tensor& x, int64_t dim);
// x sorted along dim and the int64 positions the values came from, as PyTorch's sort with
// stable=true (equal values keep their order; NaN counts as the largest); argsort: the positions.
std::pair<Tensor, Tensor> sort(const Tensor& x, int64_t dim = -1, bool descending = false);
Tensor argsort(const Tensor& x, int64_t dim = -1, bool descending = false);
// Resizes [N, C, H, W] to size {Ho, Wo} (or one value for both) as PyTorch's F.interpolate: mode
// "nearest" (source index floor(dst * H / Ho)) or "bilinear" (align_corners as PyTorch's).
Tensor interpolate(const Tensor& x, const std::vector<int64_t>& size,
                   const std::string& mode = "nearest", bool align_corners = false);

}  // namespace ember
