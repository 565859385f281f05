// The layers of the model zoo (include/ember/models.h): convolution, batch / group / RMS
// normalization, activations, pooling and a GRU cell, with PyTorch's names, arguments and
// semantics. Weights are drawn from ember's seeded generator, so a manual_seed fixes them.
#pragma once
#include <cstdint>
#include <optional>
#include <vector>

#include "ember/nn.h"
#include "ember/tensor.h"

namespace ember::nn {

// Fills t in place (no grad) with uniform(-bound, bound) values.
void init_uniform_(Tensor& t, double bound);

class Conv2d : public Module {
 public:
  // F.conv2d over [N, C, H, W] with weight [out, in/groups, kH, kW] and bias [out]; a kernel
  // size, stride, padding or dilation is one value for both dims or {height, width}. Weight
  // and bias uniform(-1/sqrt(fan_in), 1/sqrt(fan_in)), fan_in = in/groups * kH * kW, the bounds
  // of PyTorch's default init.
  Conv2d(int64_t in_channels, int64_t out_channels, std::vector<int64_t> kernel_size,
         std::vector<int64_t> stride = {1}, std::vector<int64_t> padding = {0},
         std::vector<int64_t> dilation = {1}, int64_t groups = 1, bool bias = true);
  Tensor forward(const Tensor& x) const;
  Tensor weight, bias;
  std::vector<int64_t> stride, padding, dilation;
  int64_t groups;
};

class BatchNorm2d : public Module {
 public:
  // Batch norm over the channels of [N, C, H, W]: in training mode the batch statistics
  // normalize and update running_mean / running_var (momentum as PyTorch's: r = (1 - m) r +
  // m s) and num_batches_tracked counts the updates; in eval mode the running stats normalize.
  // weight 1 and bias 0 when affine.
  explicit BatchNorm2d(int64_t num_features, double eps = 1e-5, double momentum = 0.1,
                       bool affine = true);
  Tensor forward(const Tensor& x) const;
  Tensor weight, bias;                                       // [C], when affine
  Tensor running_mean, running_var, num_batches_tracked;    // buffers: [C], [C], int64 []
  double eps, momentum;
};

class GroupNorm : public Module {
 public:
  // Group norm over [N, C, ...] in num_groups groups (C divisible by it); weight 1, bias 0.
  GroupNorm(int64_t num_groups, int64_t num_channels, double eps = 1e-5, bool affine = true);
  Tensor forward(const Tensor& x) const;
  Tensor weight, bias;
  int64_t num_groups;
  double eps;
};

class RMSNorm : public Module {
 public:
  // RMSNorm over the last dim (size dim), as PyTorch's nn.RMSNorm: weight 1; eps unset is the
  // machine epsilon of the input's dtype.
  explicit RMSNorm(int64_t dim, std::optional<double> eps = std::nullopt,
                   bool elementwise_affine = true);
  Tensor forward(const Tensor& x) const;
  Tensor weight;
  int64_t dim;
  std::optional<double> eps;
};

// Activations as modules (no parameters).
class ReLU : public Module {
 public:
  // max(x, 0).
  ReLU() : Module("ReLU") {}
  Tensor forward(const Tensor& x) const;
};
class SiLU : public Module {
 public:
  // x sigmoid(x).
  SiLU() : Module("SiLU") {}
  Tensor forward(const Tensor& x) const;
};
class ReLU6 : public Module {
 public:
  // min(max(x, 0), 6), MobileNetV2's activation.
  ReLU6() : Module("ReLU6") {}
  Tensor forward(const Tensor& x) const;
};

class MaxPool2d : public Module {
 public:
  // max_pool2d with these arguments (stride empty: the kernel size).
  explicit MaxPool2d(std::vector<int64_t> kernel_size, std::vector<int64_t> stride = {},
                     std::vector<int64_t> padding = {0});
  Tensor forward(const Tensor& x) const;
  std::vector<int64_t> kernel_size, stride, padding;
};

class AvgPool2d : public Module {
 public:
  // avg_pool2d with these arguments (stride empty: the kernel size).
  explicit AvgPool2d(std::vector<int64_t> kernel_size, std::vector<int64_t> stride = {},
                     std::vector<int64_t> padding = {0});
  Tensor forward(const Tensor& x) const;
  std::vector<int64_t> kernel_size, stride, padding;
};

class AdaptiveAvgPool2d : public Module {
 public:
  // adaptive_avg_pool2d to output_size ({Ho, Wo} or one value for both).
  explicit AdaptiveAvgPool2d(std::vector<int64_t> output_size);
  Tensor forward(const Tensor& x) const;
  std::vector<int64_t> output_size;
};

class GRUCell : public Module {
 public:
  // PyTorch's nn.GRUCell: gates r, z, n in that order in weight_ih [3H, I], weight_hh [3H, H],
  // bias_ih and bias_hh [3H], all uniform(-1/sqrt(H), 1/sqrt(H));
  // r = sigmoid(x W_ir + b_ir + h W_hr + b_hr), z likewise, n = tanh(x W_in + b_in + r (h W_hn +
  // b_hn)), h' = (1 - z) n + z h.
  GRUCell(int64_t input_size, int64_t hidden_size, bool bias = true);
  // x [B, I], h [B, H] -> h' [B, H].
  Tensor forward(const Tensor& x, const Tensor& h) const;
  Tensor weight_ih, weight_hh, bias_ih, bias_hh;
  int64_t hidden_size;
};

}  // namespace ember::nn
