// device_kernel() for CUDA: the table every kernel family of src/kernels/cuda fills.
#include "kernels/cuda/kernel_table.h"

#include "kernels/device_kernels.h"

namespace ember {

KernelFn device_kernel(OpId op, Device device) {
  static const cuda::KernelTable table = [] {
    cuda::KernelTable t;
    cuda::register_pointwise(t);
    cuda::register_pointwise_math(t);
    cuda::register_pointwise_compare(t);
    cuda::register_pointwise_cast(t);
    cuda::register_pointwise_attrs(t);
    cuda::register_reductions(t);
    cuda::register_softmax(t);
    cuda::register_matmul(t);
    cuda::register_layer_norm(t);
    cuda::register_layer_norm_backward(t);
    cuda::register_index(t);
    cuda::register_losses(t);
    cuda::register_random(t);
    cuda::register_shape_ops(t);
    cuda::register_factories(t);
    cuda::register_nonzero(t);
    cuda::register_attention_forward(t);
    cuda::register_attention_backward(t);
    cuda::register_cached_attention(t);
    return t;
  }();
  return device.type == DeviceType::CUDA ? table.fns[size_t(op)] : nullptr;
}

}  // namespace ember
