// CUDA runtime: whether a device is there, its stream, synchronization, and errors. The CUDA
// runtime is linked statically and loads the driver itself when first called, so the library
// starts on a machine without a driver; there every query answers "no device".
#include "kernels/cuda/runtime.h"

#include <array>
#include <mutex>
#include <string>

#include "ember/cuda.h"

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

void use_device(int device) {
  int current = -1;
  check(cudaGetDevice(&current), "cudaGetDevice");
  if (current != device) check(cudaSetDevice(device), "cudaSetDevice");
}

cudaStream_t stream(int device) {
  constexpr int kMaxDevices = 64;
  static std::array<cudaStream_t, kMaxDevices> streams{};
  static std::array<std::once_flag, kMaxDevices> made;
  check_device(device, "cuda stream");
  EMBER_CHECK(device < kMaxDevices, "cuda: device index ", device, " is past ", kMaxDevices);
  std::call_once(made[size_t(device)], [&] {
    use_device(device);
    check(cudaStreamCreateWithFlags(&streams[size_t(device)], cudaStreamNonBlocking),
          "cudaStreamCreate");
  });
  return streams[size_t(device)];
}

}  // namespace detail

bool built_with_cuda() { return true; }

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
    return;
  }
  for (int d = 0; d < device_count(); ++d) synchronize(d);
}

}  // namespace ember::cuda
