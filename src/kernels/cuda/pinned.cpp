// Page-locked host memory for copies to the GPU that do not wait: a copy from pageable memory
// is staged by the driver and can block the host until the device catches up, a copy from
// pinned memory is queued and returns. Blocks are cached by size. A freed block records an
// event on every device's stream (the copies that read it were queued before the free), and is
// handed out again only once that event has completed, so a batch being copied is never
// overwritten by the next one.
#include <map>
#include <mutex>
#include <vector>

#include "ember/cuda.h"
#include "kernels/cuda/runtime.h"
#include "kernels/device_memory.h"

namespace ember {

namespace {

struct PinnedBlock {
  void* ptr = nullptr;
  std::vector<cudaEvent_t> done;  // one per device, recorded at free
};

struct PinnedCache {
  std::mutex mu;
  std::multimap<size_t, PinnedBlock> free;  // by size
  std::map<void*, PinnedBlock> live;
};
PinnedCache& pinned_cache() {
  static PinnedCache* c = new PinnedCache;  // never destroyed: tensors may outlive it
  return *c;
}

bool completed(const PinnedBlock& b) {
  for (cudaEvent_t e : b.done) {
    const cudaError_t r = cudaEventQuery(e);
    if (r == cudaErrorNotReady) return false;
    cuda::detail::check(r, "pinned memory (cudaEventQuery)");
  }
  return true;
}

void pinned_free(void* p, size_t nbytes) {
  PinnedCache& c = pinned_cache();
  std::lock_guard<std::mutex> lock(c.mu);
  auto it = c.live.find(p);
  if (it == c.live.end()) return;
  PinnedBlock b = std::move(it->second);
  c.live.erase(it);
  const int n = cuda::device_count();
  for (int d = 0; d < n; ++d) {
    if (size_t(d) >= b.done.size()) {
      cuda::detail::use_device(d);
      cudaEvent_t e;
      cuda::detail::check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming),
                          "pinned memory (cudaEventCreate)");
      b.done.push_back(e);
    }
    cuda::detail::use_device(d);
    cuda::detail::check(cudaEventRecord(b.done[size_t(d)], cuda::detail::stream(d)),
                        "pinned memory (cudaEventRecord)");
  }
  c.free.emplace(nbytes, std::move(b));
}

}  // namespace

namespace device_memory {

std::shared_ptr<Storage> new_pinned_storage(size_t nbytes) {
  if (!cuda::is_available()) return nullptr;
  PinnedCache& c = pinned_cache();
  PinnedBlock block;
  {
    std::lock_guard<std::mutex> lock(c.mu);
    auto [lo, hi] = c.free.equal_range(nbytes);
    for (auto it = lo; it != hi; ++it) {
      if (!completed(it->second)) continue;
      block = std::move(it->second);
      c.free.erase(it);
      break;
    }
  }
  if (block.ptr == nullptr) {
    cuda::detail::check(cudaHostAlloc(&block.ptr, nbytes == 0 ? 1 : nbytes, cudaHostAllocPortable),
                        "pinned host memory (cudaHostAlloc)");
  }
  auto s = std::make_shared<Storage>();
  s->data = block.ptr;
  s->nbytes = nbytes;
  s->device = kCPU;
  s->deleter = &pinned_free;
  std::lock_guard<std::mutex> lock(c.mu);
  c.live.emplace(block.ptr, std::move(block));
  return s;
}

}  // namespace device_memory

}  // namespace ember
