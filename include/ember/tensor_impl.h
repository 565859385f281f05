// TensorImpl: the shared descriptor behind a Tensor handle (storage, sizes, strides, offset,
// dtype, device, version, autograd metadata). Views share Storage, and with it the version.
#pragma once
#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "ember/device.h"
#include "ember/dtype.h"

namespace ember {

using Shape = std::vector<int64_t>;

namespace autograd {
struct Node;
struct LeafHooks;
}

// A block of memory on a device. The version counts in-place writes, shared by all views.
struct Storage {
  void* data = nullptr;
  size_t nbytes = 0;
  Device device;
  std::atomic<uint32_t> version{0};
  // Frees data (null for storage ember does not own).
  void (*deleter)(void* data, size_t nbytes) = nullptr;

  Storage() = default;
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  ~Storage() {
    if (deleter) deleter(data, nbytes);
  }
};

struct TensorImpl;

struct AutogradMeta {
  bool requires_grad = false;
  std::shared_ptr<TensorImpl> grad;
  std::shared_ptr<autograd::Node> grad_fn;  // null for leaves
  uint32_t output_nr = 0;
  std::weak_ptr<autograd::Node> grad_accumulator;  // leaves only
  // Leaves only: hooks run once backward has accumulated into grad
  // (register_post_accumulate_grad_hook in autograd.h).
  std::shared_ptr<autograd::LeafHooks> post_accumulate_hooks;
};

struct TensorImpl {
  std::shared_ptr<Storage> storage;  // null for symbolic tensors (metadata only)
  Shape sizes;
  Shape strides;  // in elements
  int64_t offset = 0;  // in elements
  DType dtype = DType::Float32;
  Device device;
  bool is_view = false;
  // mark_dynamic / mark_static (compile.h): bit d for dim d.
  uint64_t dynamic_dims = 0, static_dims = 0;
  std::unique_ptr<AutogradMeta> autograd;  // allocated only when needed
  std::shared_ptr<void> symbolic;  // set by capture: what this tensor stands for in a graph
  // Set once a compiled replay reads this tensor without running the function that reached it
  // (a tensor a lambda captured): from then on, each assignment of another tensor to a handle
  // that held this one counts in `rebinds`, which the replay's guards compare (capture/guards).
  std::atomic<bool> watched{false};
  std::atomic<uint32_t> rebinds{0};

  // Product of sizes.
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t s : sizes) n *= s;
    return n;
  }
  // Number of dims; row-major without gaps.
  int64_t dim() const { return int64_t(sizes.size()); }
  bool is_contiguous() const {
    if (numel() == 0) return true;  // no element is out of place (as in PyTorch)
    int64_t expected = 1;
    for (int64_t d = dim() - 1; d >= 0; --d) {
      if (sizes[d] == 1) continue;
      if (strides[d] != expected) return false;
      expected *= sizes[d];
    }
    return true;
  }
  // Address of the first element.
  void* data() const {
    return static_cast<char*>(storage->data) + offset * int64_t(dtype_size(dtype));
  }
  // Autograd state, made on first use; whether the tensor requires grad.
  AutogradMeta& autograd_meta() {
    if (!autograd) autograd = std::make_unique<AutogradMeta>();
    return *autograd;
  }
  bool requires_grad() const { return autograd && autograd->requires_grad; }
};

// Contiguous (row-major) strides for the given sizes.
inline Shape contiguous_strides(const Shape& sizes) {
  Shape st(sizes.size());
  int64_t s = 1;
  for (int64_t d = int64_t(sizes.size()) - 1; d >= 0; --d) {
    st[d] = s;
    s *= sizes[d] > 1 ? sizes[d] : 1;
  }
  return st;
}

}  // namespace ember
