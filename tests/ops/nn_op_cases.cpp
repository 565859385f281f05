// Op cases: row-wise ops of networks: softmax, log_softmax, layer_norm, cross_entropy.
#include <algorithm>
#include <limits>

#include "dispatch/dispatcher.h"
#include "support/op_cases.h"

namespace ember::test {

namespace {

std::vector<double> ref_softmax(const std::vector<double>& v, bool log) {
  double m = *std::max_element(v.begin(), v.end()), s = 0;
  for (double x : v) s += std::exp(x - m);
  std::vector<double> out;
  for (double x : v) out.push_back(log ? x - m - std::log(s) : std::exp(x - m) / s);
  return out;
}

void add_softmax_cases(std::vector<OpCase>& cases, bool log) {
  const std::string name = log ? "log_softmax" : "softmax";
  const OpId op = log ? OpId::log_softmax : OpId::softmax;
  struct DimCase {
    std::string tag;
    int64_t dim;
    std::vector<Shapes> shapes;
    bool gradcheck;
  };
  const std::vector<DimCase> dims = {
      {"last", -1, {{{}}, {{7}}, {{3, 5}}, {{0, 3}}, {{3, 0}}, {{2, 3, 10}}}, true},
      {"first", 0, {{{7}}, {{3, 5}}, {{4, 2, 3}}}, true},
      {"middle", 1, {{{2, 3, 4}}, {{2, 1, 4}}}, true},
      // Threaded rows, long rows, several column blocks.
      {"last_large", -1, {{{40, 1000}}, {{2, 20000}}}, false},
      {"first_large", 0, {{{60, 600}}}, false},
      {"middle_large", 1, {{{3, 40, 300}}}, false},
  };
  for (const DimCase& d : dims) {
    for (bool big_values : {false, true}) {
      if (big_values && !d.gradcheck) continue;
      OpCase c;
      c.name = name + "_" + d.tag + (big_values ? "_large_values" : "");
      c.covers = {op};
      c.shapes = d.shapes;
      if (big_values)  // exp(x) alone would overflow: only max-subtraction gets these right
        c.make_inputs = [](const Shapes& s, DType t) {
          return Inputs{random_tensor(s[0], t, -1000, 1000)};
        };
      int64_t dim = d.dim;
      c.run = [log, dim](const Inputs& in) {
        return Inputs{log ? in[0].log_softmax(dim) : in[0].softmax(dim)};
      };
      c.reference = [log, dim](const std::vector<Ref>& r) {
        return std::vector<Ref>{ref_lanes(
            r[0], dim, [log](const std::vector<double>& v) { return ref_softmax(v, log); })};
      };
      c.gradcheck = d.gradcheck && !big_values;
      if (!d.gradcheck) c.dtypes = {DType::Float32, DType::BFloat16};
      cases.push_back(std::move(c));
    }
  }
}

// Per row of the trailing `k` dims: (x - mean) / sqrt(var + eps) * w + b (biased variance).
Ref ref_layer_norm(const Ref& x, int64_t k, const Ref* w, const Ref* b, double eps) {
  int64_t n = 1;
  for (int64_t d = x.dim() - k; d < x.dim(); ++d) n *= x.shape[d];
  Ref out = x;
  for (int64_t r = 0; n > 0 && r < x.numel() / n; ++r) {
    double mean = 0, var = 0;
    for (int64_t i = 0; i < n; ++i) mean += x.v[r * n + i];
    mean /= double(n);
    for (int64_t i = 0; i < n; ++i) var += (x.v[r * n + i] - mean) * (x.v[r * n + i] - mean);
    var /= double(n);
    for (int64_t i = 0; i < n; ++i) {
      double y = (x.v[r * n + i] - mean) / std::sqrt(var + eps);
      if (w) y *= w->v[i];
      if (b) y += b->v[i];
      out.v[r * n + i] = y;
    }
  }
  return out;
}

// layer_norm_backward's grads (g [rows, n] of out, x [rows, n], weight [n]) in float64.
std::vector<Ref> ref_layer_norm_backward(const Ref& g, const Ref& x, const Ref& w, double eps) {
  const int64_t n = w.numel(), rows = n > 0 ? x.numel() / n : 0;
  Ref dx = x, dw(w.shape, 0.0), db(w.shape, 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    double mean = 0, var = 0;
    for (int64_t i = 0; i < n; ++i) mean += x.v[r * n + i];
    mean /= double(n);
    for (int64_t i = 0; i < n; ++i) var += (x.v[r * n + i] - mean) * (x.v[r * n + i] - mean);
    const double rstd = 1 / std::sqrt(var / double(n) + eps);
    double mean_gw = 0, mean_gwx = 0;
    for (int64_t i = 0; i < n; ++i) {
      const double gw = g.v[r * n + i] * w.v[i], xhat = (x.v[r * n + i] - mean) * rstd;
      mean_gw += gw / double(n);
      mean_gwx += gw * xhat / double(n);
      dw.v[i] += g.v[r * n + i] * xhat;
      db.v[i] += g.v[r * n + i];
    }
    for (int64_t i = 0; i < n; ++i) {
      const double xhat = (x.v[r * n + i] - mean) * rstd;
      dx.v[r * n + i] = rstd * (g.v[r * n + i] * w.v[i] - mean_gw - xhat * mean_gwx);
    }
  }
  return {dx, dw, db};
}

// The fused grad op, called directly (layer_norm's grad uses it on GPUs): inputs g, x, weight;
// mean and rstd come from the forward op.
void add_layer_norm_backward_cases(std::vector<OpCase>& cases) {
  OpCase c;
  c.name = "layer_norm_backward";
  c.covers = {OpId::layer_norm_backward};
  c.shapes = {{{4, 10}, {4, 10}, {10}}, {{2, 3, 384}, {2, 3, 384}, {384}},
              {{300, 64}, {300, 64}, {64}}, {{0, 5}, {0, 5}, {5}}, {{3, 1}, {3, 1}, {1}}};
  c.dtypes = {DType::Float32, DType::Float64, DType::BFloat16};
  c.run = [](const Inputs& in) {
    Attrs a;
    a.shape = in[2].sizes();
    a.value = 1e-5;
    std::vector<Tensor> fwd = dispatch(OpId::layer_norm, {in[1], in[2]}, a);
    std::vector<Tensor> r =
        dispatch(OpId::layer_norm_backward, {in[0], in[1], fwd[1], fwd[2], in[2]}, a);
    return Inputs{r[0], r[1], r[2]};
  };
  c.reference = [](const std::vector<Ref>& r) {
    return ref_layer_norm_backward(r[0], r[1], r[2], 1e-5);
  };
  c.tol_scale = 4;  // sums over rows, and a division by the std
  cases.push_back(std::move(c));
}

void add_layer_norm_cases(std::vector<OpCase>& cases) {
  // affine: 0 none, 1 weight only, 2 weight and bias, 3 bias only.
  for (int affine = 0; affine < 4; ++affine) {
    for (bool large : {false, true}) {
      OpCase c;
      c.name = "layer_norm_affine" + std::to_string(affine) + (large ? "_large" : "");
      c.covers = {OpId::layer_norm};
      std::vector<Shapes> base =
          large
              ? std::vector<Shapes>{{{48, 768}, {768}}, {{2, 20000}, {20000}}}
              : std::vector<Shapes>{
                    {{4, 10}, {10}}, {{2, 3, 4}, {3, 4}}, {{7}, {7}}, {{0, 5}, {5}}, {{3, 1}, {1}}};
      for (Shapes& s : base) {
        Shape norm = s[1];
        s.resize(1);
        if (affine == 1 || affine == 2) s.push_back(norm);
        if (affine >= 2) s.push_back(norm);
        if (affine == 0) s.push_back(norm);  // carries normalized_shape only; not an input
        c.shapes.push_back(s);
      }
      c.make_inputs = [affine](const Shapes& s, DType t) {
        Inputs in = {random_tensor(s[0], t, -3, 5)};
        for (size_t i = 1; i < s.size(); ++i) in.push_back(random_tensor(s[i], t));
        if (affine == 0) in[1] = zeros(s[1], DType::Int64);  // a shape carrier
        return in;
      };
      c.run = [affine](const Inputs& in) {
        const Shape& norm = in[1].sizes();
        Tensor w = affine == 1 || affine == 2 ? in[1] : Tensor();
        Tensor b = affine == 2 ? in[2] : affine == 3 ? in[1] : Tensor();
        return Inputs{layer_norm(in[0], norm, w, b, 1e-5)};
      };
      c.reference = [affine](const std::vector<Ref>& r) {
        int64_t k = r[1].dim();
        const Ref* w = affine == 1 || affine == 2 ? &r[1] : nullptr;
        const Ref* b = affine == 2 ? &r[2] : affine == 3 ? &r[1] : nullptr;
        return std::vector<Ref>{ref_layer_norm(r[0], k, w, b, 1e-5)};
      };
      c.gradcheck = !large;
      if (large) c.dtypes = {DType::Float32, DType::BFloat16};
      if (affine == 0) c.grad_inputs = {0};
      c.tol_scale = 2;  // the normalized values are O(1) but come through a division by std
      cases.push_back(std::move(c));
    }
  }
}

// Class targets in [0, classes), about a quarter of them replaced by ignore_index.
Tensor make_targets(const Shape& s, int64_t classes, int64_t ignore_index) {
  std::vector<int64_t> t = random_int_tensor(s, 0, classes).to_vector<int64_t>();
  std::vector<int64_t> coin = random_int_tensor(s, 0, 4).to_vector<int64_t>();
  for (size_t i = 0; i < t.size(); ++i)
    if (coin[i] == 0) t[i] = ignore_index;
  return from_vector(t, s, DType::Int64);
}

Ref ref_cross_entropy(const Ref& logits, const Ref& targets, int64_t ignore_index) {
  int64_t classes = logits.shape.back(), rows = targets.numel();
  double total = 0, count = 0;
  for (int64_t r = 0; r < rows; ++r) {
    int64_t t = int64_t(targets.v[r]);
    if (t == ignore_index) continue;
    std::vector<double> row(logits.v.begin() + r * classes, logits.v.begin() + (r + 1) * classes);
    total += -ref_softmax(row, true)[t];
    count += 1;
  }
  return Ref({}, {total / count});
}

void add_cross_entropy_cases(std::vector<OpCase>& cases) {
  for (int64_t ignore : {-100, 2}) {
    for (bool large : {false, true}) {
      OpCase c;
      c.name = "cross_entropy_ignore" + std::to_string(ignore) + (large ? "_large" : "");
      c.covers = {OpId::cross_entropy};
      c.shapes = large ? std::vector<Shapes>{{{40, 1000}, {40}}, {{2, 20000}, {2}}}
                       : std::vector<Shapes>{{{4, 5}, {4}}, {{1, 7}, {1}},       {{0, 5}, {0}},
                                             {{8, 3}, {8}}, {{3, 4, 6}, {3, 4}}, {{6}, {}}};
      c.make_inputs = [ignore](const Shapes& s, DType t) {
        return Inputs{random_tensor(s[0], t, -4, 4), make_targets(s[1], s[0].back(), ignore)};
      };
      c.run = [ignore](const Inputs& in) { return Inputs{cross_entropy(in[0], in[1], ignore)}; };
      c.reference = [ignore](const std::vector<Ref>& r) {
        return std::vector<Ref>{ref_cross_entropy(r[0], r[1], ignore)};
      };
      c.gradcheck = !large;
      if (large) c.dtypes = {DType::Float32, DType::BFloat16};
      cases.push_back(std::move(c));
    }
  }
  // Large logits: exp(x) alone would overflow; the loss must still be exact to rounding.
  OpCase big;
  big.name = "cross_entropy_large_values";
  big.covers = {OpId::cross_entropy};
  big.shapes = {{{4, 5}, {4}}, {{8, 30}, {8}}};
  big.make_inputs = [](const Shapes& s, DType t) {
    return Inputs{random_tensor(s[0], t, -1000, 1000), make_targets(s[1], s[0].back(), -100)};
  };
  big.run = [](const Inputs& in) { return Inputs{cross_entropy(in[0], in[1])}; };
  big.reference = [](const std::vector<Ref>& r) {
    return std::vector<Ref>{ref_cross_entropy(r[0], r[1], -100)};
  };
  cases.push_back(std::move(big));
}


}  // namespace

EMBER_OP_CASES(nn_ops) {
  std::vector<OpCase> cases;
  add_softmax_cases(cases, false);
  add_softmax_cases(cases, true);
  add_layer_norm_cases(cases);
  add_layer_norm_backward_cases(cases);
  add_cross_entropy_cases(cases);
  return cases;
}

}  // namespace ember::test
