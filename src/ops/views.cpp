// View ops: shape rules (sizes, strides, offset over the input's storage), grads, front ends.
#include <algorithm>
#include <numeric>

#include "ops/frontend.h"

namespace ember {

namespace {

// Strides that let `new_sizes` view memory laid out as (sizes, strides), or nullopt.
std::optional<Shape> view_strides(const Shape& sizes, const Shape& strides,
                                  const Shape& new_sizes) {
  Shape old = sizes, old_st = strides;
  if (old.empty()) {
    old = {1};
    old_st = {1};
  }
  Shape out(new_sizes.size());
  if (shape_numel(old) == 0) return contiguous_strides(new_sizes);
  int64_t view_d = int64_t(new_sizes.size()) - 1;
  int64_t chunk_stride = old_st.back();
  int64_t tensor_numel = 1, view_numel = 1;
  for (int64_t d = int64_t(old.size()) - 1; d >= 0; --d) {
    tensor_numel *= old[d];
    // A chunk ends where the memory stops being contiguous across dims.
    bool chunk_end = d == 0 || (old[d - 1] != 1 && old_st[d - 1] != tensor_numel * chunk_stride);
    if (!chunk_end) continue;
    while (view_d >= 0 && (view_numel < tensor_numel || new_sizes[view_d] == 1)) {
      out[view_d] = view_numel * chunk_stride;
      view_numel *= new_sizes[view_d];
      --view_d;
    }
    if (view_numel != tensor_numel) return std::nullopt;
    if (d > 0) {
      chunk_stride = old_st[d - 1];
      tensor_numel = 1;
      view_numel = 1;
    }
  }
  if (view_d != -1) return std::nullopt;
  return out;
}

// Resolves one -1 in a requested shape against numel.
Shape infer_size(const Shape& shape, int64_t numel, const char* op, const Tensor& t) {
  Shape out = shape;
  int64_t infer_at = -1;
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i] == -1) {
      EMBER_CHECK(infer_at < 0, op, ": only one dimension can be -1, got ", ember::shape_str(shape));
      infer_at = int64_t(i);
      out[i] = 1;
    } else {
      EMBER_CHECK(out[i] >= 0, op, ": invalid size ", out[i], " in ", ember::shape_str(shape));
    }
  }
  // The known sizes must fit before anything is divided by them (an empty tensor viewed as
  // [2^32, 2^32] would otherwise count 2^64 = 0 elements).
  const int64_t known = checked_numel(out, op);
  if (infer_at >= 0) {
    EMBER_CHECK(known != 0 && numel % known == 0, op, ": shape ", ember::shape_str(shape),
                " is invalid for a tensor of ", numel, " elements (shape ", t.shape_str(), ")");
    out[infer_at] = numel / known;
  }
  EMBER_CHECK(shape_numel(out) == numel, op, ": shape ", ember::shape_str(shape),
              " is invalid for a tensor of ", numel, " elements (shape ", t.shape_str(), ")");
  return out;
}

TensorMeta view_meta(const Tensor& t, Shape sizes, Shape strides, int64_t offset) {
  return TensorMeta{std::move(sizes), std::move(strides), offset, t.dtype()};
}

MetaList infer_view(std::span<const Tensor> in, const Attrs& a) {
  const Tensor& t = in[0];
  auto st = view_strides(t.sizes(), t.strides(), a.shape);
  EMBER_CHECK(st, "view: shape ", ember::shape_str(a.shape), " is not compatible with the input's size ",
              t.shape_str(), " and strides ", ember::shape_str(t.strides()),
              " (at least one dimension spans non-contiguous memory); use reshape() instead");
  return {view_meta(t, a.shape, *st, t.storage_offset())};
}

