// Float64 reference tensors.
#include "support/reference.h"

#include <algorithm>

namespace ember::test {

Ref::Ref(Shape s, double fill) : shape(std::move(s)) {
  int64_t n = 1;
  for (int64_t x : shape) n *= x;
  v.assign(size_t(n), fill);
}

std::vector<int64_t> Ref::index(int64_t flat) const {
  std::vector<int64_t> idx(shape.size());
  for (int64_t d = dim() - 1; d >= 0; --d) {
    idx[d] = shape[d] ? flat % shape[d] : 0;
    flat = shape[d] ? flat / shape[d] : 0;
  }
  return idx;
}

int64_t Ref::flat(const std::vector<int64_t>& idx) const {
  int64_t f = 0;
  for (size_t d = 0; d < shape.size(); ++d) f = f * shape[d] + idx[d];
  return f;
}

Ref to_ref(const Tensor& t) { return Ref(t.sizes(), t.to_vector<double>()); }

Tensor from_ref(const Ref& r, DType dtype) {
  return from_vector(r.v, r.shape, TensorOptions(DType::Float64)).to(dtype);
}

Shape ref_broadcast(const Shape& a, const Shape& b) {
  size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    int64_t x = i < n - a.size() ? 1 : a[i - (n - a.size())];
    int64_t y = i < n - b.size() ? 1 : b[i - (n - b.size())];
    out[i] = x == 1 ? y : x;
  }
  return out;
}

Ref ref_expand(const Ref& a, const Shape& shape) {
  Ref out(shape, 0.0);
  size_t lead = shape.size() - a.shape.size();
  for (int64_t i = 0; i < out.numel(); ++i) {
    auto idx = out.index(i);
    std::vector<int64_t> src(a.shape.size());
    for (size_t d = 0; d < a.shape.size(); ++d) src[d] = a.shape[d] == 1 ? 0 : idx[d + lead];
    out.v[i] = a.v[a.flat(src)];
  }
  return out;
}

Ref ref_map(const Ref& a, const std::function<double(double)>& f) {
  Ref out = a;
  for (double& x : out.v) x = f(x);
  return out;
}

Ref ref_zip(const Ref& a, const Ref& b, const std::function<double(double, double)>& f) {
  Shape s = ref_broadcast(a.shape, b.shape);
  Ref x = ref_expand(a, s), y = ref_expand(b, s), out(s, 0.0);
  for (int64_t i = 0; i < out.numel(); ++i) out.v[i] = f(x.v[i], y.v[i]);
  return out;
}

Ref ref_zip3(const Ref& a, const Ref& b, const Ref& c,
             const std::function<double(double, double, double)>& f) {
  Shape s = ref_broadcast(ref_broadcast(a.shape, b.shape), c.shape);
  Ref x = ref_expand(a, s), y = ref_expand(b, s), z = ref_expand(c, s), out(s, 0.0);
  for (int64_t i = 0; i < out.numel(); ++i) out.v[i] = f(x.v[i], y.v[i], z.v[i]);
  return out;
}

Ref ref_reduce(const Ref& a, Shape dims, bool keepdim,
               const std::function<double(const std::vector<double>&)>& f) {
  int64_t nd = a.dim();
  if (dims.empty())
    for (int64_t d = 0; d < nd; ++d) dims.push_back(d);
  for (int64_t& d : dims) d = d < 0 ? d + nd : d;
  std::vector<bool> red(size_t(nd), false);
  for (int64_t d : dims) red[d] = true;
  Shape kept_shape;
  for (int64_t d = 0; d < nd; ++d) kept_shape.push_back(red[d] ? 1 : a.shape[d]);
  Ref kept(kept_shape, 0.0);
  std::vector<std::vector<double>> groups(size_t(kept.numel()));
  for (int64_t i = 0; i < a.numel(); ++i) {
    auto idx = a.index(i);
    for (int64_t d = 0; d < nd; ++d)
      if (red[d]) idx[d] = 0;
    groups[kept.flat(idx)].push_back(a.v[i]);
  }
  for (size_t g = 0; g < groups.size(); ++g) kept.v[g] = f(groups[g]);
  if (keepdim) return kept;
  Shape s;
  for (int64_t d = 0; d < nd; ++d)
    if (!red[d]) s.push_back(a.shape[d]);
  return Ref(s, kept.v);
}

Ref ref_lanes(const Ref& a, int64_t dim,
              const std::function<std::vector<double>(const std::vector<double>&)>& f) {
  Ref out = a;
  if (a.dim() == 0) {
    out.v = f(a.v);
    return out;
  }
  dim = dim < 0 ? dim + a.dim() : dim;
  for (int64_t i = 0; i < a.numel(); ++i) {
    auto idx = a.index(i);
    if (idx[dim] != 0) continue;
    std::vector<double> lane;
    for (int64_t j = 0; j < a.shape[dim]; ++j) {
      idx[dim] = j;
      lane.push_back(a.at(idx));
    }
    auto r = f(lane);
    for (int64_t j = 0; j < a.shape[dim]; ++j) {
      idx[dim] = j;
      out.at(idx) = r[j];
    }
  }
  return out;
}

Ref ref_permute(const Ref& a, const Shape& perm) {
  Shape s(perm.size());
  for (size_t i = 0; i < perm.size(); ++i) s[i] = a.shape[perm[i]];
  Ref out(s, 0.0);
  for (int64_t i = 0; i < out.numel(); ++i) {
    auto idx = out.index(i);
    std::vector<int64_t> src(perm.size());
    for (size_t k = 0; k < perm.size(); ++k) src[perm[k]] = idx[k];
    out.v[i] = a.at(src);
  }
  return out;
}

Ref ref_matmul2d(const Ref& a, const Ref& b) {
  int64_t m = a.shape[0], k = a.shape[1], n = b.shape[1];
  Ref out({m, n}, 0.0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (int64_t p = 0; p < k; ++p) s += a.v[i * k + p] * b.v[p * n + j];
      out.v[i * n + j] = s;
    }
  return out;
}

}  // namespace ember::test
