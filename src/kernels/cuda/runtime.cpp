// CUDA runtime: whether a device is there, its stream, synchronization, and errors. The CUDA
// runtime is linked statically and loads the driver itself when first called, so the library
// starts on a machine without a driver; there every query answers "no device".
#include "kernels/cuda/runtime.h"

#include <array>
#include <cstdlib>
#include <mutex>
#include <set>
#include <string>
#include <tuple>

#include "core/env.h"
#include "ember/cuda.h"
#include "ops/op.h"

namespace ember::cuda {

namespace detail {

void check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return;
  cudaGetLastError();  // clear a non-sticky error so the process can go on
  EMBER_FAIL(what, ": CUDA error ", cudaGetErrorName(e), " (", cudaGetErrorString(e), ")");
}

void check_device(int device, const char* what) {
  const int n = device_count();
  EMBER_CHECK(n > 0, what, ": no CUDA device is available (",
              built_with_cuda() ? "no GPU or no driver on this machine" : "a build without CUDA",
              "); use the CPU");
  EMBER_CHECK(device >= 0 && device < n, what, ": there is no device cuda:", device, " (",
              n, " device", n == 1 ? "" : "s", " visible)");
}

// The device this thread last made current through ember: asking the runtime costs a call on
// every launch. (Code that changes the current device behind ember's back should set it back.)
thread_local int tls_current_device = -1;

void use_device(int device) {
  if (tls_current_device == device) return;
  int current = -1;
  check(cudaGetDevice(&current), "cudaGetDevice");
  if (current != device) check(cudaSetDevice(device), "cudaSetDevice");
  tls_current_device = device;
}

namespace {

constexpr int kMaxDevices = 64;
struct DeviceStreams {
  std::array<cudaStream_t, kMaxDevices> streams{};
  std::array<int*, kMaxDevices> counters{};
  std::array<std::once_flag, kMaxDevices> made;
};

DeviceStreams& device_streams(int device) {
  static DeviceStreams s;
  check_device(device, "cuda stream");
  EMBER_CHECK(device < kMaxDevices, "cuda: device index ", device, " is past ", kMaxDevices);
  std::call_once(s.made[size_t(device)], [&] {
    use_device(device);
    check(cudaStreamCreateWithFlags(&s.streams[size_t(device)], cudaStreamNonBlocking),
          "cudaStreamCreate");
    void* c = nullptr;
    // The stream's counters, then a side branch's.
    check(cudaMalloc(&c, size_t(2 * kCounters) * sizeof(int)), "cudaMalloc (counters)");
    // Zeroed on the stream itself (a non-blocking stream does not wait for the legacy one),
    // and waited for, before anything else is queued there.
    check(cudaMemsetAsync(c, 0, size_t(2 * kCounters) * sizeof(int), s.streams[size_t(device)]),
          "cudaMemsetAsync (counters)");
    check(cudaStreamSynchronize(s.streams[size_t(device)]), "cudaStreamSynchronize (counters)");
    s.counters[size_t(device)] = static_cast<int*>(c);
  });
  return s;
}

}  // namespace

bool programmatic_launch() {
  static const bool on = env_switch("EMBER_PDL", true);
  return on;
}

bool early_dependents() {
  static const bool on = programmatic_launch() && env_switch("EMBER_PDL_EARLY", true);
  return on;
}

bool allow_shared(const void* kernel, int device, size_t smem, const char* what) {
  if (smem <= 48 * 1024) return true;
  static std::mutex mu;
  static std::set<std::tuple<const void*, int, size_t>> opted;
  const std::tuple<const void*, int, size_t> key{kernel, device, smem};
  std::lock_guard<std::mutex> lock(mu);
  if (opted.count(key)) return true;
  int optin = 0;
  check(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device), what);
  if (smem > size_t(optin)) return false;
  check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)),
        what);
  opted.insert(key);
  return true;
}

cudaStream_t stream(int device) {
  return device_streams(device).streams[size_t(device)];
}

namespace {
thread_local bool tls_side_branch = false;
}  // namespace

bool on_side_branch() { return tls_side_branch; }
SideBranchScope::SideBranchScope() : prev_(tls_side_branch) { tls_side_branch = true; }
SideBranchScope::~SideBranchScope() { tls_side_branch = prev_; }

int* counters(int device) {
  return device_streams(device).counters[size_t(device)] + (tls_side_branch ? kCounters : 0);
}