MetaList infer_permute(std::span<const Tensor> in, const Attrs& a) {
  const Tensor& t = in[0];
  Shape sizes(a.dims.size()), strides(a.dims.size());
  for (size_t i = 0; i < a.dims.size(); ++i) {
    sizes[i] = t.sizes()[a.dims[i]];
    strides[i] = t.strides()[a.dims[i]];
  }
  return {view_meta(t, sizes, strides, t.storage_offset())};
}

MetaList infer_expand(std::span<const Tensor> in, const Attrs& a) {
  const Tensor& t = in[0];
  int64_t nd = int64_t(a.shape.size()), lead = nd - t.dim();
  Shape sizes(nd), strides(nd);
  for (int64_t d = 0; d < nd; ++d) {
    int64_t td = d - lead;
    if (td < 0) {
      sizes[d] = a.shape[d];
      strides[d] = 0;
    } else if (t.sizes()[td] == a.shape[d]) {
      sizes[d] = a.shape[d];
      strides[d] = t.strides()[td];
    } else {
      sizes[d] = a.shape[d];
      strides[d] = 0;
    }
  }
  return {view_meta(t, sizes, strides, t.storage_offset())};
}

MetaList infer_slice(std::span<const Tensor> in, const Attrs& a) {
  const Tensor& t = in[0];
  Shape sizes = t.sizes(), strides = t.strides();
  int64_t len = a.end - a.start;
  // Rounded up without len + step - 1, which a step near INT64_MAX overflows. stride * step
  // can only overflow when the step passes the dim's end, leaving one element, whose stride
  // is never used: it keeps the input's.
  sizes[a.dim] = len <= 0 ? 0 : 1 + (len - 1) / a.step;
  if (!size_mul(t.strides()[a.dim], a.step, &strides[a.dim])) strides[a.dim] = t.strides()[a.dim];
  return {view_meta(t, sizes, strides, t.storage_offset() + a.start * t.strides()[a.dim])};
}

MetaList infer_select(std::span<const Tensor> in, const Attrs& a) {
  const Tensor& t = in[0];
  Shape sizes = t.sizes(), strides = t.strides();
  sizes.erase(sizes.begin() + a.dim);
  strides.erase(strides.begin() + a.dim);
  return {view_meta(t, sizes, strides, t.storage_offset() + a.start * t.strides()[a.dim])};
}

MetaList infer_as_strided(std::span<const Tensor> in, const Attrs& a) {
  return {view_meta(in[0], a.shape, a.strides, a.start)};
}

std::vector<Tensor> grad_view(const GradCtx& c) {
  return {c.grads[0].reshape(c.input_meta[0].sizes)};
}
std::vector<Tensor> grad_permute(const GradCtx& c) {
  Shape inv(c.attrs.dims.size());
  for (size_t i = 0; i < inv.size(); ++i) inv[c.attrs.dims[i]] = int64_t(i);
  return {c.grads[0].permute(inv)};
}
std::vector<Tensor> grad_expand(const GradCtx& c) {
  return {sum_to_size(c.grads[0], c.input_meta[0].sizes)};
}
std::vector<Tensor> grad_slice(const GradCtx& c) {
  Attrs a = c.attrs;
  a.shape = c.input_meta[0].sizes;
  return {dispatch1(OpId::slice_backward, {c.grads[0]}, a)};
}
std::vector<Tensor> grad_select(const GradCtx& c) {
  Attrs a;
  a.shape = c.input_meta[0].sizes;
  a.dim = c.attrs.dim;
  a.start = c.attrs.start;
  a.end = c.attrs.start + 1;
  a.step = 1;
  return {dispatch1(OpId::slice_backward, {c.grads[0].unsqueeze(c.attrs.dim)}, a)};
}

}  // namespace

const OpImpl op_impl_view{infer_view, nullptr, grad_view};
const OpImpl op_impl_permute{infer_permute, nullptr, grad_permute};
const OpImpl op_impl_expand{infer_expand, nullptr, grad_expand};
const OpImpl op_impl_slice{infer_slice, nullptr, grad_slice};
const OpImpl op_impl_select{infer_select, nullptr, grad_select};
const OpImpl op_impl_as_strided{infer_as_strided, nullptr, nullptr};

