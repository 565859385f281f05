// Op cases: interpolate, nearest and bilinear (align_corners false and true), upsampling and
// downsampling, against float64 loop references of PyTorch's index rules; gradchecked.
#include <algorithm>
#include <cmath>

#include "support/op_cases.h"

namespace ember::test {

namespace {

// PyTorch's nearest source index: floor(dst * (in / out)), the scale and product in float.
int64_t nearest_source(int64_t dst, int64_t in, int64_t out) {
  const float scale = float(in) / float(out);
  return std::min(int64_t(std::floor(float(dst) * scale)), in - 1);
}

// PyTorch's linear source position and its two rows with weights.
struct Taps {
  int64_t i0, i1;
  double w0, w1;
};
Taps linear_source(int64_t dst, int64_t in, int64_t out, bool align_corners) {
  double src;
  if (align_corners) {
    src = out > 1 ? double(dst) * double(in - 1) / double(out - 1) : 0.0;
  } else {
    src = std::max((double(dst) + 0.5) * double(in) / double(out) - 0.5, 0.0);
  }
  const int64_t i0 = std::min(int64_t(src), in - 1);
  const double frac = src - double(i0);
  return {i0, std::min(i0 + 1, in - 1), 1 - frac, frac};
}

Ref ref_interpolate(const Ref& x, int64_t Ho, int64_t Wo, bool bilinear, bool align_corners) {
  const int64_t N = x.shape[0], C = x.shape[1], H = x.shape[2], W = x.shape[3];
  Ref out({N, C, Ho, Wo}, 0.0);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t i = 0; i < Ho; ++i)
        for (int64_t j = 0; j < Wo; ++j) {
          if (!bilinear) {
            out.at({n, c, i, j}) = x.at({n, c, nearest_source(i, H, Ho), nearest_source(j, W, Wo)});
            continue;
          }
          const Taps r = linear_source(i, H, Ho, align_corners);
          const Taps q = linear_source(j, W, Wo, align_corners);
          const double top = q.w0 * x.at({n, c, r.i0, q.i0}) + q.w1 * x.at({n, c, r.i0, q.i1});
          const double bottom = q.w0 * x.at({n, c, r.i1, q.i0}) + q.w1 * x.at({n, c, r.i1, q.i1});
          out.at({n, c, i, j}) = r.w0 * top + r.w1 * bottom;
        }
  return out;
}

}  // namespace

EMBER_OP_CASES(interpolate) {
  std::vector<OpCase> cases;
  struct I {
    std::string mode;
    bool align_corners;
    int64_t ho, wo;
  };
  // Up and down, a doubling (nearest's exact halving), a non-integer ratio, one pixel.
  const std::vector<I> sizes = {
      {"nearest", false, 7, 3},   {"nearest", false, 8, 10},  {"nearest", false, 3, 13},
      {"bilinear", false, 7, 3},  {"bilinear", false, 8, 10}, {"bilinear", false, 2, 2},
      {"bilinear", true, 7, 3},   {"bilinear", true, 1, 6},
  };
  for (const I& k : sizes) {
    OpCase c;
    c.name = "interpolate_" + k.mode + (k.align_corners ? "_align_corners_" : "_") +
             std::to_string(k.ho) + "x" + std::to_string(k.wo);
    c.shapes = {{{2, 3, 4, 5}}, {{1, 2, 5, 5}}};
    const I p = k;
    c.run = [p](const Inputs& in) {
      return Inputs{interpolate(in[0], {p.ho, p.wo}, p.mode, p.align_corners)};
    };
    c.reference = [p](const std::vector<Ref>& r) {
      return std::vector<Ref>{
          ref_interpolate(r[0], p.ho, p.wo, p.mode == "bilinear", p.align_corners)};
    };
    c.gradcheck = true;
    c.tol_scale = 2;
    cases.push_back(std::move(c));
  }
  return cases;
}

}  // namespace ember::test
