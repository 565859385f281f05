// NVRTC, loaded with dlopen so that a build with the CUDA backend still runs (its CPU path) on a
// machine without the toolkit, and the binaries it builds: cached on disk and in the process.
// Generated code includes kernels/functors.h, whose <cmath>, <cstdint> and <cstring> NVRTC does
// not have: small headers of our own stand in for them (the device math functions are NVRTC's
// built-ins).
#include "compiler/toolchain_cuda.h"

#include <dlfcn.h>

#include <atomic>
#include <cstdlib>
#include <vector>

#include "compiler/kernel_headers.h"
#include "compiler/once_cache.h"
#include "compiler/toolchain.h"
#include "ember/error.h"

namespace ember::compiler {

namespace {

// NVRTC's C API, as far as it is used here (nvrtc.h's declarations; its handles are opaque).
using Program = void*;
struct Nvrtc {
  void* handle = nullptr;
  int major = 0, minor = 0;
  int (*version)(int*, int*) = nullptr;
  int (*create)(Program*, const char*, const char*, int, const char* const*,
                const char* const*) = nullptr;
  int (*compile)(Program, int, const char* const*) = nullptr;
  int (*log_size)(Program, size_t*) = nullptr;
  int (*log)(Program, char*) = nullptr;
  int (*cubin_size)(Program, size_t*) = nullptr;
  int (*cubin)(Program, char*) = nullptr;
  int (*ptx_size)(Program, size_t*) = nullptr;
  int (*ptx)(Program, char*) = nullptr;
  int (*destroy)(Program*) = nullptr;
  const char* (*error_string)(int) = nullptr;
};

const Nvrtc& nvrtc() {
  static const Nvrtc n = [] {
    Nvrtc r;
    std::vector<std::string> tries;
    if (const char* p = std::getenv("EMBER_NVRTC"); p && *p) tries.push_back(p);
    for (const char* name : {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"}) tries.push_back(name);
    for (const char* dir : {EMBER_CUDA_LIB_DIR, "/usr/local/cuda/lib64"})
      if (*dir) tries.push_back(std::string(dir) + "/libnvrtc.so");
    for (const std::string& t : tries)
      if ((r.handle = ::dlopen(t.c_str(), RTLD_NOW | RTLD_LOCAL))) break;
    if (!r.handle) return r;
    auto sym = [&](auto& fn, const char* name) {
      fn = reinterpret_cast<std::decay_t<decltype(fn)>>(::dlsym(r.handle, name));
      return fn != nullptr;
    };
    const bool ok = sym(r.version, "nvrtcVersion") && sym(r.create, "nvrtcCreateProgram") &&
                    sym(r.compile, "nvrtcCompileProgram") &&
                    sym(r.log_size, "nvrtcGetProgramLogSize") && sym(r.log, "nvrtcGetProgramLog") &&
                    sym(r.cubin_size, "nvrtcGetCUBINSize") && sym(r.cubin, "nvrtcGetCUBIN") &&
                    sym(r.ptx_size, "nvrtcGetPTXSize") && sym(r.ptx, "nvrtcGetPTX") &&
                    sym(r.destroy, "nvrtcDestroyProgram") &&
                    sym(r.error_string, "nvrtcGetErrorString");
    if (!ok || r.version(&r.major, &r.minor) != 0) {
      ::dlclose(r.handle);
      r = Nvrtc{};
    }
    return r;
  }();
  return n;
}

// The standard headers functors.h and philox.h include, as NVRTC needs them: std:: names for
// the device math functions, fixed-width integers, memcpy (bit casts), is_constant_evaluated.
const char* const kCmath = R"(#pragma once
namespace std {
using ::copysign; using ::erf; using ::erfc; using ::exp; using ::fabs; using ::fma; using ::log;
using ::pow; using ::sqrt; using ::tanh; using ::cos; using ::sin;
}
#define INFINITY __int_as_float(0x7f800000)
#define NAN __int_as_float(0x7fc00000)
)";
const char* const kCstdint = R"(#pragma once
typedef signed char int8_t; typedef unsigned char uint8_t;
typedef short int16_t; typedef unsigned short uint16_t;
typedef int int32_t; typedef unsigned int uint32_t;
typedef long long int64_t; typedef unsigned long long uint64_t;
typedef unsigned long long uintptr_t;
)";
const char* const kCstring = R"(#pragma once
namespace std {
__device__ __forceinline__ void* memcpy(void* d, const void* s, size_t n) { return ::memcpy(d, s, n); }
}
)";

const char* const kTypeTraits = R"(#pragma once
namespace std {
__host__ __device__ constexpr bool is_constant_evaluated() noexcept {
  return __builtin_is_constant_evaluated();
}
}
)";

