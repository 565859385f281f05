// The CUDA caching allocator. cudaMalloc and cudaFree synchronize the device and cost tens of
// microseconds, so freed blocks are kept and handed out again. Requests are rounded to 512
// bytes; those up to 1 MiB are cut from 2 MiB segments, larger ones get segments rounded to
// 2 MiB. A request takes the smallest free block that fits and splits off the rest; a freed
// block merges with its free neighbours of the same segment. All of ember's work on a device
// runs on one stream, so a block freed on the host may be reused at once: the next user's
// kernels are ordered after the last reader's. Out of memory (or past EMBER_CUDA_MEMORY_LIMIT)
// the cache is emptied and the request tried once more before an ember::Error.
//
// A CUDA graph's recording allocates from a private pool instead (cuda_graph::Pool): segments of
// its own, whose blocks return to it when freed, so that memory a recorded graph writes is never
// handed to anyone else while the recording lives.
#include <cstdlib>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>

#include "ember/cuda.h"
#include "kernels/cuda/runtime.h"
#include "kernels/cuda_graph.h"
#include "kernels/device_memory.h"

namespace ember {

namespace {

constexpr size_t kRound = 512;
constexpr size_t kSmallRequest = size_t(1) << 20;
constexpr size_t kSmallSegment = size_t(2) << 20;
constexpr size_t kLargeRound = size_t(2) << 20;
constexpr size_t kMinLargeSplit = size_t(1) << 20;  // a large block's rest is kept from 1 MiB
constexpr int kMaxDevices = 64;

struct Pools;
struct Block {
  int device = 0;
  size_t size = 0;
  char* ptr = nullptr;
  bool small = false;
  bool free = false;
  Block* prev = nullptr;  // neighbours in the same segment
  Block* next = nullptr;
  Pools* home = nullptr;  // the free lists it returns to: its device's, or a private pool's
};
struct BySize {
  bool operator()(const Block* a, const Block* b) const {
    return a->size != b->size ? a->size < b->size : a->ptr < b->ptr;
  }
};
struct Pools {
  std::set<Block*, BySize> small, large;  // free blocks
  cuda::MemoryStats stats;  // a device's (a private pool counts in its device's)
};

struct Cache {
  std::mutex mu;
  Pools devices[kMaxDevices];
  std::unordered_map<void*, Block*> live;  // handed-out blocks by address
};
Cache& cache() {
  static Cache* c = new Cache;  // never destroyed: tensors may outlive static destructors
  return *c;
}

}  // namespace

namespace cuda_graph {
class Pool {
 public:
  explicit Pool(int device) : device(device) {}
  ~Pool();
  const int device;
  // Its free blocks; its stats count only the segments made for it (reserved_bytes), all else
  // counts in its device's.
  Pools pools;
};
}  // namespace cuda_graph

namespace {

// The private pool this thread's allocations come from (cuda_graph::PoolScope), if any.
thread_local cuda_graph::Pool* tl_pool = nullptr;
// The segments' bytes of the pools alive (cuda_graph::live_pool_bytes). Under Cache::mu.
size_t g_pool_bytes = 0;

size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

// EMBER_CUDA_MEMORY_LIMIT: the most each device may reserve, in bytes, with an optional K, M
// or G suffix (powers of 1024); unset or 0: what the device has.
size_t memory_limit() {
  static const size_t limit = [] {
    const char* e = std::getenv("EMBER_CUDA_MEMORY_LIMIT");
    if (!e || !*e) return size_t(0);
    char* end = nullptr;
    double v = std::strtod(e, &end);
    EMBER_CHECK(end != e && v >= 0, "EMBER_CUDA_MEMORY_LIMIT=", e,
                ": expected a byte count such as 8G, 512M or 1000000");
    switch (*end) {
      case 'k': case 'K': v *= 1024.0; break;
      case 'm': case 'M': v *= 1024.0 * 1024; break;
      case 'g': case 'G': v *= 1024.0 * 1024 * 1024; break;
      default: break;
    }
    return size_t(v);
  }();
  return limit;
}

std::string stats_str(const cuda::MemoryStats& s) {
  auto mib = [](size_t b) { return std::to_string(b >> 20) + " MiB"; };
  return "allocated " + mib(s.allocated_bytes) + ", reserved " + mib(s.reserved_bytes) +
         ", peak allocated " + mib(s.peak_allocated_bytes) +
         (memory_limit() ? ", limit " + mib(memory_limit()) + " (EMBER_CUDA_MEMORY_LIMIT)" : "");
}

// Returns the free whole segments of a device to the driver. Caller holds the lock.
void release_cached(Pools& p) {
  for (auto* pool : {&p.small, &p.large}) {
    for (auto it = pool->begin(); it != pool->end();) {
      Block* b = *it;
      if (b->prev || b->next) {
        ++it;
        continue;
      }
      cuda::detail::use_device(b->device);
      cuda::detail::check(cudaFree(b->ptr), "cudaFree");
      p.stats.reserved_bytes -= b->size;
      it = pool->erase(it);
      delete b;
    }
  }
}

// A new segment from the driver, after emptying the cache once if needed. Caller holds the
// lock.
// `may_release`: false while a CUDA graph records (cudaFree would end the recording).
char* new_segment(int device, size_t size, size_t request, Pools& p, bool may_release) {
  for (int attempt = 0; attempt < 2; ++attempt) {
    if (attempt == 1) {
      if (!may_release) continue;
      release_cached(p);
    }
    if (memory_limit() && p.stats.reserved_bytes + size > memory_limit()) continue;
    void* ptr = nullptr;
    cudaError_t e = cudaMalloc(&ptr, size);
    if (e == cudaSuccess) {
      p.stats.reserved_bytes += size;
      if (p.stats.reserved_bytes > p.stats.peak_reserved_bytes)
        p.stats.peak_reserved_bytes = p.stats.reserved_bytes;
      return static_cast<char*>(ptr);
    }
    if (e != cudaErrorMemoryAllocation) cuda::detail::check(e, "cudaMalloc");
    cudaGetLastError();
  }
  p.stats.ooms++;
  EMBER_FAIL("out of memory on cuda:", device, ": could not allocate ", request, " bytes (",
             double(request) / double(size_t(1) << 30), " GiB); ", stats_str(p.stats),
             ". Free tensors you no longer need, use smaller batches, or raise "
             "EMBER_CUDA_MEMORY_LIMIT");
}

void* cuda_malloc(int device, size_t nbytes) {
  const size_t size = round_up(nbytes ? nbytes : 1, kRound);
  const bool small = size <= kSmallRequest;
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  Pools& p = c.devices[device];
  Pools& home = tl_pool && tl_pool->device == device ? tl_pool->pools : p;
  auto& pool = small ? home.small : home.large;
  Block key;
  key.size = size;
  Block* b = nullptr;
  if (auto it = pool.lower_bound(&key); it != pool.end()) {
    b = *it;
    pool.erase(it);
    p.stats.cache_hits++;
  } else {
    const size_t seg = small ? kSmallSegment : round_up(size, kLargeRound);
    cuda::detail::use_device(device);
    b = new Block{device, seg, new_segment(device, seg, nbytes, p, &home == &p), small};
    b->home = &home;
    if (&home != &p) {  // a recording's pool: its own segment
      home.stats.reserved_bytes += seg;
      g_pool_bytes += seg;
    }
  }
  const size_t rest = b->size - size;
  if (rest >= (small ? kRound : kMinLargeSplit)) {
    auto* r = new Block{device, rest, b->ptr + size, small, true, b, b->next, &home};
    if (b->next) b->next->prev = r;
    b->next = r;
    b->size = size;
    pool.insert(r);
  }
  b->free = false;
  c.live[b->ptr] = b;
  p.stats.allocations++;
  p.stats.allocated_bytes += b->size;
  if (p.stats.allocated_bytes > p.stats.peak_allocated_bytes)
    p.stats.peak_allocated_bytes = p.stats.allocated_bytes;
  return b->ptr;
}

// The blocks held instead of freed on this thread (cuda_graph::FreesHeld), if any.
thread_local std::vector<void*>* tl_held = nullptr;

void cuda_free(void* ptr, size_t) {
  if (tl_held) {
    tl_held->push_back(ptr);
    return;
  }
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  auto it = c.live.find(ptr);
  if (it == c.live.end()) return;  // not ours: nothing to do (never happens for our storage)
  Block* b = it->second;
  c.live.erase(it);
  Pools& p = c.devices[b->device];
  auto& pool = b->small ? b->home->small : b->home->large;
  p.stats.allocated_bytes -= b->size;
  b->free = true;
  if (Block* prev = b->prev; prev && prev->free) {
    pool.erase(prev);
    prev->size += b->size;
    prev->next = b->next;
    if (b->next) b->next->prev = prev;
    delete b;
    b = prev;
  }
  if (Block* next = b->next; next && next->free) {
    pool.erase(next);
    b->size += next->size;
    b->next = next->next;
    if (next->next) next->next->prev = b;
    delete next;
  }
  pool.insert(b);
}

}  // namespace

namespace cuda {

MemoryStats memory_stats(int device) {
  detail::check_device(device, "cuda::memory_stats");
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  return c.devices[device].stats;
}

void reset_peak_memory_stats(int device) {
  detail::check_device(device, "cuda::reset_peak_memory_stats");
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  MemoryStats& s = c.devices[device].stats;
  s.peak_allocated_bytes = s.allocated_bytes;
  s.peak_reserved_bytes = s.reserved_bytes;
}

void empty_cache() {
  if (!is_available()) return;
  synchronize();  // blocks freed on the host may still be read by queued kernels
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  for (int d = 0; d < device_count() && d < kMaxDevices; ++d) release_cached(c.devices[d]);
}

}  // namespace cuda

namespace device_memory {

std::shared_ptr<Storage> new_cuda_storage(size_t nbytes, Device device) {
  cuda::detail::check_device(device.index, ("a tensor on " + device.str()).c_str());
  EMBER_CHECK(device.index < kMaxDevices, "cuda: device index ", device.index, " is past ",
              kMaxDevices);
  auto s = std::make_shared<Storage>();
  s->data = cuda_malloc(device.index, nbytes);
  s->nbytes = nbytes;
  s->device = device;
  s->deleter = &cuda_free;
  return s;
}

void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device,
                size_t nbytes) {
  if (nbytes == 0) return;
  const bool dst_gpu = dst_device.type == DeviceType::CUDA;
  const bool src_gpu = src_device.type == DeviceType::CUDA;
  const int dev = src_gpu ? src_device.index : dst_device.index;
  if (src_gpu && dst_gpu && src_device.index != dst_device.index)
    cuda::synchronize(dst_device.index);  // the destination's earlier users first
  cuda::detail::use_device(dev);
  cudaStream_t s = cuda::detail::stream(dev);
  cuda::detail::check(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDefault, s),
                      "copy between devices (cudaMemcpyAsync)");
  // Host memory written, or a device read by another stream: wait for the bytes.
  if (!dst_gpu || (src_gpu && dst_gpu && src_device.index != dst_device.index)) {
    cuda::detail::check(cudaStreamSynchronize(s), "copy between devices");
    cuda::detail::raise_fault(dev);
  }
}

}  // namespace device_memory

