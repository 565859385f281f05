// Creating tensors from metadata.
#include "core/make_tensor.h"

#include "core/allocator.h"
#include "core/shape.h"

namespace ember {

void check_sizes(const Shape& sizes, const char* op) {
  checked_numel(sizes, op);
}
void check_sizes(const Shape& sizes, DType dtype, const char* op) {
  checked_nbytes(sizes, dtype, op);
}

Tensor make_tensor(const Shape& sizes, DType dtype, Device device) {
  // Ops check their outputs by name first (op_registry.cpp); this catches the rest, before
  // a byte count that wrapped allocates too little.
  const int64_t nbytes = checked_nbytes(sizes, dtype, "allocating a tensor");
  auto impl = std::make_shared<TensorImpl>();
  impl->sizes = sizes;
  impl->strides = contiguous_strides(sizes);
  impl->dtype = dtype;
  impl->device = device;
  impl->storage = new_storage(size_t(nbytes), device);
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