namespace {

struct FaultSlots {
  std::array<Fault*, 64> host{};
  std::array<Fault*, 64> device{};
  std::array<std::once_flag, 64> made;
};
FaultSlots& fault_slots() {
  static FaultSlots s;
  return s;
}

std::string fault_message(const Fault& f) {
  const std::string op = f.op >= 0 && f.op < int32_t(kNumOps)
                             ? std::string(op_info(OpId(f.op)).name)
                             : "a CUDA kernel";
  switch (FaultKind(f.kind)) {
    case FaultKind::IndexOutOfRange:
      return op + ": index " + std::to_string(f.value) + " is out of range for dim " +
             std::to_string(f.dim) + " of size " + std::to_string(f.bound) +
             " (valid indices are 0 to " + std::to_string(f.bound - 1) + ")";
    case FaultKind::TargetOutOfRange:
      return op + ": target " + std::to_string(f.value) + " is out of range for " +
             std::to_string(f.bound) + " classes (and is not the ignore_index)";
    case FaultKind::BadWeight:
      return op + ": a weight at index " + std::to_string(f.value) + " in row " +
             std::to_string(f.dim) + " is negative, infinite or NaN; weights must be "
             "non-negative and finite";
    case FaultKind::ZeroRow:
      return op + ": the weights in row " + std::to_string(f.dim) +
             " are all zero; each row needs at least one positive weight";
    case FaultKind::TooFewCategories:
      return op + ": cannot draw " + std::to_string(f.bound) +
             " samples without replacement in row " + std::to_string(f.dim) + ": only " +
             std::to_string(f.value) + " categories have a positive weight";
    case FaultKind::None: break;
  }
  return op + ": a CUDA kernel reported fault " + std::to_string(f.kind);
}

}  // namespace

Fault* fault_slot(int device) {
  FaultSlots& s = fault_slots();
  check_device(device, "cuda fault slot");
  std::call_once(s.made[size_t(device)], [&] {
    use_device(device);
    void* p = nullptr;
    check(cudaHostAlloc(&p, sizeof(Fault), cudaHostAllocMapped | cudaHostAllocPortable),
          "cudaHostAlloc (fault slot)");
    auto* f = static_cast<Fault*>(p);
    f->kind = 0;
    f->op = -1;
    void* d = nullptr;
    check(cudaHostGetDevicePointer(&d, p, 0), "cudaHostGetDevicePointer (fault slot)");
    s.host[size_t(device)] = f;
    s.device[size_t(device)] = static_cast<Fault*>(d);
  });
  return s.device[size_t(device)];
}

void raise_fault(int device) {
  FaultSlots& s = fault_slots();
  if (device < 0 || device >= 64) return;
  volatile Fault* f = s.host[size_t(device)];
  if (f == nullptr || f->kind == 0) return;
  Fault copy{f->kind, f->op, f->value, f->bound, f->dim};
  f->kind = 0;
  f->op = -1;
  EMBER_FAIL(fault_message(copy), " [found by a kernel on cuda:", device,
             ", raised at the next synchronization]");
}

}  // namespace detail

bool built_with_cuda() { return true; }

Event::Event() {
  detail::check_device(0, "cuda::Event");
  cudaEvent_t e = nullptr;
  detail::check(cudaEventCreate(&e), "cuda::Event (cudaEventCreate)");
  event_ = e;
}

Event::~Event() {
  if (event_) cudaEventDestroy(static_cast<cudaEvent_t>(event_));
}

void Event::record(int device) {
  detail::use_device(device);
  detail::check(cudaEventRecord(static_cast<cudaEvent_t>(event_), detail::stream(device)),
                "cuda::Event::record");
}

float Event::elapsed_ms(const Event& end) const {
  auto e = static_cast<cudaEvent_t>(end.event_);
  detail::check(cudaEventSynchronize(e), "cuda::Event::elapsed_ms (cudaEventSynchronize)");
  float ms = 0;
  detail::check(cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(event_), e),
                "cuda::Event::elapsed_ms");
  return ms;
}

int device_count() {
  static const int n = [] {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess) {
      cudaGetLastError();
      return 0;  // no driver, or no device: a normal state
    }
    return count;
  }();
  return n;
}

bool is_available() { return device_count() > 0; }

void synchronize(int device) {
  if (device >= 0) {
    detail::check_device(device, "cuda::synchronize");
    detail::use_device(device);
    detail::check(cudaStreamSynchronize(detail::stream(device)), "cuda::synchronize");
    detail::raise_fault(device);
    return;
  }
  for (int d = 0; d < device_count(); ++d) synchronize(d);
}

}  // namespace ember::cuda
