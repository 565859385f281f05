// What the compiler needs from a device backend to run the code it generates: load a binary
// image (a cubin or PTX that NVRTC built), find its kernels, and launch them on the device's
// stream. src/kernels/cuda implements it; a build without CUDA raises a clear error instead.
#pragma once
#include <memory>
#include <string>

namespace ember::device_code {

// A loaded image; its kernels stay valid while it is held.
class Module {
 public:
  virtual ~Module() = default;
  // The kernel named `name` (an extern "C" __global__ function); throws Error when missing.
  virtual const void* kernel(const std::string& name) const = 0;
};

// Loads a cubin or PTX image (the driver compiles PTX for the GPU it finds).
std::shared_ptr<const Module> load(const std::string& image);

// The compute capability of `device` as major * 10 + minor (90 for an H100/H200), and its
// multiprocessor count.
int compute_capability(int device);
int multiprocessors(int device);

// Launches `kernel` on `device`'s stream: grid and block along x, `args` pointing at each
// parameter's value. Raises Error naming `what` when the launch fails.
void launch(const void* kernel, int device, unsigned grid, unsigned block, void** args,
            const char* what);

}  // namespace ember::device_code
