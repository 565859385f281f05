// The CUDA backend of a build without a CUDA toolkit: no device is available, and anything
// that needs one says how to get it.
#include "ember/cuda.h"
#include "ember/error.h"
#include "kernels/cuda/attention_cudnn.h"
#include "kernels/cached_attention_append.h"
#include "kernels/embedding_add.h"
#include "kernels/cross_entropy_grad.h"
#include "kernels/cuda_graph.h"
#include "kernels/device_code.h"
#include "kernels/device_kernels.h"
#include "kernels/device_memory.h"
#include "kernels/gemm_bias.h"
#include "kernels/layer_norm_grad.h"
#include "kernels/multi_tensor.h"

namespace ember {

namespace {
[[noreturn]] void no_cuda(const char* what) {
  EMBER_FAIL(what, ": this build of ember has no CUDA backend (no CUDA toolkit was found when "
                   "it was configured); install the toolkit and rebuild, or use the CPU");
}
}  // namespace

namespace cuda {
bool built_with_cuda() { return false; }
bool is_available() { return false; }
int device_count() { return 0; }
void synchronize(int) { no_cuda("cuda::synchronize"); }
MemoryStats memory_stats(int) { no_cuda("cuda::memory_stats"); }
void reset_peak_memory_stats(int) { no_cuda("cuda::reset_peak_memory_stats"); }
void empty_cache() {}
Event::Event() { no_cuda("cuda::Event"); }
Event::~Event() {}
void Event::record(int) { no_cuda("cuda::Event::record"); }
float Event::elapsed_ms(const Event&) const { no_cuda("cuda::Event::elapsed_ms"); }
}  // namespace cuda

KernelFn device_kernel(OpId, Device) { return nullptr; }

namespace device_memory {
std::shared_ptr<Storage> new_cuda_storage(size_t, Device d) {
  no_cuda(("a tensor on " + d.str()).c_str());
}
void copy_bytes(void*, Device, const void*, Device, size_t) { no_cuda("a copy to or from a GPU"); }
std::shared_ptr<Storage> new_pinned_storage(size_t) { return nullptr; }
}  // namespace device_memory

namespace device_code {
std::shared_ptr<const Module> load(const std::string&) { no_cuda("generated CUDA code"); }
int compute_capability(int) { no_cuda("generated CUDA code"); }
int multiprocessors(int) { no_cuda("generated CUDA code"); }
void launch(const void*, int, unsigned, unsigned, void**, const char*) {
  no_cuda("generated CUDA code");
}
}  // namespace device_code

namespace cuda_graph {
class Pool {};
class Recording {};
bool available() { return false; }
std::shared_ptr<Pool> new_pool(int) { no_cuda("a CUDA graph"); }
PoolScope::PoolScope(Pool*) : prev_(nullptr) {}
PoolScope::~PoolScope() {}
bool in_a_pool(const void*) { return false; }
size_t pool_bytes(const Pool&) { return 0; }
size_t live_pool_bytes() { return 0; }
void move_out(Storage&) { no_cuda("a CUDA graph"); }
void begin(int) { no_cuda("a CUDA graph"); }
std::shared_ptr<Recording> end(int) { no_cuda("a CUDA graph"); }
void abort(int) {}
void launch(const Recording&) { no_cuda("a CUDA graph"); }
size_t nodes(const Recording&) { return 0; }
struct SideBranch::State {};
SideBranch::SideBranch(int) {}
SideBranch::~SideBranch() {}
bool SideBranch::recording() const { return false; }
void SideBranch::run(const std::function<void()>& work) { work(); }
void SideBranch::join() {}
int SideBranch::steps() const { return 0; }
}  // namespace cuda_graph

namespace cuda {
void set_cudnn_attention(bool) {}
bool cudnn_attention_available(int) { return false; }
int64_t cudnn_attention_runs() { return 0; }
}  // namespace cuda

namespace multi_tensor {
bool takes(std::span<const Tensor>) { return false; }
Tensor sum_of_squares(std::span<const Tensor>) { no_cuda("multi_tensor::sum_of_squares"); }
void clip_(std::span<const Tensor>, const Tensor&, double) { no_cuda("multi_tensor::clip_"); }
void adamw_step(std::span<const Tensor>, std::span<const Tensor>, std::span<const Tensor>,
                std::span<const Tensor>, std::span<const float>, const AdamWScalars&) {
  no_cuda("multi_tensor::adamw_step");
}
void cast_(std::span<const Tensor>, std::span<const Tensor>) { no_cuda("multi_tensor::cast_"); }
}  // namespace multi_tensor

}  // namespace ember

namespace ember::layer_norm_grad {
bool backward_fused(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                    const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                    const FoldLauncher*) {
  return false;
}
}  // namespace ember::layer_norm_grad

namespace ember::gemm_bias {
bool run(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, bool,
         const LayerNormIn*) {
  return false;
}
}  // namespace ember::gemm_bias

namespace ember::cached_attention_append {
bool run(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
         const Tensor&, double, Tensor&) {
  return false;
}
}  // namespace ember::cached_attention_append

namespace ember::embedding_add {
bool run(const Tensor&, const Tensor&, const Tensor&, const Tensor&, Tensor&) { return false; }
}  // namespace ember::embedding_add

namespace ember::cross_entropy_grad {
bool run(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&) {
  return false;
}
}  // namespace ember::cross_entropy_grad