std::atomic<int64_t> g_runs{0}, g_disk_hits{0}, g_memory_hits{0}, g_rebuilds{0};

// Modules by key, built or loaded once per process.
OnceCache<std::shared_ptr<const device_code::Module>>& module_cache() {
  static OnceCache<std::shared_ptr<const device_code::Module>> c;
  return c;
}

}  // namespace

bool nvrtc_available() { return nvrtc().handle != nullptr; }

const std::string& nvrtc_version() {
  static const std::string v =
      nvrtc_available()
          ? "NVRTC " + std::to_string(nvrtc().major) + "." + std::to_string(nvrtc().minor)
          : std::string();
  return v;
}

std::string cuda_arch(int device) {
  const int cc = device_code::compute_capability(device);
  // Hopper with its architecture-specific features; a cubin for the other architectures NVRTC
  // 12 and 13 build; PTX for a GPU newer than those, which its driver compiles.
  if (cc == 90) return "sm_90a";
  EMBER_CHECK(cc >= 75, "compiler: generated CUDA code needs compute capability 7.5 or newer, "
                        "this GPU has ", cc / 10, ".", cc % 10);
  if (cc <= 120) return "sm_" + std::to_string(cc);
  return "compute_90";
}

std::string nvrtc_compile(const std::string& source, const std::string& arch) {
  const Nvrtc& n = nvrtc();
  EMBER_CHECK(n.handle, "compiler: NVRTC (libnvrtc.so) cannot be loaded, so CUDA kernels cannot "
                        "be generated; install the CUDA toolkit's NVRTC or set EMBER_NVRTC to its "
                        "path");
  const std::string& functors = functors_header();
  const std::string& philox = philox_header();
  const char* headers[] = {functors.c_str(), philox.c_str(), kCmath, kCstdint, kCstring,
                           kTypeTraits};
  const char* names[] = {"kernels/functors.h", "core/philox.h", "cmath", "cstdint", "cstring",
                         "type_traits"};
  Program p = nullptr;
  int rc = n.create(&p, source.c_str(), "ember_generated.cu", 6, headers, names);
  EMBER_CHECK(rc == 0, "compiler: nvrtcCreateProgram failed: ", n.error_string(rc));
  const std::string arch_opt = "--gpu-architecture=" + arch;
  const char* opts[] = {arch_opt.c_str(), "-std=c++17", "--fmad=true"};
  ++g_runs;
  rc = n.compile(p, 3, opts);
  size_t log_size = 0;
  n.log_size(p, &log_size);
  std::string log(log_size, '\0');
  if (log_size) n.log(p, log.data());
  if (rc != 0) {
    n.destroy(&p);
    EMBER_FAIL("compiler: NVRTC failed to build generated CUDA code (", n.error_string(rc),
               "):\n", log);
  }
  const bool cubin = arch.rfind("sm_", 0) == 0;
  size_t size = 0;
  (cubin ? n.cubin_size : n.ptx_size)(p, &size);
  std::string image(size, '\0');
  (cubin ? n.cubin : n.ptx)(p, image.data());
  n.destroy(&p);
  return image;
}

std::shared_ptr<const device_code::Module> load_cuda_source(const std::string& source,
                                                            int device) {
  const std::string arch = cuda_arch(device);
  const std::string key = cache_entry::key(source + '\0' + functors_header() + '\0' +
                                           philox_header() + '\0' + nvrtc_version() + '\0' +
                                           arch);
  bool hit = false;
  auto mod = module_cache().get(key, [&] {
    const std::string path =
        cache_entry::directory() + "/" + key + (arch.rfind("sm_", 0) == 0 ? ".cubin" : ".ptx");
    std::string why;
    std::optional<std::string> image = cache_entry::read(path, &why);
    std::shared_ptr<const device_code::Module> m;
    if (image) {
      try {
        m = device_code::load(*image);
        ++g_disk_hits;
      } catch (const Error&) {
        why = "it does not load";
      }
    }
    if (!m) {
      if (!why.empty()) ++g_rebuilds;
      const std::string built = nvrtc_compile(source, arch);
      cache_entry::write(path, built);
      m = device_code::load(built);
    }
    return m;
  }, &hit);
  if (hit) ++g_memory_hits;
  return mod;
}

CudaToolchainStats cuda_toolchain_stats() {
  return {g_runs.load(), g_disk_hits.load(), g_memory_hits.load(), g_rebuilds.load()};
}

void clear_cuda_memory_cache() {
  module_cache().clear();
}

}  // namespace ember::compiler
