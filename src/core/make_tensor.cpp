// Creating tensors from metadata.
#include "core/make_tensor.h"

#include "core/allocator.h"
#include "core/shape.h"

namespace ember {

void check_sizes(const Shape& sizes, const char* op) {
  int64_t n = 1;
  for (int64_t s : sizes) {
    EMBER_CHECK(s >= 0, op, ": negative size in shape ", shape_str(sizes));
    EMBER_CHECK(s == 0 || n <= (int64_t(1) << 62) / s, op, ": shape ", shape_str(sizes),
                " has too many elements");
    n *= s;
  }
}

Tensor make_tensor(const Shape& sizes, DType dtype, Device device) {
  auto impl = std::make_shared<TensorImpl>();
  impl->sizes = sizes;
  impl->strides = contiguous_strides(sizes);
  impl->dtype = dtype;
  impl->device = device;
  impl->storage = new_storage(size_t(impl->numel()) * dtype_size(dtype), device);
  return Tensor(std::move(impl));
}

Tensor make_view(const Tensor& base, const Shape& sizes, const Shape& strides, int64_t offset) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = base.impl()->storage;
  impl->symbolic = nullptr;
  impl->sizes = sizes;
  impl->strides = strides;
  impl->offset = offset;
  impl->dtype = base.dtype();
  impl->device = base.device();
  impl->is_view = true;
  return Tensor(std::move(impl));
}

}  // namespace ember
