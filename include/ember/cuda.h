// CUDA devices: whether one can be used, waiting for queued work, and the caching allocator.
// Every function works in a build without CUDA and on a machine without a GPU or driver:
// is_available() is then false, device_count() 0, and the rest raise an ember::Error saying so.
#pragma once
#include <cstddef>
#include <cstdint>

namespace ember::cuda {

// Whether ember was built with its CUDA backend (a CUDA toolkit at configure time).
bool built_with_cuda();
// A CUDA build, a driver, and at least one device: CUDA tensors can be made.
bool is_available();
// Devices visible to this process (0 when none, or without a driver).
int device_count();
// Waits until the work queued on `device` (every device when -1) has finished; raises the
// error of a kernel that failed (an out-of-range index found on the device, for one).
void synchronize(int device = -1);

// The caching allocator of one device. Freed blocks stay reserved for reuse; `reserved`
// counts what was taken from the driver, `allocated` what tensors hold.
struct MemoryStats {
  size_t allocated_bytes = 0;
  size_t reserved_bytes = 0;
  size_t peak_allocated_bytes = 0;
  size_t peak_reserved_bytes = 0;
  int64_t allocations = 0;  // requests served
  int64_t cache_hits = 0;   // of which from freed blocks, without the driver
  int64_t ooms = 0;         // requests refused (after emptying the cache and retrying once)
};
// The caching allocator's counters for `device`; a reset of its peaks to the current values.
MemoryStats memory_stats(int device = 0);
void reset_peak_memory_stats(int device = 0);
// Returns every cached block that no tensor uses to the driver.
void empty_cache();

// Whether float32 matmuls on a GPU may run on TF32 tensor cores (inputs rounded to a 10-bit
// mantissa, sums in float32), as PyTorch's torch.backends.cuda.matmul.allow_tf32: off by
// default, so float32 products are computed in full float32. Setting it works in any build.
void set_allow_tf32(bool on);
bool allow_tf32();

// A point in a device's stream, for timing GPU work without waiting for it at each step:
// record two events around the work, then ask the time between them (which waits for the
// second).
class Event {
 public:
  // Creates the event on device 0; throws Error in a build without CUDA or without a device.
  Event();
  ~Event();
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  // Marks the current end of `device`'s queued work.
  void record(int device = 0);
  // Milliseconds from this event to `end` (both recorded); waits until `end` has happened.
  float elapsed_ms(const Event& end) const;

 private:
  void* event_ = nullptr;
};

}  // namespace ember::cuda
