// Network-layer steps of random programs (program_layers.h): drawn over the values whose shapes
// fit each form, run with ember's layer ops, bounded and printed.
#include "support/program_layers.h"

#include <algorithm>
#include <cmath>

#include "ember/error.h"

namespace ember::testgen {
namespace {

// Large enough that a channel or group of (nearly) equal values normalizes only rounding noise
// into values the tolerances cover, as layer_norm's eps in the generator.
constexpr double kNormEps = 0.25;

// Elements a conv weight's output channel sums over (its fan-in).
int64_t fan_in(const Shape& weight) {
  int64_t n = 1;
  for (size_t d = 1; d < weight.size(); ++d) n *= weight[d];
  return n;
}

bool floating(const Tensor& t) { return is_floating(t.dtype()); }

// Whether t broadcasts to x's shape (the result keeps x's shape).
bool broadcasts_to(const Tensor& t, const Shape& xs) {
  if (t.dim() > int64_t(xs.size())) return false;
  for (int64_t i = 1; i <= t.dim(); ++i) {
    const int64_t u = t.size(-i), v = xs[xs.size() - size_t(i)];
    if (u != v && u != 1) return false;
  }
  return true;
}

// The values that fit, by number.
template <class Fits>
std::vector<int> fitting(const std::vector<Tensor>& vals, Fits fits) {
  std::vector<int> out;
  for (int v = 0; v < int(vals.size()); ++v)
    if (fits(vals[size_t(v)])) out.push_back(v);
  return out;
}

// An operand among the fitting values, one of the last three most of the time (so chains
// form); -1 when none fits.
template <class Fits>
int choose(Rng& r, const std::vector<Tensor>& vals, Fits fits) {
  const std::vector<int> c = fitting(vals, fits);
  if (c.empty()) return -1;
  if (!coin(r, 0.7)) return pick(r, c);
  return c[c.size() - 1 - size_t(uniform(r, 0, std::min<int64_t>(int64_t(c.size()) - 1, 2)))];
}

// Adds the optional per-channel weight, then bias, of a norm over x's channels.
void add_affine(Rng& r, const std::vector<Tensor>& vals, const Tensor& x, Step& s) {
  const std::vector<int> vecs = fitting(vals, [&](const Tensor& t) {
    return floating(t) && t.sizes() == Shape{x.size(1)};
  });
  if (vecs.empty() || !coin(r, 0.7)) return;
  s.args.push_back(pick(r, vecs));
  if (coin(r)) s.args.push_back(pick(r, vecs));
}

std::string ints(const std::vector<int64_t>& v) {
  std::string out = "{";
  for (size_t i = 0; i < v.size(); ++i) out.append(i ? ", " : "").append(std::to_string(v[i]));
  return out + "}";
}

std::string num(double v) {
  std::string s = std::to_string(v);
  s.erase(s.find_last_not_of('0') + 1);
  if (s.back() == '.') s += '0';
  return s;
}

// A pooling step's stride: the kernel's when 0.
std::vector<int64_t> pool_stride(const Step& s) {
  return s.stride ? std::vector<int64_t>{s.stride} : std::vector<int64_t>{};
}

}  // namespace

Shape layer_base(Rng& r) {
  const int64_t n = uniform(r, 1, 2), c = uniform(r, 1, 4);
  if (coin(r, 1.0 / 3)) return {n, c, uniform(r, 2, 12)};
  return {n, c, uniform(r, 2, 7), uniform(r, 2, 7)};
}

void add_layer_inputs(Rng& r, Program& p, const Shape& base, DType dtype) {
  const int64_t C = base[1];
  const bool images = base.size() == 4;
  auto kernel = [&](Shape w) {
    const int64_t k = uniform(r, 1, 3);
    w.push_back(k);
    if (images) w.push_back(coin(r, 0.6) ? k : uniform(r, 1, 3));
    return w;
  };
  auto param = [&](const Shape& shape, double range) {
    InputSpec in;
    in.shape = shape;
    in.dtype = coin(r, 0.85) ? dtype : dtype == DType::Float32 ? DType::Float64 : DType::Float32;
    in.range = range;
    p.inputs.push_back(in);
  };
  // Weights whose convolutions stay near their operand's size: fan-in terms of 1 / fan-in.
  const Shape dense = kernel({coin(r, 0.6) ? C : uniform(r, 1, 6), C});
  param(dense, 1.0 / double(fan_in(dense)));
  const Shape depthwise = kernel({C * (coin(r, 0.7) ? 1 : 2), 1});
  param(depthwise, 1.0 / double(fan_in(depthwise)));
  param({C}, 2);  // norm weights and biases, running stats, conv biases
  param({C}, 2);
}

bool draw_layer_step(Rng& r, const std::vector<Tensor>& vals, Step& s) {
  s = Step{};
  s.op = Op::Layer;
  // Convolutions three times as often as the others: they need an operand of the weights'
  // channels, which fewer values have.
  s.fn = int(uniform(r, 0, int(LayerFn::kCount) + 3));
  if (s.fn >= int(LayerFn::kCount)) s.fn = int(s.fn % 2 ? LayerFn::Conv2d : LayerFn::Conv1d);
  int a = -1;
  switch (LayerFn(s.fn)) {
    case LayerFn::Conv1d:
    case LayerFn::Conv2d: {
      const int64_t nd = LayerFn(s.fn) == LayerFn::Conv2d ? 4 : 3;
      a = choose(r, vals, [&](const Tensor& t) { return floating(t) && t.dim() == nd; });
      if (a < 0) return false;
      const int64_t C = vals[size_t(a)].size(1);
      // Weights for x's channels: dense (groups 1), or depthwise (one input channel a group),
      // each half the time where both fit.
      const std::vector<int> dense = fitting(vals, [&](const Tensor& w) {
        return floating(w) && w.dim() == nd && w.size(1) == C;
      });
      const std::vector<int> depthwise = fitting(vals, [&](const Tensor& w) {
        return floating(w) && w.dim() == nd && C > 1 && w.size(1) == 1 && w.size(0) % C == 0;
      });
      if (dense.empty() && depthwise.empty()) return false;
      const bool grouped = dense.empty() || (!depthwise.empty() && coin(r));
      const int w = pick(r, grouped ? depthwise : dense);
      const Tensor& weight = vals[size_t(w)];
      s.groups = grouped ? C : 1;
      s.args = {a, w};
      const std::vector<int> bs = fitting(vals, [&](const Tensor& t) {
        return floating(t) && t.sizes() == Shape{weight.size(0)};
      });
      if (!bs.empty() && coin(r)) s.args.push_back(pick(r, bs));
      s.stride = uniform(r, 1, 2);
      s.padding = uniform(r, 0, 1);
      s.dilation = uniform(r, 1, 2);
      return true;
    }
    case LayerFn::MaxPool2d:
    case LayerFn::AvgPool2d: {
      a = choose(r, vals, [](const Tensor& t) { return floating(t) && t.dim() >= 3; });
      if (a < 0 || vals[size_t(a)].dim() > 4) return false;
      const int64_t kh = uniform(r, 1, 3), kw = coin(r, 0.6) ? kh : uniform(r, 1, 3);
      s.kernel = {kh, kw};
      s.stride = coin(r, 0.4) ? 0 : uniform(r, 1, 2);
      s.padding = uniform(r, 0, std::min(kh, kw) / 2);
      if (LayerFn(s.fn) == LayerFn::MaxPool2d) s.dilation = uniform(r, 1, 2);
      s.flag = coin(r);  // avg: count_include_pad
      break;
    }
    case LayerFn::AdaptiveAvgPool2d: {
      a = choose(r, vals, [](const Tensor& t) { return floating(t) && t.dim() >= 3; });
      if (a < 0 || vals[size_t(a)].dim() > 4) return false;
      const Tensor& x = vals[size_t(a)];
      s.shape = {uniform(r, 1, x.size(-2) + 1), uniform(r, 1, x.size(-1) + 1)};
      break;
    }
    case LayerFn::BatchNorm:
    case LayerFn::BatchNormTrain:
    case LayerFn::GroupNorm: {
      a = choose(r, vals, [](const Tensor& t) { return floating(t) && t.dim() >= 2; });
      if (a < 0) return false;
      const Tensor& x = vals[size_t(a)];
      s.args = {a};
      s.scalar = kNormEps;
      if (LayerFn(s.fn) == LayerFn::BatchNorm) {  // running stats: any [C] values
        const std::vector<int> stats = fitting(vals, [&](const Tensor& t) {
          return floating(t) && t.sizes() == Shape{x.size(1)};
        });
        if (stats.empty()) return false;
        s.args.push_back(pick(r, stats));
        s.args.push_back(pick(r, stats));
        s.scalar = 1e-5;  // the variance is at least 0.5
      }
      if (LayerFn(s.fn) == LayerFn::GroupNorm) {
        std::vector<int64_t> divs;
        for (int64_t g = 1; g <= x.size(1); ++g)
          if (x.size(1) % g == 0) divs.push_back(g);
        s.groups = pick(r, divs);
      }
      add_affine(r, vals, x, s);
      return true;
    }
    case LayerFn::Swiglu: {
      a = choose(r, vals, floating);
      if (a < 0) return false;
      const Shape& xs = vals[size_t(a)].sizes();
      const std::vector<int> ys = fitting(vals, [&](const Tensor& t) {
        return floating(t) && broadcasts_to(t, xs);
      });
      s.args = {a, pick(r, ys)};  // x itself fits
      return true;
    }
    case LayerFn::Nearest:
    case LayerFn::Bilinear: {
      const bool bilinear = LayerFn(s.fn) == LayerFn::Bilinear;
      a = choose(r, vals, [&](const Tensor& t) { return t.dim() == 4 && (floating(t) || !bilinear); });
      if (a < 0) return false;
      const Tensor& x = vals[size_t(a)];
      s.shape = {uniform(r, 1, 2 * x.size(2)), uniform(r, 1, 2 * x.size(3))};
      s.flag = bilinear && coin(r, 0.3);  // align_corners
      break;
    }
    case LayerFn::CausalMask: {
      a = choose(r, vals, [](const Tensor& t) { return t.dim() >= 2; });
      if (a < 0) return false;
      s.start = uniform(r, -1, 1);
      s.scalar = pick(r, std::vector<double>{-2, 0, 1.5});
      if (!floating(vals[size_t(a)])) s.scalar = std::floor(s.scalar);
      break;
    }
    case LayerFn::MaskWhere: {
      a = choose(r, vals, [](const Tensor& t) { return t.dim() >= 1; });
      if (a < 0) return false;
      const Shape& xs = vals[size_t(a)].sizes();
      // A mask of fewer dims or with dims of 1 where x has more.
      const std::vector<int> ms = fitting(vals, [&](const Tensor& t) {
        return t.sizes() != xs && broadcasts_to(t, xs);
      });
      if (ms.empty()) return false;
      const int m = pick(r, ms);
      s.args = {a, m};
      s.scalar = floating(vals[size_t(m)]) ? 0.1234 : 0.5;
      return true;
    }
    case LayerFn::Sort:
    case LayerFn::Argsort: {
      // Integers half the time where there are some (their ties keep their order).
      const bool ints = coin(r) && !fitting(vals, [](const Tensor& t) {
                                               return t.dim() >= 1 && !floating(t);
                                             }).empty();
      a = choose(r, vals, [&](const Tensor& t) { return t.dim() >= 1 && floating(t) != ints; });
      if (a < 0) return false;
      s.dim = uniform(r, 0, vals[size_t(a)].dim() - 1);
      s.flag = coin(r);  // descending
      break;
    }
    case LayerFn::kCount: return false;
  }
  s.args = {a};
  return true;
}

Tensor apply_layer_step(const Step& s, const std::vector<Tensor>& v) {
  const Tensor& x = v[size_t(s.args[0])];
  auto arg = [&](size_t i) { return i < s.args.size() ? v[size_t(s.args[i])] : Tensor(); };
  switch (LayerFn(s.fn)) {
    case LayerFn::Conv1d:
      return conv1d(x, arg(1), arg(2), s.stride, s.padding, s.dilation, s.groups);
    case LayerFn::Conv2d:
      return conv2d(x, arg(1), arg(2), {s.stride}, {s.padding}, {s.dilation}, s.groups);
    case LayerFn::MaxPool2d:
      return max_pool2d(x, s.kernel, pool_stride(s), {s.padding}, {s.dilation});
    case LayerFn::AvgPool2d: return avg_pool2d(x, s.kernel, pool_stride(s), {s.padding}, s.flag);
    case LayerFn::AdaptiveAvgPool2d: return adaptive_avg_pool2d(x, s.shape);
    case LayerFn::BatchNorm:
      return batch_norm(x, arg(1), arg(2).abs() + 0.5, arg(3), arg(4), false, 0.1, s.scalar);
    case LayerFn::BatchNormTrain:
      return batch_norm(x, Tensor(), Tensor(), arg(1), arg(2), true, 0.1, s.scalar);
    case LayerFn::GroupNorm: return group_norm(x, s.groups, arg(1), arg(2), s.scalar);
    case LayerFn::Swiglu: return swiglu(x, arg(1));
    case LayerFn::Nearest: return interpolate(x, s.shape, "nearest");
    case LayerFn::Bilinear: return interpolate(x, s.shape, "bilinear", s.flag);
    case LayerFn::CausalMask: {
      const Tensor rows = arange(x.size(-2)).unsqueeze(1), cols = arange(x.size(-1));
      return x.masked_fill(cols.gt(rows + s.start), s.scalar);
    }
    case LayerFn::MaskWhere: return where(arg(1).gt(s.scalar), x, zeros({}, x.dtype()));
    case LayerFn::Sort: return sort(x, s.dim, s.flag).first;
    case LayerFn::Argsort: return argsort(x, s.dim, s.flag);
    case LayerFn::kCount: break;
  }
  EMBER_CHECK(false, "program_layers: bad layer step");
  return x;
}

double layer_bound(const Step& s, const std::vector<double>& bounds,
                   const std::vector<Tensor>& vals) {
  auto b = [&](size_t i) { return i < s.args.size() ? bounds[size_t(s.args[i])] : 0.0; };
  const bool weight = s.args.size() > 1, bias = s.args.size() > 2;
  const Tensor& x = vals[size_t(s.args[0])];
  switch (LayerFn(s.fn)) {
    case LayerFn::Conv1d:
    case LayerFn::Conv2d:
      return b(0) * b(1) * double(fan_in(vals[size_t(s.args[1])].sizes())) + b(2);
    case LayerFn::BatchNorm:  // the variance |var| + 0.5 + eps is above 0.5
      return (b(0) + b(1)) * std::sqrt(2.0) * (s.args.size() > 3 ? b(3) : 1) + b(4);
    case LayerFn::BatchNormTrain:
    case LayerFn::GroupNorm: {
      // Normalized values stay within sqrt(n) of a channel's (group's) n values, and within
      // 2 |x| / sqrt(eps) = 4 |x|.
      const int64_t per = LayerFn(s.fn) == LayerFn::GroupNorm ? x.size(0) * s.groups : x.size(1);
      const double n = double(x.numel()) / double(std::max<int64_t>(per, 1));
      return std::max(std::sqrt(n), 4 * b(0)) * (weight ? b(1) : 1) + (bias ? b(2) : 0);
    }
    case LayerFn::Swiglu: return std::max(b(0), 0.3) * b(1);  // |silu(x)| <= max(|x|, 0.28)
    case LayerFn::CausalMask: return std::max(b(0), std::abs(s.scalar));
    case LayerFn::Argsort: return double(x.size(s.dim));
    default: return b(0);  // pooling, resizing, masks and sorts keep x's values (or average them)
  }
}

std::string layer_cpp(const Step& s, const std::function<std::string(int)>& name) {
  const std::string x = name(s.args[0]);
  auto arg = [&](size_t i) { return i < s.args.size() ? name(s.args[i]) : std::string("{}"); };
  auto n = [](int64_t v) { return std::to_string(v); };
  const std::string stride = s.stride ? ints({s.stride}) : "{}";
  switch (LayerFn(s.fn)) {
    case LayerFn::Conv1d:
      return "conv1d(" + x + ", " + arg(1) + ", " + arg(2) + ", " + n(s.stride) + ", " +
             n(s.padding) + ", " + n(s.dilation) + ", " + n(s.groups) + ")";
    case LayerFn::Conv2d:
      return "conv2d(" + x + ", " + arg(1) + ", " + arg(2) + ", " + ints({s.stride}) + ", " +
             ints({s.padding}) + ", " + ints({s.dilation}) + ", " + n(s.groups) + ")";
    case LayerFn::MaxPool2d:
      return "max_pool2d(" + x + ", " + ints(s.kernel) + ", " + stride + ", " +
             ints({s.padding}) + ", " + ints({s.dilation}) + ")";
    case LayerFn::AvgPool2d:
      return "avg_pool2d(" + x + ", " + ints(s.kernel) + ", " + stride + ", " +
             ints({s.padding}) + ", " + (s.flag ? "true" : "false") + ")";
    case LayerFn::AdaptiveAvgPool2d: return "adaptive_avg_pool2d(" + x + ", " + ints(s.shape) + ")";
    case LayerFn::BatchNorm:
      return "batch_norm(" + x + ", " + arg(1) + ", " + arg(2) + ".abs() + 0.5, " + arg(3) +
             ", " + arg(4) + ", false, 0.1, " + num(s.scalar) + ")";
    case LayerFn::BatchNormTrain:
      return "batch_norm(" + x + ", {}, {}, " + arg(1) + ", " + arg(2) + ", true, 0.1, " +
             num(s.scalar) + ")";
    case LayerFn::GroupNorm:
      return "group_norm(" + x + ", " + n(s.groups) + ", " + arg(1) + ", " + arg(2) + ", " +
             num(s.scalar) + ")";
    case LayerFn::Swiglu: return "swiglu(" + x + ", " + arg(1) + ")";
    case LayerFn::Nearest: return "interpolate(" + x + ", " + ints(s.shape) + ", \"nearest\")";
    case LayerFn::Bilinear:
      return "interpolate(" + x + ", " + ints(s.shape) + ", \"bilinear\", " +
             (s.flag ? "true" : "false") + ")";
    case LayerFn::CausalMask:
      return x + ".masked_fill(arange(" + x + ".size(-1)).gt(arange(" + x +
             ".size(-2)).unsqueeze(1) + " + n(s.start) + "), " + num(s.scalar) + ")";
    case LayerFn::MaskWhere:
      return "where(" + arg(1) + ".gt(" + num(s.scalar) + "), " + x + ", zeros({}, " + x +
             ".dtype()))";
    case LayerFn::Sort:
      return "sort(" + x + ", " + n(s.dim) + (s.flag ? ", true" : ", false") + ").first";
    case LayerFn::Argsort:
      return "argsort(" + x + ", " + n(s.dim) + (s.flag ? ", true" : ", false") + ")";
    case LayerFn::kCount: break;
  }
  return "?";
}

}  // namespace ember::testgen
