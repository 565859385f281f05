// Tensor: a cheap handle (shared pointer) to a TensorImpl, with the op methods users call.
// Every method goes through the dispatcher (autograd -> capture -> backend kernel).
#pragma once
#include <cstdint>
#include <initializer_list>
#include <iosfwd>
#include <memory>
#include <optional>
#include "ember/source_location.h"
#include <string>
#include <vector>

#include "ember/dtype.h"
#include "ember/error.h"
#include "ember/tensor_impl.h"

namespace ember {

class Tensor;
namespace autograd {
struct Node;
}

// Options for factory functions.
struct TensorOptions {
  DType dtype = DType::Float32;
  Device device = kCPU;
  bool requires_grad = false;
  TensorOptions() = default;
  // Just a dtype (factories take DType where they take options).
  TensorOptions(DType t) : dtype(t) {}
};

// While alive, assignments to tensor handles on this thread are not counted as rebindings
// (TensorImpl::rebinds): set around graph runs, whose buffers come and go.
class RebindsIgnored {
 public:
  // Starts ignoring rebindings on this thread; the destructor restores the previous state.
  RebindsIgnored();
  ~RebindsIgnored();
  RebindsIgnored(const RebindsIgnored&) = delete;
  RebindsIgnored& operator=(const RebindsIgnored&) = delete;

 private:
  bool prev_;
};

class Tensor {
 public:
  Tensor() = default;
  // A handle to impl (shared, not copied).
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}
  Tensor(const Tensor&) = default;
  Tensor(Tensor&&) noexcept = default;
  // Assignment rebinds the handle. A compiled replay that reads the tensor this handle held
  // is told (TensorImpl::rebinds), so that it traces the function again.
  Tensor& operator=(const Tensor& o) {
    note_rebind(o.impl_.get());
    impl_ = o.impl_;
    return *this;
  }
  Tensor& operator=(Tensor&& o) noexcept {
    note_rebind(o.impl_.get());
    impl_ = std::move(o.impl_);
    return *this;
  }
  ~Tensor() = default;

