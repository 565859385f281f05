// The CUDA backend's settings that hold in every build (ember/cuda.h): a build without CUDA
// keeps them too, so code that sets them runs anywhere.
#include <atomic>

#include "ember/cuda.h"

namespace ember::cuda {

namespace {
std::atomic<bool> tf32{false};
}  // namespace

void set_allow_tf32(bool on) { tf32.store(on, std::memory_order_relaxed); }
bool allow_tf32() { return tf32.load(std::memory_order_relaxed); }

}  // namespace ember::cuda
