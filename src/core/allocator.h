// CPU memory: 64-byte aligned blocks; large blocks are cached and reused, since fresh pages
// from the OS cost a page fault each and would dominate memory-bound kernels.
#pragma once
#include <cstddef>
#include <memory>

#include "ember/tensor_impl.h"

namespace ember {

void* cpu_alloc(size_t nbytes);
void cpu_free(void* p, size_t nbytes);
// Frees every cached block (e.g. before measuring memory).
void cpu_empty_cache();
struct AllocatorStats {
  size_t allocated_bytes = 0;       // live, handed out to tensors
  size_t peak_allocated_bytes = 0;  // high-water mark of allocated_bytes
  size_t cached_bytes = 0;          // freed, kept for reuse
};
AllocatorStats cpu_allocator_stats();
void cpu_reset_peak();

std::shared_ptr<Storage> new_storage(size_t nbytes, Device device);

}  // namespace ember
