// Op cases: batch_norm (eval with running stats; training with batch stats and the running-stat
// update) and group_norm against float64 loop references; gradchecked.
#include "support/op_cases.h"

namespace ember::test {

namespace {

// x [N, C, ...] normalized per channel c by mean[c] and var[c], then scaled and shifted.
Ref ref_channel_affine(const Ref& x, const std::vector<double>& mean,
                       const std::vector<double>& var, const Ref* w, const Ref* b, double eps) {
  const int64_t C = x.shape[1], inner = C ? x.numel() / x.shape[0] / C : 0;
  Ref out = x;
  for (int64_t f = 0; f < x.numel(); ++f) {
    const int64_t c = f / inner % C;
    double y = (x.v[size_t(f)] - mean[size_t(c)]) / std::sqrt(var[size_t(c)] + eps);
    if (w) y *= w->v[size_t(c)];
    if (b) y += b->v[size_t(c)];
    out.v[size_t(f)] = y;
  }
  return out;
}

// Mean and variance (with `correction`) of each channel over every dim but 1.
void ref_channel_stats(const Ref& x, int64_t correction, std::vector<double>& mean,
                       std::vector<double>& var) {
  const int64_t C = x.shape[1], inner = x.numel() / x.shape[0] / C;
  const int64_t n = x.shape[0] * inner;
  mean.assign(size_t(C), 0.0);
  var.assign(size_t(C), 0.0);
  for (int64_t f = 0; f < x.numel(); ++f) mean[size_t(f / inner % C)] += x.v[size_t(f)] / double(n);
  for (int64_t f = 0; f < x.numel(); ++f) {
    const double d = x.v[size_t(f)] - mean[size_t(f / inner % C)];
    var[size_t(f / inner % C)] += d * d / double(n - correction);
  }
}

// Each group of C / G channels of each sample normalized over its elements.
Ref ref_group_norm(const Ref& x, int64_t G, const Ref* w, const Ref* b, double eps) {
  const int64_t N = x.shape[0], C = x.shape[1], inner = N ? x.numel() / N / C : 0;
  const int64_t len = C / G * inner;
  Ref out = x;
  for (int64_t r = 0; r < N * G; ++r) {
    double mean = 0, var = 0;
    for (int64_t i = 0; i < len; ++i) mean += x.v[size_t(r * len + i)] / double(len);
    for (int64_t i = 0; i < len; ++i) {
      const double d = x.v[size_t(r * len + i)] - mean;
      var += d * d / double(len);
    }
    for (int64_t i = 0; i < len; ++i) {
      const int64_t c = (r % G) * (C / G) + i / inner;
      double y = (x.v[size_t(r * len + i)] - mean) / std::sqrt(var + eps);
      if (w) y *= w->v[size_t(c)];
      if (b) y += b->v[size_t(c)];
      out.v[size_t(r * len + i)] = y;
    }
  }
  return out;
}

}  // namespace

EMBER_OP_CASES(channel_norms) {
  std::vector<OpCase> cases;
  {
    // Out of training: inputs x, running_mean, running_var (positive), weight, bias.
    OpCase c;
    c.name = "batch_norm_eval";
    c.shapes = {{{4, 3, 5}, {3}, {3}, {3}, {3}}, {{2, 2, 3, 4}, {2}, {2}, {2}, {2}}};
    c.make_inputs = [](const Shapes& s, DType t) {
      return Inputs{random_tensor(s[0], t), random_tensor(s[1], t), positive_tensor(s[2], t),
                    random_tensor(s[3], t), random_tensor(s[4], t)};
    };
    c.run = [](const Inputs& in) {
      return Inputs{batch_norm(in[0], in[1], in[2], in[3], in[4], false, 0.1, 1e-5)};
    };
    c.reference = [](const std::vector<Ref>& r) {
      return std::vector<Ref>{ref_channel_affine(r[0], r[1].v, r[2].v, &r[3], &r[4], 1e-5)};
    };
    c.gradcheck = true;
    c.grad_inputs = {0, 3, 4};
    c.tol_scale = 2;
    cases.push_back(std::move(c));
  }
  for (bool affine : {true, false}) {
    // Training: batch statistics normalize; the outputs also hold running stats that started
    // at 0 and 1 after one update with momentum 0.1 (the unbiased variance).
    OpCase c;
    c.name = affine ? "batch_norm_train" : "batch_norm_train_no_affine";
    c.shapes = affine ? std::vector<Shapes>{{{4, 3, 5}, {3}, {3}}, {{3, 2, 4, 3}, {2}, {2}}}
                      : std::vector<Shapes>{{{5, 4}}, {{2, 3, 2, 2}}};
    c.run = [affine](const Inputs& in) {
      TensorOptions o(in[0].dtype());
      o.device = in[0].device();
      Tensor rm = zeros({in[0].size(1)}, o), rv = ones({in[0].size(1)}, o);
      Tensor y = batch_norm(in[0], rm, rv, affine ? in[1] : Tensor(), affine ? in[2] : Tensor(),
                            true, 0.1, 1e-5);
      return Inputs{y, rm, rv};
    };
    c.reference = [affine](const std::vector<Ref>& r) {
      std::vector<double> mean, var, unbiased;
      ref_channel_stats(r[0], 0, mean, var);
      ref_channel_stats(r[0], 1, mean, unbiased);
      const int64_t C = r[0].shape[1];
      Ref rm({C}, 0.0), rv({C}, 0.0);
      for (int64_t ch = 0; ch < C; ++ch) {
        rm.v[size_t(ch)] = 0.1 * mean[size_t(ch)];
        rv.v[size_t(ch)] = 0.9 + 0.1 * unbiased[size_t(ch)];
      }
      return std::vector<Ref>{ref_channel_affine(r[0], mean, var, affine ? &r[1] : nullptr,
                                                 affine ? &r[2] : nullptr, 1e-5),
                              rm, rv};
    };
    c.gradcheck = true;
    c.tol_scale = 2;
    cases.push_back(std::move(c));
  }
  struct G {
    int64_t groups;
    bool affine;
    std::vector<Shapes> shapes;
  };
  const std::vector<G> groups = {{3, true, {{{2, 6, 4}, {6}, {6}}, {{0, 6, 2}, {6}, {6}}}},
                                 {2, false, {{{3, 4, 2, 3}}}},
                                 {1, true, {{{2, 3, 5}, {3}, {3}}}},
                                 {4, true, {{{2, 4, 3, 2}, {4}, {4}}}}};
  for (const G& g : groups) {
    OpCase c;
    c.name = "group_norm_" + std::to_string(g.groups) + (g.affine ? "_affine" : "");
    c.shapes = g.shapes;
    const int64_t G = g.groups;
    const bool affine = g.affine;
    c.run = [G, affine](const Inputs& in) {
      return Inputs{group_norm(in[0], G, affine ? in[1] : Tensor(), affine ? in[2] : Tensor())};
    };
    c.reference = [G, affine](const std::vector<Ref>& r) {
      return std::vector<Ref>{
          ref_group_norm(r[0], G, affine ? &r[1] : nullptr, affine ? &r[2] : nullptr, 1e-5)};
    };
    c.gradcheck = true;
    c.tol_scale = 2;
    cases.push_back(std::move(c));
  }
  return cases;
}

}  // namespace ember::test
