// The zoo's layers (include/ember/layers.h): Conv2d, BatchNorm2d, GroupNorm, RMSNorm,
// activations, pooling, GRUCell.
#include <cmath>

#include "ember/autograd.h"
#include "ember/layers.h"
#include "ember/ops.h"

namespace ember::nn {

void init_uniform_(Tensor& t, double bound) {
  NoGradGuard g;
  t.copy_((rand(t.sizes(), t.dtype()) * 2.0 - 1.0) * bound);
}

namespace {
// {h, w} of a one- or two-value argument, checked.
std::vector<int64_t> pair_of(const std::vector<int64_t>& v, const char* layer, const char* what) {
  EMBER_CHECK(v.size() == 1 || v.size() == 2, layer, ": ", what,
              " must be one value or {height, width}, got ", v.size(), " values");
  return v.size() == 1 ? std::vector<int64_t>{v[0], v[0]} : v;
}
}  // namespace

Conv2d::Conv2d(int64_t in, int64_t out, std::vector<int64_t> kernel_size,
               std::vector<int64_t> stride_, std::vector<int64_t> padding_,
               std::vector<int64_t> dilation_, int64_t groups_, bool with_bias)
    : Module("Conv2d"),
      stride(std::move(stride_)),
      padding(std::move(padding_)),
      dilation(std::move(dilation_)),
      groups(groups_) {
  EMBER_CHECK(in > 0 && out > 0, "Conv2d: channels must be positive, got ", in, " -> ", out);
  EMBER_CHECK(groups > 0 && in % groups == 0 && out % groups == 0, "Conv2d: groups (", groups,
              ") must divide in_channels (", in, ") and out_channels (", out, ")");
  const std::vector<int64_t> k = pair_of(kernel_size, "Conv2d", "kernel_size");
  const int64_t fan_in = in / groups * k[0] * k[1];
  const double bound = 1.0 / std::sqrt(double(fan_in));
  register_parameter("weight", weight, empty({out, in / groups, k[0], k[1]}));
  init_uniform_(weight, bound);
  if (with_bias) {
    register_parameter("bias", bias, empty({out}));
    init_uniform_(bias, bound);
  }
}

Tensor Conv2d::forward(const Tensor& x) const {
  return conv2d(x, weight, bias, stride, padding, dilation, groups);
}

BatchNorm2d::BatchNorm2d(int64_t c, double eps_, double momentum_, bool affine)
    : Module("BatchNorm2d"), eps(eps_), momentum(momentum_) {
  EMBER_CHECK(c > 0, "BatchNorm2d: num_features must be positive, got ", c);
  if (affine) {
    register_parameter("weight", weight, ones({c}));
    register_parameter("bias", bias, zeros({c}));
  }
  register_buffer("running_mean", running_mean, zeros({c}));
  register_buffer("running_var", running_var, ones({c}));
  register_buffer("num_batches_tracked", num_batches_tracked, zeros({}, DType::Int64));
}

Tensor BatchNorm2d::forward(const Tensor& x) const {
  EMBER_CHECK(x.dim() == 4, "BatchNorm2d: expected [N, C, H, W], got ", x.shape_str());
  const bool training = is_training();
  if (training) {
    NoGradGuard no_grad;
    Tensor n = num_batches_tracked;
    n.add_(1.0);
  }
  return batch_norm(x, running_mean, running_var, weight, bias, training, momentum, eps);
}

GroupNorm::GroupNorm(int64_t groups, int64_t c, double eps_, bool affine)
    : Module("GroupNorm"), num_groups(groups), eps(eps_) {
  EMBER_CHECK(groups > 0 && c > 0 && c % groups == 0, "GroupNorm: num_groups (", groups,
              ") must divide num_channels (", c, ")");
  if (affine) {
    register_parameter("weight", weight, ones({c}));
    register_parameter("bias", bias, zeros({c}));
  }
}

Tensor GroupNorm::forward(const Tensor& x) const {
  return group_norm(x, num_groups, weight, bias, eps);
}

RMSNorm::RMSNorm(int64_t dim_, std::optional<double> eps_, bool affine)
    : Module("RMSNorm"), dim(dim_), eps(eps_) {
  EMBER_CHECK(dim > 0, "RMSNorm: dim must be positive, got ", dim);
  if (affine) register_parameter("weight", weight, ones({dim}));
}

Tensor RMSNorm::forward(const Tensor& x) const { return rms_norm(x, {dim}, weight, eps); }

Tensor ReLU::forward(const Tensor& x) const { return x.relu(); }
Tensor SiLU::forward(const Tensor& x) const { return x.silu(); }
Tensor ReLU6::forward(const Tensor& x) const { return x.clamp(0.0, 6.0); }

MaxPool2d::MaxPool2d(std::vector<int64_t> k, std::vector<int64_t> s, std::vector<int64_t> p)
    : Module("MaxPool2d"), kernel_size(std::move(k)), stride(std::move(s)), padding(std::move(p)) {}

Tensor MaxPool2d::forward(const Tensor& x) const {
  return max_pool2d(x, kernel_size, stride, padding);
}

AvgPool2d::AvgPool2d(std::vector<int64_t> k, std::vector<int64_t> s, std::vector<int64_t> p)
    : Module("AvgPool2d"), kernel_size(std::move(k)), stride(std::move(s)), padding(std::move(p)) {}

Tensor AvgPool2d::forward(const Tensor& x) const {
  return avg_pool2d(x, kernel_size, stride, padding);
}

AdaptiveAvgPool2d::AdaptiveAvgPool2d(std::vector<int64_t> size)
    : Module("AdaptiveAvgPool2d"), output_size(std::move(size)) {}

Tensor AdaptiveAvgPool2d::forward(const Tensor& x) const {
  return adaptive_avg_pool2d(x, output_size);
}

GRUCell::GRUCell(int64_t in, int64_t hidden, bool with_bias)
    : Module("GRUCell"), hidden_size(hidden) {
  EMBER_CHECK(in > 0 && hidden > 0, "GRUCell: sizes must be positive, got ", in, " -> ", hidden);
  const double bound = 1.0 / std::sqrt(double(hidden));
  register_parameter("weight_ih", weight_ih, empty({3 * hidden, in}));
  init_uniform_(weight_ih, bound);
  register_parameter("weight_hh", weight_hh, empty({3 * hidden, hidden}));
  init_uniform_(weight_hh, bound);
  if (with_bias) {
    register_parameter("bias_ih", bias_ih, empty({3 * hidden}));
    init_uniform_(bias_ih, bound);
    register_parameter("bias_hh", bias_hh, empty({3 * hidden}));
    init_uniform_(bias_hh, bound);
  }
}

Tensor GRUCell::forward(const Tensor& x, const Tensor& h) const {
  EMBER_CHECK(x.dim() == 2 && h.dim() == 2 && h.size(1) == hidden_size,
              "GRUCell: expected x [B, I] and h [B, ", hidden_size, "], got ", x.shape_str(),
              " and ", h.shape_str());
  const int64_t H = hidden_size;
  std::vector<Tensor> gi = linear(x, weight_ih, bias_ih).split(H, 1);  // r, z, n
  std::vector<Tensor> gh = linear(h, weight_hh, bias_hh).split(H, 1);
  Tensor r = (gi[0] + gh[0]).sigmoid();
  Tensor z = (gi[1] + gh[1]).sigmoid();
  Tensor n = (gi[2] + r * gh[2]).tanh();
  return (1.0 - z) * n + z * h;
}

}  // namespace ember::nn