// ---- front ends ----

Tensor Tensor::view(const Shape& shape) const {
  Attrs a;
  a.shape = infer_size(shape, numel(), "view", *this);
  return dispatch1(OpId::view, {*this}, a);
}

Tensor Tensor::reshape(const Shape& shape) const {
  Shape s = infer_size(shape, numel(), "reshape", *this);
  if (s == sizes()) return *this;
  if (view_strides(sizes(), strides(), s)) return view(s);
  return clone().view(s);
}

Tensor Tensor::permute(const Shape& dims) const {
  EMBER_CHECK(int64_t(dims.size()) == dim(), "permute: got ", dims.size(), " dims ",
              ember::shape_str(dims), " for a tensor of ", dim(), " dims (shape ", ember::shape_str(sizes()), ")");
  Attrs a;
  std::vector<bool> seen(dims.size());
  for (int64_t d : dims) {
    int64_t w = wrap_dim(d, dim(), "permute");
    EMBER_CHECK(!seen[w], "permute: dim ", d, " repeats in ", ember::shape_str(dims));
    seen[w] = true;
    a.dims.push_back(w);
  }
  return dispatch1(OpId::permute, {*this}, a);
}

Tensor Tensor::transpose(int64_t d0, int64_t d1) const {
  if (dim() < 2 && d0 == d1) return *this;
  d0 = wrap_dim(d0, dim(), "transpose");
  d1 = wrap_dim(d1, dim(), "transpose");
  Shape p(dim());
  std::iota(p.begin(), p.end(), 0);
  std::swap(p[d0], p[d1]);
  return permute(p);
}

Tensor Tensor::t() const {
  EMBER_CHECK(dim() <= 2, "t: expects a tensor of at most 2 dims, got shape ", ember::shape_str(sizes()),
              "; use transpose(d0, d1)");
  return dim() < 2 ? *this : transpose(0, 1);
}

Tensor Tensor::expand(const Shape& shape) const {
  EMBER_CHECK(int64_t(shape.size()) >= dim(), "expand: target ", ember::shape_str(shape),
              " has fewer dims than the tensor's shape ", ember::shape_str(sizes()));
  Attrs a;
  a.shape = shape;
  int64_t lead = int64_t(shape.size()) - dim();
  for (int64_t d = 0; d < int64_t(shape.size()); ++d) {
    int64_t td = d - lead;
    if (shape[d] == -1) {
      EMBER_CHECK(td >= 0, "expand: -1 is not allowed for a new leading dim in ", ember::shape_str(shape));
      a.shape[d] = sizes()[td];
    }
    EMBER_CHECK(a.shape[d] >= 0, "expand: invalid size in ", ember::shape_str(shape));
    if (td >= 0)
      EMBER_CHECK(sizes()[td] == a.shape[d] || sizes()[td] == 1, "expand: the size ", sizes()[td],
                  " of dim ", td, " (shape ", ember::shape_str(sizes()), ") must match ", a.shape[d],
                  " in ", ember::shape_str(shape), " or be 1");
  }
  if (a.shape == sizes()) return *this;
  return dispatch1(OpId::expand, {*this}, a);
}

Tensor Tensor::expand_as(const Tensor& o) const { return expand(o.sizes()); }

Tensor Tensor::slice(int64_t d, int64_t start, int64_t end, int64_t step) const {
  EMBER_CHECK(dim() > 0, "slice: cannot slice a 0-dim tensor");
  Attrs a;
  a.dim = wrap_dim(d, dim(), "slice");
  EMBER_CHECK(step > 0, "slice: step must be positive, got ", step);
  int64_t n = sizes()[a.dim];
  if (start < 0) start += n;
  if (end < 0) end += n;
  a.start = std::clamp<int64_t>(start, 0, n);
  a.end = std::clamp<int64_t>(end, a.start, n);
  a.step = step;
  return dispatch1(OpId::slice, {*this}, a);
}

