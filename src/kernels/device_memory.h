// What the core needs from a device backend: memory and copies. src/kernels/cuda implements it
// for CUDA; src/kernels/no_cuda.cpp, in a build without CUDA, raises a clear error instead.
#pragma once
#include <cstddef>
#include <memory>

#include "ember/tensor_impl.h"

namespace ember::device_memory {

// A block of `nbytes` on `device` (CUDA), as Storage with a deleter that returns it to the
// device's cache. Raises ember::Error when the device cannot provide it.
std::shared_ptr<Storage> new_cuda_storage(size_t nbytes, Device device);
// `nbytes` of page-locked host memory (a CPU tensor's storage that copies to a GPU can read
// without making the host wait); null when no GPU is available.
std::shared_ptr<Storage> new_pinned_storage(size_t nbytes);
// Copies nbytes between any two of host and device memory, in the order of the device's
// stream; returns once the destination holds the bytes when it is host memory.
void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, size_t nbytes);

}  // namespace ember::device_memory
