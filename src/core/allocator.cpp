// CPU allocator with a size-keyed cache for large blocks.
#include "core/allocator.h"

#include <sys/mman.h>
#include <sys/sysinfo.h>

#include <cstdint>
#include <cstdlib>
#include <map>
#include <mutex>

#include "ember/error.h"
#include "kernels/device_memory.h"

namespace ember {

namespace {
constexpr size_t kAlign = 64;
constexpr size_t kCacheMin = size_t(1) << 20;   // blocks from 1 MiB are cached
constexpr size_t kRound = size_t(2) << 20;      // and rounded up to 2 MiB (huge pages)
constexpr size_t kCacheMax = size_t(4) << 30;   // at most 4 GiB kept

struct Cache {
  std::mutex mu;
  std::multimap<size_t, void*> free_blocks;  // size -> block
  AllocatorStats stats;
};
Cache& cache() {
  static Cache* c = new Cache;  // never destroyed: tensors may outlive static destructors
  return *c;
}

size_t rounded(size_t n) {
  if (n < kCacheMin) return (n + kAlign - 1) / kAlign * kAlign;
  return (n + kRound - 1) / kRound * kRound;
}

// RAM and swap of the machine, in bytes (0 when unknown).
uint64_t memory_and_swap() {
  struct sysinfo si {};
  if (::sysinfo(&si) != 0) return 0;
  return (uint64_t(si.totalram) + uint64_t(si.totalswap)) * si.mem_unit;
}

[[noreturn]] void out_of_memory(size_t nbytes, const char* why) {
  EMBER_FAIL("out of memory: could not allocate ", nbytes, " bytes (",
             double(nbytes) / double(size_t(1) << 30), " GiB) on the CPU", why,
             "; use smaller tensors (or free some: cpu_empty_cache() returns cached blocks)");
}
}  // namespace

void* cpu_alloc(size_t nbytes) {
  // Past PTRDIFF_MAX the rounding below would wrap to a small block. Past RAM and swap the
  // block can never be backed: with overcommit on, the allocation would succeed and the first
  // pass over it get the process killed, so it fails here as it would without overcommit.
  if (nbytes > size_t(PTRDIFF_MAX)) out_of_memory(nbytes, ", more than an address space holds");
  static const uint64_t limit = memory_and_swap();
  if (limit != 0 && nbytes > limit) {
    const std::string why = ", more than the machine's " + std::to_string(limit) + " bytes of "
                            "memory and swap";
    out_of_memory(nbytes, why.c_str());
  }
  size_t n = rounded(nbytes == 0 ? kAlign : nbytes);
  Cache& c = cache();
  if (n >= kCacheMin) {
    std::lock_guard<std::mutex> lock(c.mu);
    auto it = c.free_blocks.find(n);
    if (it != c.free_blocks.end()) {
      void* p = it->second;
      c.free_blocks.erase(it);
      c.stats.cached_bytes -= n;
      c.stats.allocated_bytes += n;
      if (c.stats.allocated_bytes > c.stats.peak_allocated_bytes)
        c.stats.peak_allocated_bytes = c.stats.allocated_bytes;
      return p;
    }
  }
  void* p = std::aligned_alloc(n >= kCacheMin ? kRound : kAlign, n);
  if (!p) {
    cpu_empty_cache();
    p = std::aligned_alloc(n >= kCacheMin ? kRound : kAlign, n);
  }
  if (!p) out_of_memory(nbytes, "");
  if (n >= kCacheMin) madvise(p, n, MADV_HUGEPAGE);
  std::lock_guard<std::mutex> lock(c.mu);
  c.stats.allocated_bytes += n;
  if (c.stats.allocated_bytes > c.stats.peak_allocated_bytes)
    c.stats.peak_allocated_bytes = c.stats.allocated_bytes;
  return p;
}

void cpu_free(void* p, size_t nbytes) {
  if (!p) return;
  size_t n = rounded(nbytes == 0 ? kAlign : nbytes);
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  c.stats.allocated_bytes -= n;
  if (n >= kCacheMin && c.stats.cached_bytes + n <= kCacheMax) {
    c.free_blocks.emplace(n, p);
    c.stats.cached_bytes += n;
    return;
  }
  std::free(p);
}

void cpu_empty_cache() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  for (auto& [n, p] : c.free_blocks) std::free(p);
  c.free_blocks.clear();
  c.stats.cached_bytes = 0;
}

AllocatorStats cpu_allocator_stats() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  return c.stats;
}

void cpu_reset_peak() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  c.stats.peak_allocated_bytes = c.stats.allocated_bytes;
}

std::shared_ptr<Storage> new_storage(size_t nbytes, Device device) {
  if (device.type == DeviceType::CUDA) return device_memory::new_cuda_storage(nbytes, device);
  auto s = std::make_shared<Storage>();
  s->data = cpu_alloc(nbytes);
  s->nbytes = nbytes;
  s->device = device;
  s->deleter = &cpu_free;
  return s;
}

}  // namespace ember
