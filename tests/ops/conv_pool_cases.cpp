// Op cases: the convolution and pooling composites (conv2d, conv1d, max_pool2d, avg_pool2d,
// adaptive_avg_pool2d) against float64 loop references over NCHW; gradchecked.
#include <algorithm>
#include <limits>

#include "support/op_cases.h"

namespace ember::test {

namespace {

struct Conv {
  int64_t sh = 1, sw = 1, ph = 0, pw = 0, dh = 1, dw = 1, groups = 1;
};

// out[n, o, i, j] = b[o] + sum over c of o's group, ki, kj of
//   x[n, c, i sh - ph + ki dh, j sw - pw + kj dw] * w[o, c - group start, ki, kj]
// (positions outside x count as 0).
Ref ref_conv2d(const Ref& x, const Ref& w, const Ref* b, const Conv& p) {
  const int64_t N = x.shape[0], H = x.shape[2], W = x.shape[3];
  const int64_t O = w.shape[0], Cg = w.shape[1], kH = w.shape[2], kW = w.shape[3];
  const int64_t Ho = (H + 2 * p.ph - p.dh * (kH - 1) - 1) / p.sh + 1;
  const int64_t Wo = (W + 2 * p.pw - p.dw * (kW - 1) - 1) / p.sw + 1;
  const int64_t Og = O / p.groups;
  Ref out({N, O, Ho, Wo}, 0.0);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < O; ++o)
      for (int64_t i = 0; i < Ho; ++i)
        for (int64_t j = 0; j < Wo; ++j) {
          double s = b ? b->v[size_t(o)] : 0.0;
          for (int64_t cg = 0; cg < Cg; ++cg) {
            const int64_t c = o / Og * Cg + cg;
            for (int64_t ki = 0; ki < kH; ++ki)
              for (int64_t kj = 0; kj < kW; ++kj) {
                const int64_t h = i * p.sh - p.ph + ki * p.dh, v = j * p.sw - p.pw + kj * p.dw;
                if (h < 0 || h >= H || v < 0 || v >= W) continue;
                s += x.at({n, c, h, v}) * w.at({o, cg, ki, kj});
              }
          }
          out.at({n, o, i, j}) = s;
        }
  return out;
}

Ref reshaped(Ref r, Shape s) {
  r.shape = std::move(s);
  return r;
}

struct Pool {
  int64_t kh, kw, sh, sw, ph = 0, pw = 0, dh = 1, dw = 1;
};

// Max or mean over each window of the trailing two dims; positions outside x are skipped (max
// pads with -inf), and counted as zeros by the mean when count_pad.
Ref ref_pool2d(const Ref& x, const Pool& p, bool max, bool count_pad) {
  const int64_t nd = x.dim(), H = x.shape[size_t(nd - 2)], W = x.shape[size_t(nd - 1)];
  const int64_t Ho = (H + 2 * p.ph - p.dh * (p.kh - 1) - 1) / p.sh + 1;
  const int64_t Wo = (W + 2 * p.pw - p.dw * (p.kw - 1) - 1) / p.sw + 1;
  Shape s = x.shape;
  s[size_t(nd - 2)] = Ho;
  s[size_t(nd - 1)] = Wo;
  Ref out(s, 0.0);
  const int64_t planes = H * W > 0 ? x.numel() / (H * W) : 0;
  for (int64_t q = 0; q < planes; ++q)
    for (int64_t i = 0; i < Ho; ++i)
      for (int64_t j = 0; j < Wo; ++j) {
        double acc = max ? -std::numeric_limits<double>::infinity() : 0.0;
        int64_t inside = 0;
        for (int64_t ki = 0; ki < p.kh; ++ki)
          for (int64_t kj = 0; kj < p.kw; ++kj) {
            const int64_t h = i * p.sh - p.ph + ki * p.dh, v = j * p.sw - p.pw + kj * p.dw;
            if (h < 0 || h >= H || v < 0 || v >= W) continue;
            const double e = x.v[size_t(q * H * W + h * W + v)];
            acc = max ? std::max(acc, e) : acc + e;
            ++inside;
          }
        out.v[size_t((q * Ho + i) * Wo + j)] =
            max ? acc : acc / double(count_pad ? p.kh * p.kw : inside);
      }
  return out;
}

// Mean over rows [floor(i H / Ho), ceil((i + 1) H / Ho)) and the same columns.
Ref ref_adaptive_avg_pool2d(const Ref& x, int64_t Ho, int64_t Wo) {
  const int64_t nd = x.dim(), H = x.shape[size_t(nd - 2)], W = x.shape[size_t(nd - 1)];
  Shape s = x.shape;
  s[size_t(nd - 2)] = Ho;
  s[size_t(nd - 1)] = Wo;
  Ref out(s, 0.0);
  const int64_t planes = x.numel() / (H * W);
  for (int64_t q = 0; q < planes; ++q)
    for (int64_t i = 0; i < Ho; ++i)
      for (int64_t j = 0; j < Wo; ++j) {
        const int64_t h0 = i * H / Ho, h1 = ((i + 1) * H + Ho - 1) / Ho;
        const int64_t w0 = j * W / Wo, w1 = ((j + 1) * W + Wo - 1) / Wo;
        double acc = 0;
        for (int64_t h = h0; h < h1; ++h)
          for (int64_t v = w0; v < w1; ++v) acc += x.v[size_t(q * H * W + h * W + v)];
        out.v[size_t((q * Ho + i) * Wo + j)] = acc / double((h1 - h0) * (w1 - w0));
      }
  return out;
}

void add_conv_cases(std::vector<OpCase>& cases) {
  struct C2 {
    std::string name;
    Conv p;
    bool bias;
    std::vector<Shapes> shapes;  // x, weight (and bias)
  };
  const std::vector<C2> convs = {
      {"plain", {}, true, {{{2, 3, 6, 5}, {4, 3, 3, 3}, {4}}, {{0, 3, 4, 4}, {2, 3, 2, 2}, {2}}}},
      {"stride_padding", {2, 1, 1, 0}, true, {{{1, 2, 7, 6}, {3, 2, 3, 2}, {3}}}},
      {"dilation", {1, 2, 2, 1, 2, 2}, false, {{{2, 2, 7, 7}, {2, 2, 3, 3}}}},
      {"groups", {1, 1, 1, 1, 1, 1, 2}, true, {{{2, 4, 5, 5}, {6, 2, 3, 3}, {6}}}},
      {"depthwise", {2, 2, 1, 1, 1, 1, 3}, false, {{{2, 3, 5, 4}, {6, 1, 3, 3}}}},
      {"pointwise", {}, false, {{{2, 3, 4, 4}, {5, 3, 1, 1}}}},
      {"unbatched", {1, 1, 1, 1}, true, {{{3, 5, 5}, {2, 3, 3, 3}, {2}}}},
  };
  for (const C2& k : convs) {
    OpCase c;
    c.name = "conv2d_" + k.name;
    c.shapes = k.shapes;
    const Conv p = k.p;
    const bool bias = k.bias;
    c.run = [p, bias](const Inputs& in) {
      return Inputs{conv2d(in[0], in[1], bias ? in[2] : Tensor(), {p.sh, p.sw}, {p.ph, p.pw},
                           {p.dh, p.dw}, p.groups)};
    };
    c.reference = [p, bias](const std::vector<Ref>& r) {
      if (r[0].dim() == 4)
        return std::vector<Ref>{ref_conv2d(r[0], r[1], bias ? &r[2] : nullptr, p)};
      Shape batched = r[0].shape;
      batched.insert(batched.begin(), 1);
      const Ref y = ref_conv2d(reshaped(r[0], batched), r[1], bias ? &r[2] : nullptr, p);
      return std::vector<Ref>{reshaped(y, Shape(y.shape.begin() + 1, y.shape.end()))};
    };
    c.gradcheck = true;
    c.tol_scale = 4;
    cases.push_back(std::move(c));
  }
  // conv1d: the reference is conv2d's over a height of 1.
  struct C1 {
    std::string name;
    int64_t stride, padding, dilation, groups;
    Shapes shapes;
  };
  const std::vector<C1> conv1s = {
      {"plain", 1, 0, 1, 1, {{2, 3, 10}, {4, 3, 3}, {4}}},
      {"strided_dilated", 2, 2, 2, 1, {{2, 2, 11}, {3, 2, 3}, {3}}},
      {"depthwise", 1, 1, 1, 4, {{2, 4, 9}, {4, 1, 3}, {4}}},
      {"unbatched", 1, 1, 1, 1, {{3, 8}, {2, 3, 5}, {2}}},
  };
  for (const C1& k : conv1s) {
    OpCase c;
    c.name = "conv1d_" + k.name;
    c.shapes = {k.shapes};
    c.run = [k](const Inputs& in) {
      return Inputs{conv1d(in[0], in[1], in[2], k.stride, k.padding, k.dilation, k.groups)};
    };
    c.reference = [k](const std::vector<Ref>& r) {
      Conv p;
      p.sw = k.stride;
      p.pw = k.padding;
      p.dw = k.dilation;
      p.groups = k.groups;
      Shape xs = r[0].shape;
      if (xs.size() == 2) xs.insert(xs.begin(), 1);
      xs.insert(xs.end() - 1, 1);
      Shape ws = r[1].shape;
      ws.insert(ws.end() - 1, 1);
      const Ref y = ref_conv2d(reshaped(r[0], xs), reshaped(r[1], ws), &r[2], p);
      Shape ys = {y.shape[1], y.shape[3]};
      if (r[0].dim() == 3) ys.insert(ys.begin(), y.shape[0]);
      return std::vector<Ref>{reshaped(y, ys)};
    };
    c.gradcheck = true;
    c.tol_scale = 4;
    cases.push_back(std::move(c));
  }
}

void add_pool_cases(std::vector<OpCase>& cases) {
  struct P {
    std::string name;
    Pool p;
    bool default_stride;
    std::vector<Shapes> shapes;
  };
  const std::vector<P> pools = {
      {"k3_s2_p1", {3, 3, 2, 2, 1, 1}, false, {{{2, 3, 7, 6}}, {{3, 5, 5}}, {{0, 2, 4, 4}}}},
      {"k2x3_default_stride", {2, 3, 2, 3}, true, {{{2, 2, 6, 7}}}},
      {"k3_s1_p1", {3, 3, 1, 1, 1, 1}, false, {{{1, 2, 4, 5}}}},
  };
  for (const P& k : pools)
    for (int kind = 0; kind < 3; ++kind) {  // max, avg counting the padding, avg without it
      const bool max = kind == 0, count_pad = kind == 1;
      OpCase c;
      c.name = std::string(max ? "max_pool2d_" : count_pad ? "avg_pool2d_" : "avg_pool2d_nopad_") +
               k.name;
      c.shapes = k.shapes;
      const Pool p = k.p;
      const bool default_stride = k.default_stride;
      c.run = [p, max, count_pad, default_stride](const Inputs& in) {
        const std::vector<int64_t> stride =
            default_stride ? std::vector<int64_t>{} : std::vector<int64_t>{p.sh, p.sw};
        return Inputs{max ? max_pool2d(in[0], {p.kh, p.kw}, stride, {p.ph, p.pw})
                          : avg_pool2d(in[0], {p.kh, p.kw}, stride, {p.ph, p.pw}, count_pad)};
      };
      c.reference = [p, max, count_pad](const std::vector<Ref>& r) {
        return std::vector<Ref>{ref_pool2d(r[0], p, max, count_pad)};
      };
      c.gradcheck = true;
      cases.push_back(std::move(c));
    }
  {
    OpCase c;
    c.name = "max_pool2d_dilation";
    c.shapes = {{{2, 2, 7, 8}}};
    c.run = [](const Inputs& in) {
      return Inputs{max_pool2d(in[0], {3, 2}, {1, 2}, {1, 1}, {2, 3})};
    };
    c.reference = [](const std::vector<Ref>& r) {
      return std::vector<Ref>{ref_pool2d(r[0], {3, 2, 1, 2, 1, 1, 2, 3}, true, false)};
    };
    c.gradcheck = true;
    cases.push_back(std::move(c));
  }
  struct A {
    int64_t ho, wo;
    std::vector<Shapes> shapes;
  };
  // Uneven windows, tiling windows (the reshape path), one global window, and an upsampling.
  const std::vector<A> adaptive = {{3, 2, {{{2, 3, 7, 5}}, {{3, 8, 9}}}},
                                   {3, 2, {{{2, 3, 6, 4}}}},
                                   {1, 1, {{{2, 3, 5, 4}}}},
                                   {5, 4, {{{1, 2, 3, 3}}}}};
  for (const A& k : adaptive) {
    OpCase c;
    c.name = "adaptive_avg_pool2d_" + std::to_string(k.ho) + "x" + std::to_string(k.wo);
    c.shapes = k.shapes;
    const int64_t ho = k.ho, wo = k.wo;
    c.run = [ho, wo](const Inputs& in) { return Inputs{adaptive_avg_pool2d(in[0], {ho, wo})}; };
    c.reference = [ho, wo](const std::vector<Ref>& r) {
      return std::vector<Ref>{ref_adaptive_avg_pool2d(r[0], ho, wo)};
    };
    c.gradcheck = true;
    c.tol_scale = 2;
    cases.push_back(std::move(c));
  }
}

}  // namespace

EMBER_OP_CASES(conv_pool) {
  std::vector<OpCase> cases;
  add_conv_cases(cases);
  add_pool_cases(cases);
  return cases;
}

}  // namespace ember::test