  // Whether the handle holds a tensor; the TensorImpl it holds.
  bool defined() const { return bool(impl_); }
  TensorImpl* impl() const { return impl_.get(); }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }

  // ---- metadata ----
  // Sizes and strides (in elements) of every dim; size(d)/stride(d) count negative d from the
  // end and throw Error out of range.
  const Shape& sizes() const { return impl_->sizes; }
  const Shape& strides() const { return impl_->strides; }
  int64_t size(int64_t d) const;
  int64_t stride(int64_t d) const;
  // Number of dims, of elements; dtype; device; offset into the storage in elements.
  int64_t dim() const { return impl_->dim(); }
  int64_t numel() const { return impl_->numel(); }
  DType dtype() const { return impl_->dtype; }
  Device device() const { return impl_->device; }
  int64_t storage_offset() const { return impl_->offset; }
  // Whether the elements lie in row-major order without gaps.
  bool is_contiguous() const { return impl_->is_contiguous(); }
  // Whether the tensor is a capture placeholder without storage.
  bool is_symbolic() const { return impl_ && !impl_->storage; }
  // The storage's count of in-place writes (autograd checks saved tensors against it).
  uint32_t version() const;
  std::string shape_str() const;  // "[2, 3]"

  // ---- data access (a sync point under capture) ----
  // The source location parameters name the caller when capture has to break a graph here.
  void* data_ptr(ember::SourceLocation loc = ember::SourceLocation::current()) const;
  template <class T>
  T* data_ptr(ember::SourceLocation loc = ember::SourceLocation::current()) const {
    EMBER_CHECK(dtype_of<T>::value == dtype(), "data_ptr<", dtype_name(dtype_of<T>::value),
                ">: tensor has dtype ", dtype_name(dtype()));
    return static_cast<T*>(data_ptr(loc));
  }
  // One-element tensor -> value.
  double item(ember::SourceLocation loc = ember::SourceLocation::current()) const;
  template <class T>
  T item(ember::SourceLocation loc = ember::SourceLocation::current()) const {
    return static_cast<T>(item(loc));
  }
  // Contiguous copy of all elements, converted to T.
  template <class T>
  std::vector<T> to_vector(ember::SourceLocation loc = ember::SourceLocation::current()) const;
  explicit operator bool() const;    // one-element tensor -> truth value

  // ---- autograd ----
  // Whether autograd tracks this tensor; requires_grad_ sets it (Error for non-float dtypes, or
  // for dropping it from a non-leaf).
  bool requires_grad() const { return impl_->requires_grad(); }
  Tensor& requires_grad_(bool on = true);
  // Whether the tensor was made by the user rather than by a differentiable op.
  bool is_leaf() const;
  // The accumulated gradient (undefined before the first backward), and replacing it.
  Tensor grad() const;
  void set_grad(const Tensor& g) const;
  // The autograd node that made this tensor (null for leaves).
  std::shared_ptr<autograd::Node> grad_fn() const;
  // Accumulates d(this)/d(leaf) into each leaf's .grad (a scalar, or seeded with `gradient`);
  // Error when this tensor does not require grad.
  void backward(const Tensor& gradient = Tensor(), bool retain_graph = false) const;
  Tensor detach() const;  // shares storage, no history

  // ---- pointwise ----
  // Elementwise, with broadcasting and type promotion as PyTorch; shapes that do not broadcast
  // throw Error.
  Tensor add(const Tensor& o) const;
  Tensor sub(const Tensor& o) const;
  Tensor mul(const Tensor& o) const;
  Tensor div(const Tensor& o) const;
  Tensor pow(const Tensor& o) const;
  Tensor pow(double exponent) const;
  Tensor maximum(const Tensor& o) const;
  Tensor minimum(const Tensor& o) const;
  Tensor neg() const;
  Tensor exp() const;
  Tensor log() const;
  Tensor sqrt() const;
  Tensor rsqrt() const;
  Tensor abs() const;
  Tensor tanh() const;
  Tensor sigmoid() const;
  Tensor relu() const;
  Tensor gelu(bool tanh_approx = false) const;
  Tensor silu() const;
  Tensor sign() const;
  Tensor clamp(std::optional<double> min, std::optional<double> max) const;
  // Elementwise comparisons: bool tensors, broadcast.
  Tensor eq(const Tensor& o) const;
  Tensor ne(const Tensor& o) const;
  Tensor lt(const Tensor& o) const;
  Tensor le(const Tensor& o) const;
  Tensor gt(const Tensor& o) const;
  Tensor ge(const Tensor& o) const;
  Tensor eq(double v) const;
  Tensor ne(double v) const;
  Tensor lt(double v) const;
  Tensor le(double v) const;
  Tensor gt(double v) const;
  Tensor ge(double v) const;
  // Elementwise logic on truth values (non-zero is true): bool tensors.
  Tensor logical_and(const Tensor& o) const;
  Tensor logical_or(const Tensor& o) const;
  Tensor logical_xor(const Tensor& o) const;
  Tensor logical_not() const;
  Tensor to(DType t) const;  // cast (returns *this when the dtype already matches)
  // A copy on `d` (*this when already there). A sync point under capture (a graph break), and
  // not yet differentiable: a tensor that requires grad raises under grad mode.
  Tensor to(Device d) const;
  Tensor cuda(int index = 0) const { return to(Device{DeviceType::CUDA, index}); }
  Tensor cpu() const { return to(kCPU); }
  Tensor masked_fill(const Tensor& mask, double value) const;
  Tensor where(const Tensor& cond, const Tensor& other) const;  // cond ? *this : other

  // ---- reductions (empty dims = all dims) ----
  // Reductions over `dims` (all dims when empty; negative dims count from the end), as PyTorch's.
  Tensor sum(const Shape& dims = {}, bool keepdim = false) const;
  Tensor mean(const Shape& dims = {}, bool keepdim = false) const;
  Tensor amax(const Shape& dims = {}, bool keepdim = false) const;
  Tensor amin(const Shape& dims = {}, bool keepdim = false) const;
  // Index of the largest / smallest element along dim (of the flattened tensor when none): int64.
  Tensor argmax(std::optional<int64_t> dim = std::nullopt, bool keepdim = false) const;
  Tensor argmin(std::optional<int64_t> dim = std::nullopt, bool keepdim = false) const;
  // Variance and standard deviation with Bessel's `correction`; log of the sum of exponentials.
  Tensor var(const Shape& dims = {}, int64_t correction = 1, bool keepdim = false) const;
  Tensor std(const Shape& dims = {}, int64_t correction = 1, bool keepdim = false) const;
  Tensor logsumexp(const Shape& dims, bool keepdim = false) const;
  // Softmax / log-softmax along dim, as ember::softmax.
  Tensor softmax(int64_t dim) const;
  Tensor log_softmax(int64_t dim) const;
  // The k largest (or smallest) values along dim and their int64 indices; Error when k exceeds the
  // dim's size.
  std::pair<Tensor, Tensor> topk(int64_t k, int64_t dim = -1, bool largest = true,
                                 bool sorted = true) const;

  // ---- linear algebra ----
  // Matrix product, as ember::matmul.
  Tensor matmul(const Tensor& o) const;

  // ---- views (share storage) ----
  Tensor view(const Shape& shape) const;  // -1 infers one size
  Tensor reshape(const Shape& shape) const;  // a view when possible, else a copy
  // Views as PyTorch's: dims reordered, swapped, broadcast, sliced, picked, squeezed,
  // flattened; out-of-range dims and sizes that do not fit throw Error.
  Tensor permute(const Shape& dims) const;
  Tensor transpose(int64_t d0, int64_t d1) const;
  Tensor t() const;  // transpose of a 2-D tensor
  Tensor expand(const Shape& shape) const;  // -1 keeps a size
  Tensor expand_as(const Tensor& o) const;
  Tensor slice(int64_t dim, int64_t start, int64_t end, int64_t step = 1) const;
  Tensor narrow(int64_t dim, int64_t start, int64_t length) const;
  Tensor select(int64_t dim, int64_t index) const;
  Tensor squeeze() const;
  Tensor squeeze(int64_t dim) const;
  Tensor unsqueeze(int64_t dim) const;
  Tensor flatten(int64_t start_dim = 0, int64_t end_dim = -1) const;
  Tensor as_strided(const Shape& sizes, const Shape& strides, int64_t offset) const;
  Tensor contiguous() const;  // *this if already contiguous
  // A copy with its own storage (differentiable); splits and chunks are views along dim.
  Tensor clone() const;
  std::vector<Tensor> split(int64_t split_size, int64_t dim = 0) const;
  std::vector<Tensor> split_with_sizes(const Shape& sizes, int64_t dim = 0) const;
  std::vector<Tensor> chunk(int64_t chunks, int64_t dim = 0) const;

  // ---- indexing and masks ----
  // Gather along dim by int64 indices (Error out of range); lower and upper triangles of the
  // last two dims.
  Tensor index_select(int64_t dim, const Tensor& index) const;
  Tensor gather(int64_t dim, const Tensor& index) const;
  Tensor tril(int64_t diagonal = 0) const;
  Tensor triu(int64_t diagonal = 0) const;

  // ---- in-place (bump the version counter) ----
  // In place (the version counter is bumped); Error on a leaf that requires grad under grad mode.
  Tensor& add_(const Tensor& o);
  Tensor& sub_(const Tensor& o);
  Tensor& mul_(const Tensor& o);
  Tensor& div_(const Tensor& o);
  Tensor& add_(double v);
  Tensor& mul_(double v);
  Tensor& copy_(const Tensor& src);
  Tensor& fill_(double v);
  Tensor& zero_();
  Tensor& masked_fill_(const Tensor& mask, double value);
  Tensor& clamp_(std::optional<double> min, std::optional<double> max);

 private:
  // Releasing a handle (assigning an undefined tensor) is not a rebinding, nor is what ember
  // itself does while it runs a graph (RebindsIgnored).
  void note_rebind(const TensorImpl* next) noexcept {
    if (impl_ && next && impl_.get() != next &&
        impl_->watched.load(std::memory_order_relaxed) && !rebinds_ignored())
      impl_->rebinds.fetch_add(1, std::memory_order_relaxed);
  }
  static bool rebinds_ignored() noexcept;
  std::shared_ptr<TensorImpl> impl_;
};

// Operators (scalars become 0-dim tensors of a matching dtype, as in PyTorch).
Tensor operator+(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a, const Tensor& b);
Tensor operator*(const Tensor& a, const Tensor& b);
Tensor operator/(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a);
Tensor operator+(const Tensor& a, double b);
Tensor operator-(const Tensor& a, double b);
Tensor operator*(const Tensor& a, double b);
Tensor operator/(const Tensor& a, double b);
Tensor operator+(double a, const Tensor& b);
Tensor operator-(double a, const Tensor& b);
Tensor operator*(double a, const Tensor& b);
Tensor operator/(double a, const Tensor& b);
Tensor& operator+=(Tensor& a, const Tensor& b);
Tensor& operator-=(Tensor& a, const Tensor& b);
Tensor& operator*=(Tensor& a, const Tensor& b);
Tensor& operator/=(Tensor& a, const Tensor& b);

// Printing, PyTorch style: tensor([[1.0000, 2.0000]], dtype=float64)
std::ostream& operator<<(std::ostream& os, const Tensor& t);
std::string to_string(const Tensor& t);

}  // namespace ember
