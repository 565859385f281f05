// Float64 reference tensors for op tests: plain row-major vectors of doubles, computed by
// straightforward loops that share no code with the kernels under test.
#pragma once
#include <cmath>
#include <functional>
#include <vector>

#include "core/shape.h"
#include "ember/ember.h"

namespace ember::test {

struct Ref {
  Shape shape;
  std::vector<double> v;

  Ref() = default;
  Ref(Shape s, std::vector<double> vals) : shape(std::move(s)), v(std::move(vals)) {}
  Ref(Shape s, double fill);
  int64_t numel() const { return int64_t(v.size()); }
  int64_t dim() const { return int64_t(shape.size()); }
  // Row-major index <-> multi-index.
  std::vector<int64_t> index(int64_t flat) const;
  int64_t flat(const std::vector<int64_t>& idx) const;
  double& at(const std::vector<int64_t>& idx) { return v[flat(idx)]; }
  double at(const std::vector<int64_t>& idx) const { return v[flat(idx)]; }
};

Ref to_ref(const Tensor& t);                       // any dtype -> doubles
Tensor from_ref(const Ref& r, DType dtype);         // doubles -> tensor of dtype

// Elementwise with broadcasting.
Ref ref_map(const Ref& a, const std::function<double(double)>& f);
Ref ref_zip(const Ref& a, const Ref& b, const std::function<double(double, double)>& f);
Ref ref_zip3(const Ref& a, const Ref& b, const Ref& c,
             const std::function<double(double, double, double)>& f);
Shape ref_broadcast(const Shape& a, const Shape& b);
Ref ref_expand(const Ref& a, const Shape& shape);

// Reduction over dims (empty = all) with keepdim. `f` gets all values of one output
// element's group in row-major order.
Ref ref_reduce(const Ref& a, Shape dims, bool keepdim,
               const std::function<double(const std::vector<double>&)>& f);
// Applies f to each 1-D lane along dim (softmax-like ops that keep the shape).
Ref ref_lanes(const Ref& a, int64_t dim,
              const std::function<std::vector<double>(const std::vector<double>&)>& f);
Ref ref_permute(const Ref& a, const Shape& perm);
Ref ref_matmul2d(const Ref& a, const Ref& b);

}  // namespace ember::test