Tensor Tensor::narrow(int64_t d, int64_t start, int64_t length) const {
  int64_t w = wrap_dim(d, dim(), "narrow");
  int64_t n = sizes()[w];
  if (start < 0) start += n;
  EMBER_CHECK(start >= 0 && length >= 0 && length <= n - start, "narrow: start ", start,
              " + length ", length, " exceeds the size ", n, " of dim ", w, " (shape ",
              ember::shape_str(sizes()), ")");
  return slice(w, start, start + length);
}

Tensor Tensor::select(int64_t d, int64_t index) const {
  EMBER_CHECK(dim() > 0, "select: cannot select from a 0-dim tensor");
  Attrs a;
  a.dim = wrap_dim(d, dim(), "select");
  int64_t n = sizes()[a.dim];
  EMBER_CHECK(index >= -n && index < n, "select: index ", index, " is out of range for dim ",
              a.dim, " of size ", n, " (shape ", ember::shape_str(sizes()), ")");
  a.start = index < 0 ? index + n : index;
  return dispatch1(OpId::select, {*this}, a);
}

Tensor Tensor::squeeze() const {
  Shape s;
  for (int64_t v : sizes())
    if (v != 1) s.push_back(v);
  return s.size() == sizes().size() ? *this : view(s);
}

Tensor Tensor::squeeze(int64_t d) const {
  if (dim() == 0) return *this;
  d = wrap_dim(d, dim(), "squeeze");
  if (sizes()[d] != 1) return *this;
  Shape s = sizes();
  s.erase(s.begin() + d);
  return view(s);
}

Tensor Tensor::unsqueeze(int64_t d) const {
  d = wrap_dim(d, dim() + 1, "unsqueeze");
  Shape s = sizes();
  s.insert(s.begin() + d, 1);
  return view(s);
}

Tensor Tensor::flatten(int64_t start_dim, int64_t end_dim) const {
  if (dim() == 0) return reshape({1});
  start_dim = wrap_dim(start_dim, dim(), "flatten");
  end_dim = wrap_dim(end_dim, dim(), "flatten");
  EMBER_CHECK(start_dim <= end_dim, "flatten: start_dim ", start_dim, " is after end_dim ", end_dim);
  Shape s(sizes().begin(), sizes().begin() + start_dim);
  int64_t m = 1;
  for (int64_t d = start_dim; d <= end_dim; ++d) m *= sizes()[d];
  s.push_back(m);
  s.insert(s.end(), sizes().begin() + end_dim + 1, sizes().end());
  return reshape(s);
}

Tensor Tensor::as_strided(const Shape& sz, const Shape& st, int64_t offset) const {
  EMBER_CHECK(sz.size() == st.size(), "as_strided: ", sz.size(), " sizes but ", st.size(),
              " strides");
  EMBER_CHECK(offset >= 0, "as_strided: negative storage offset ", offset);
  checked_numel(sz, "as_strided");
  // The last element's offset, and its end in bytes, must fit in int64 before they are
  // compared with the storage (a wrapped one would pass).
  bool empty = false, fits = true;
  int64_t last = offset, step = 0, end_bytes = 0;
  for (size_t i = 0; i < sz.size(); ++i) {
    EMBER_CHECK(st[i] >= 0, "as_strided: negative stride in ", ember::shape_str(st), " (sizes ",
                ember::shape_str(sz), ")");
    empty |= sz[i] == 0;
    if (sz[i] > 0) fits = fits && size_mul(sz[i] - 1, st[i], &step) && size_add(last, step, &last);
  }
  fits = fits && size_add(last, 1, &end_bytes) &&
         size_mul(end_bytes, int64_t(dtype_size(dtype())), &end_bytes);
  EMBER_CHECK(empty || fits, "as_strided: sizes ", ember::shape_str(sz), " strides ",
              ember::shape_str(st), " offset ", offset,
              " reach an element whose offset does not fit in int64 (at most ", kMaxSize, ")");
  if (impl()->storage && !empty)
    EMBER_CHECK(uint64_t(end_bytes) <= impl()->storage->nbytes, "as_strided: sizes ",
                ember::shape_str(sz), " strides ", ember::shape_str(st), " offset ", offset,
                " reach past the end of the storage (",
                impl()->storage->nbytes / dtype_size(dtype()), " elements)");
  Attrs a;
  a.shape = sz;
  a.strides = st;
  a.start = offset;
  return dispatch1(OpId::as_strided, {*this}, a);
}

