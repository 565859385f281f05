// Pieces of LLaMA-style blocks as composites: rotary position embeddings (rotate-half pairs, as
// transformers' apply_rotary_pos_emb) with their cos/sin tables, and SwiGLU's gate.
#include <cmath>

#include "ops/frontend.h"

namespace ember {

Tensor rotary_embedding(const Tensor& x, const Tensor& cos_in, const Tensor& sin_in) {
  EMBER_CHECK(x.defined() && cos_in.defined() && sin_in.defined(),
              "rotary_embedding: undefined tensor argument");
  EMBER_CHECK(x.dim() >= 2 && x.size(-1) % 2 == 0 && x.size(-1) > 0 && is_floating(x.dtype()),
              "rotary_embedding: x must be floating point [..., T, D] with an even D, got ",
              dtype_name(x.dtype()), " of shape ", x.shape_str());
  EMBER_CHECK(cos_in.sizes() == sin_in.sizes(), "rotary_embedding: cos ", cos_in.shape_str(),
              " and sin ", sin_in.shape_str(), " must have the same shape");
  const int64_t D = x.size(-1), half = D / 2;
  const int64_t last = cos_in.dim() ? cos_in.size(-1) : 0;
  EMBER_CHECK(last == half || last == D,
              "rotary_embedding: the tables' last dim must be D/2 = ", half,
              " (an angle a pair) or D = ", D, " (each angle twice), got cos of shape ",
              cos_in.shape_str(), " for x of shape ", x.shape_str());
  bool fits = cos_in.dim() <= x.dim();
  for (int64_t d = 2; fits && d <= cos_in.dim(); ++d)  // the last dim is checked above
    fits = cos_in.size(-d) == 1 || cos_in.size(-d) == x.size(-d);
  EMBER_CHECK(fits, "rotary_embedding: tables of shape ", cos_in.shape_str(),
              " do not broadcast to x of shape ", x.shape_str(), " (give them as [T, ", last,
              "] or [..., T, ", last, "])");
  // The tables in x's dtype, as transformers casts them.
  const Tensor c = cast_to(cos_in, x.dtype()), s = cast_to(sin_in, x.dtype());
  const Tensor x1 = x.slice(-1, 0, half), x2 = x.slice(-1, half, D);
  if (last == D) return x * c + cat({-x2, x1}, -1) * s;  // x cos + rotate_half(x) sin
  return cat({x1 * c - x2 * s, x2 * c + x1 * s}, -1);
}

std::pair<Tensor, Tensor> rotary_cos_sin(int64_t seq_len, int64_t head_dim, double base,
                                         TensorOptions opts) {
  EMBER_CHECK(seq_len >= 0 && head_dim > 0 && head_dim % 2 == 0, "rotary_cos_sin: seq_len (",
              seq_len, ") must be at least 0 and head_dim (", head_dim, ") even and positive");
  EMBER_CHECK(base > 0, "rotary_cos_sin: base must be positive, got ", base);
  EMBER_CHECK(is_floating(opts.dtype), "rotary_cos_sin: the tables must be floating point, got ",
              dtype_name(opts.dtype));
  // Position t, pair i: the angle t * base^(-2i / head_dim). Filled on the host in float64.
  const int64_t half = head_dim / 2;
  std::vector<double> c(size_t(seq_len * half)), s(c.size());
  for (int64_t i = 0; i < half; ++i) {
    const double freq = 1.0 / std::pow(base, double(2 * i) / double(head_dim));
    for (int64_t t = 0; t < seq_len; ++t) {
      c[size_t(t * half + i)] = std::cos(double(t) * freq);
      s[size_t(t * half + i)] = std::sin(double(t) * freq);
    }
  }
  auto table = [&](const std::vector<double>& v) {
    NoGradGuard no_grad;
    Tensor r = from_vector(v, {seq_len, half}, opts.dtype).to(opts.device);
    if (opts.requires_grad) r.requires_grad_(true);
    return r;
  };
  return {table(c), table(s)};
}

Tensor swiglu(const Tensor& a, const Tensor& b) {
  EMBER_CHECK(a.defined() && b.defined(), "swiglu: undefined tensor argument");
  return a.silu() * b;
}

}  // namespace ember