namespace cuda_graph {

// Its segments join the device's cache: free blocks at once, blocks still in use once freed.
// The device's stream orders any replay still queued before the next user of the memory.
Pool::~Pool() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  Pools& dev = c.devices[device];
  for (auto* set : {&pools.small, &pools.large})
    for (Block* b : *set) {
      b->home = &dev;
      (b->small ? dev.small : dev.large).insert(b);
    }
  for (auto& [ptr, b] : c.live)
    if (b->home == &pools) b->home = &dev;
  g_pool_bytes -= pools.stats.reserved_bytes;
}

size_t pool_bytes(const Pool& pool) {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  return pool.pools.stats.reserved_bytes;
}

size_t live_pool_bytes() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  return g_pool_bytes;
}

std::shared_ptr<Pool> new_pool(int device) {
  cuda::detail::check_device(device, "a CUDA graph's memory pool");
  return std::make_shared<Pool>(device);
}

FreesHeld::FreesHeld(std::vector<void*>* into) : prev_(tl_held) { tl_held = into; }
FreesHeld::~FreesHeld() { tl_held = prev_; }
void free_held(std::vector<void*>& blocks) {
  std::vector<void*>* prev = std::exchange(tl_held, nullptr);
  for (void* p : blocks) cuda_free(p, 0);
  tl_held = prev;
  blocks.clear();
}

PoolScope::PoolScope(Pool* pool) : prev_(tl_pool) { tl_pool = pool; }
PoolScope::~PoolScope() { tl_pool = prev_; }

bool in_a_pool(const void* data) {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  auto it = c.live.find(const_cast<void*>(data));
  return it != c.live.end() && it->second->home != &c.devices[it->second->device];
}

void move_out(Storage& s) {
  const int device = s.device.index;
  void* fresh = nullptr;
  {
    PoolScope shared(nullptr);  // the shared cache, whatever scope this thread is in
    fresh = cuda_malloc(device, s.nbytes);
  }
  cuda::detail::use_device(device);
  cuda::detail::check(cudaMemcpyAsync(fresh, s.data, s.nbytes, cudaMemcpyDeviceToDevice,
                                      cuda::detail::stream(device)),
                      "moving a replay's output out of its CUDA graph's pool");
  if (s.deleter) s.deleter(s.data, s.nbytes);
  s.data = fresh;
  s.deleter = &cuda_free;
}

}  // namespace cuda_graph

}  // namespace ember