std::vector<Tensor> Tensor::split_with_sizes(const Shape& split_sizes, int64_t d) const {
  d = wrap_dim(d, dim(), "split_with_sizes");
  int64_t total = 0;
  for (int64_t s : split_sizes) {
    EMBER_CHECK(s >= 0, "split_with_sizes: negative size in ", ember::shape_str(split_sizes));
    EMBER_CHECK(size_add(total, s, &total), "split_with_sizes: sizes ",
                ember::shape_str(split_sizes), " sum past int64 (at most ", kMaxSize, ") but dim ",
                d, " has size ", sizes()[d], " (shape ", ember::shape_str(sizes()), ")");
  }
  EMBER_CHECK(total == sizes()[d], "split_with_sizes: sizes ", ember::shape_str(split_sizes), " sum to ",
              total, " but dim ", d, " has size ", sizes()[d], " (shape ", ember::shape_str(sizes()), ")");
  std::vector<Tensor> out;
  int64_t start = 0;
  for (int64_t s : split_sizes) {
    out.push_back(slice(d, start, start + s));
    start += s;
  }
  return out;
}

std::vector<Tensor> Tensor::split(int64_t split_size, int64_t d) const {
  EMBER_CHECK(split_size > 0, "split: split_size must be positive, got ", split_size);
  d = wrap_dim(d, dim(), "split");
  Shape s;
  for (int64_t left = sizes()[d]; left > 0; left -= split_size) s.push_back(std::min(left, split_size));
  if (s.empty()) s.push_back(0);
  return split_with_sizes(s, d);
}

std::vector<Tensor> Tensor::chunk(int64_t chunks, int64_t d) const {
  EMBER_CHECK(chunks > 0, "chunk: chunks must be positive, got ", chunks);
  d = wrap_dim(d, dim(), "chunk");
  int64_t n = sizes()[d];
  return split(n == 0 ? 1 : 1 + (n - 1) / chunks, d);  // n + chunks - 1 could overflow
}

Shape broadcast_shapes(const Shape& a, const Shape& b) { return broadcast_pair(a, b, "broadcast"); }

Tensor broadcast_to(const Tensor& x, const Shape& shape) { return x.expand(shape); }

Tensor sum_to_size(const Tensor& x, const Shape& shape) {
  if (x.sizes() == shape) return x;
  int64_t lead = x.dim() - int64_t(shape.size());
  EMBER_CHECK(lead >= 0, "sum_to_size: shape ", ember::shape_str(shape), " has more dims than ",
              x.shape_str());
  Shape dims;
  for (int64_t d = 0; d < x.dim(); ++d) {
    if (d < lead) {
      dims.push_back(d);
    } else if (shape[d - lead] == 1 && x.sizes()[d] != 1) {
      dims.push_back(d);
    } else {
      EMBER_CHECK(shape[d - lead] == x.sizes()[d], "sum_to_size: ", x.shape_str(),
                  " cannot be summed to ", ember::shape_str(shape));
    }
  }
  Tensor r = dims.empty() ? x : x.sum(dims, true);
  return r.dim() == int64_t(shape.size()) ? r : r.view(shape);
}

}  // namespace ember
