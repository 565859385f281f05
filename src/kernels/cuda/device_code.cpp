// Loading and launching generated device code through the CUDA runtime's library management
// (cudaLibraryLoadData, cudaLibraryGetKernel): images load into every device's context, and a
// kernel handle launches through cudaLaunchKernel like a compiled-in kernel.
#include "kernels/device_code.h"

#include <array>
#include <mutex>

#include "kernels/cuda/runtime.h"

namespace ember::device_code {

namespace {

class CudaModule : public Module {
 public:
  explicit CudaModule(cudaLibrary_t lib) : lib_(lib) {}
  ~CudaModule() override { cudaLibraryUnload(lib_); }
  const void* kernel(const std::string& name) const override {
    cudaKernel_t k = nullptr;
    cuda::detail::check(cudaLibraryGetKernel(&k, lib_, name.c_str()),
                        ("generated CUDA code: kernel " + name).c_str());
    return reinterpret_cast<const void*>(k);
  }

 private:
  cudaLibrary_t lib_;
};

struct DeviceInfo {
  int cc = 0, sms = 0;
};
const DeviceInfo& info(int device) {
  constexpr int kMax = 64;
  static std::array<DeviceInfo, kMax> infos;
  static std::array<std::once_flag, kMax> once;
  cuda::detail::check_device(device, "generated CUDA code");
  std::call_once(once[size_t(device)], [&] {
    cudaDeviceProp p{};
    cuda::detail::check(cudaGetDeviceProperties(&p, device), "cudaGetDeviceProperties");
    infos[size_t(device)] = {p.major * 10 + p.minor, p.multiProcessorCount};
  });
  return infos[size_t(device)];
}

}  // namespace

std::shared_ptr<const Module> load(const std::string& image) {
  cudaLibrary_t lib = nullptr;
  cuda::detail::check(cudaLibraryLoadData(&lib, image.data(), nullptr, nullptr, 0, nullptr,
                                          nullptr, 0),
                      "generated CUDA code: loading the module");
  return std::make_shared<CudaModule>(lib);
}

int compute_capability(int device) { return info(device).cc; }
int multiprocessors(int device) { return info(device).sms; }

void launch(const void* kernel, int device, unsigned grid, unsigned block, void** args,
            const char* what) {
  cuda::detail::use_device(device);
  cuda::detail::check(cudaLaunchKernel(kernel, dim3(grid), dim3(block), args, 0,
                                       cuda::detail::stream(device)),
                      what);
}

}  // namespace ember::device_code
