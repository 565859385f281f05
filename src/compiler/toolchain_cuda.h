// Building generated CUDA C++ with NVRTC (loaded at run time, like the driver) and loading the
// binaries onto the GPU: cubin for the GPU's architecture (sm_90a on Hopper), PTX for GPUs
// newer than the NVRTC that builds it knows. Binaries are cached on disk under the key of
// source, functors header, NVRTC version and options, by the rules of the C++ libraries
// (toolchain.h, cache_entry), and in the process.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "kernels/device_code.h"

namespace ember::compiler {

// Whether NVRTC can be loaded ($EMBER_NVRTC, else libnvrtc.so.13/.12/.so on the library path,
// else the CUDA toolkit's lib64); checked once.
bool nvrtc_available();
// "NVRTC 13.0", part of the cache key; "" without NVRTC.
const std::string& nvrtc_version();

// Compiles `source` for `arch` ("sm_90a": a cubin; "compute_90": PTX). Throws Error with
// NVRTC's log when compilation fails. No GPU is needed (tests build on machines without one).
std::string nvrtc_compile(const std::string& source, const std::string& arch);

// The architecture binaries for `device` are built for.
std::string cuda_arch(int device);

// Compiles (or finds in the caches) and loads `source` for `device`.
std::shared_ptr<const device_code::Module> load_cuda_source(const std::string& source, int device);

struct CudaToolchainStats {
  int64_t nvrtc_runs = 0, disk_hits = 0, memory_hits = 0, rebuilds = 0;
};
CudaToolchainStats cuda_toolchain_stats();
// Forgets the modules loaded in this process (the disk cache stays).
void clear_cuda_memory_cache();

}  // namespace ember::compiler
