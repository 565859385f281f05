// Registry and helpers of the table-driven op tests.
#include "support/op_cases.h"

#include <random>
#include <sstream>

namespace ember::test {

std::vector<OpCase>& all_op_cases() {
  static std::vector<OpCase> cases;
  return cases;
}

OpCaseRegistrar::OpCaseRegistrar(std::vector<OpCase> (*f)()) {
  for (auto& c : f()) all_op_cases().push_back(std::move(c));
}

namespace {
std::mt19937_64& host_rng() {
  static std::mt19937_64 g(std::random_device{}());
  return g;
}
}  // namespace

Tensor random_tensor(const Shape& s, DType dtype, double lo, double hi) {
  std::uniform_real_distribution<double> u(lo, hi);
  std::vector<double> v(size_t(shape_numel(s)));
  for (double& x : v) x = u(host_rng());
  return from_vector(v, s, DType::Float64).to(dtype);
}

Tensor positive_tensor(const Shape& s, DType dtype) { return random_tensor(s, dtype, 0.5, 2.5); }

Tensor random_int_tensor(const Shape& s, int64_t lo, int64_t hi, DType dtype) {
  std::uniform_int_distribution<int64_t> u(lo, hi - 1);
  std::vector<int64_t> v(size_t(shape_numel(s)));
  for (int64_t& x : v) x = u(host_rng());
  return from_vector(v, s, DType::Int64).to(dtype);
}

Tensor random_bool_tensor(const Shape& s) {
  return random_int_tensor(s, 0, 2).to(DType::Bool);
}

Tensor strided_copy(const Tensor& t) {
  if (t.dim() == 0) return t;
  NoGradGuard g;
  Shape big = t.sizes();
  big.back() *= 2;
  Tensor b = zeros(big, t.dtype());
  Tensor v = b.slice(-1, 0, big.back(), 2);
  v.copy_(t);
  return v;
}

double tolerance(DType dtype) {
  switch (dtype) {
    case DType::Float64: return 1e-9;
    case DType::Float32: return 2e-5;
    case DType::Float16: return 1e-2;
    case DType::BFloat16: return 4e-2;
    default: return 0;
  }
}

std::string compare(const Tensor& got, const Ref& want, double tol) {
  std::ostringstream os;
  if (got.sizes() != want.shape) {
    os << "shape " << got.shape_str() << " != expected " << shape_str(want.shape);
    return os.str();
  }
  std::vector<double> g = got.to_vector<double>();
  for (size_t i = 0; i < g.size(); ++i) {
    double a = g[i], b = want.v[i];
    if (std::isnan(a) && std::isnan(b)) continue;
    if (std::isinf(a) && std::isinf(b) && (a > 0) == (b > 0)) continue;
    if (!(std::abs(a - b) <= tol * (1 + std::abs(b)))) {
      os << "element " << i << " (index " << shape_str(want.index(int64_t(i))) << "): got " << a
         << ", expected " << b << " (tolerance " << tol << ")";
      return os.str();
    }
  }
  return "";
}

std::string gradcheck(const std::function<Inputs(const Inputs&)>& f, const Inputs& inputs,
                      const std::vector<int>& which) {
  // Analytic: grads of sum(out_k * w_k) with random weights w_k.
  Inputs leaves;
  for (const Tensor& t : inputs) leaves.push_back(t.detach().clone());
  for (int i : which) leaves[i].requires_grad_(true);
  Inputs outs = f(leaves);
  std::vector<Tensor> weights;
  Tensor total;
  for (const Tensor& o : outs) {
    if (!is_floating(o.dtype()) || !o.requires_grad()) {
      weights.push_back(Tensor());
      continue;
    }
    Tensor w = random_tensor(o.sizes(), DType::Float64);
    weights.push_back(w);
    Tensor term = (o * w).sum();
    total = total.defined() ? total + term : term;
  }
  if (!total.defined()) return "no differentiable output";
  total.backward();
  auto objective = [&](const Inputs& in) {
    NoGradGuard g;
    Inputs o = f(in);
    double s = 0;
    for (size_t k = 0; k < o.size(); ++k)
      if (weights[k].defined()) s += (o[k] * weights[k]).sum().item();
    return s;
  };
  const double eps = 1e-6;
  std::ostringstream os;
  for (int i : which) {
    Tensor analytic = leaves[i].grad();
    std::vector<double> an = analytic.defined() ? analytic.to_vector<double>()
                                                : std::vector<double>(size_t(leaves[i].numel()), 0);
    std::vector<double> x = leaves[i].to_vector<double>();
    for (size_t j = 0; j < x.size(); ++j) {
      Inputs plus = inputs, minus = inputs;
      std::vector<double> xp = x, xm = x;
      xp[j] += eps;
      xm[j] -= eps;
      plus[i] = from_vector(xp, leaves[i].sizes(), DType::Float64);
      minus[i] = from_vector(xm, leaves[i].sizes(), DType::Float64);
      double numeric = (objective(plus) - objective(minus)) / (2 * eps);
      if (std::abs(numeric - an[j]) > 1e-5 * (1 + std::abs(numeric))) {
        os << "input " << i << " element " << j << ": autograd " << an[j] << ", numeric "
           << numeric;
        return os.str();
      }
    }
  }
  return "";
}

}  // namespace ember::test
