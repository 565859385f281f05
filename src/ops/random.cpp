// Random ops: shape rules and front ends. The front end validates the arguments, reserves
// the op's draws from the global generator and records (seed, offset) in the Attrs.
#include "kernels/cpu/random.h"

#include <cmath>

#include "core/generator.h"
#include "core/make_tensor.h"
#include "ops/frontend.h"

namespace ember {

namespace {

MetaList infer_random(std::span<const Tensor>, const Attrs& a) {
  return {TensorMeta{a.shape, {}, 0, a.dtype}};
}

MetaList infer_multinomial(std::span<const Tensor> in, const Attrs& a) {
  Shape s = in[0].dim() == 1 ? Shape{a.end} : Shape{in[0].size(0), a.end};
  return {TensorMeta{s, {}, 0, DType::Int64}};
}

// Attrs of a random op making `shape` in `dtype` on `device` from `draws` fresh 32-bit draws.
Attrs random_attrs(const Shape& shape, DType dtype, Device device, uint64_t draws,
                   const char* op) {
  Attrs a;
  a.shape = shape;
  a.dtype = dtype;
  a.device = device;
  RandomRange r = reserve_random(draws, op);
  a.seed = r.seed;
  a.offset = r.offset;
  return a;
}

Tensor finish(Tensor t, const TensorOptions& o) {
  if (o.requires_grad) t.requires_grad_(true);
  return t;
}

void check_floating(DType t, const char* op, const char* instead) {
  EMBER_CHECK(is_floating(t), op, ": dtype ", dtype_name(t), " is not a floating-point type; ",
              instead);
}

// Largest integer magnitude a dtype holds exactly (every integer up to it is representable).
double exact_integer_limit(DType t) {
  switch (t) {
    case DType::Float16:
      return 2048;
    case DType::BFloat16:
      return 256;
    case DType::Float32:
      return 16777216;
    case DType::Float64:
      return 9007199254740992;
    case DType::Int32:
      return 2147483647;
    default:
      return 9223372036854775807.0;
  }
}

}  // namespace

const OpImpl op_impl_rand{infer_random, cpu::rand, nullptr};
const OpImpl op_impl_randn{infer_random, cpu::randn, nullptr};
const OpImpl op_impl_randint{infer_random, cpu::randint, nullptr};
const OpImpl op_impl_bernoulli{infer_random, cpu::bernoulli, nullptr};
const OpImpl op_impl_rng_state{infer_random, cpu::rng_state, nullptr};

namespace {
MetaList infer_dropout(std::span<const Tensor> in, const Attrs&) {
  return {TensorMeta{in[0].sizes(), {}, 0, in[0].dtype()}};
}
// The same mask on the grad: the op again with the same draws (dropout_rng: the same rng).
std::vector<Tensor> grad_dropout(const GradCtx& c) {
  return {dispatch1(OpId::dropout, {c.grads[0]}, c.attrs)};
}
std::vector<Tensor> grad_dropout_rng(const GradCtx& c) {
  return {dispatch1(OpId::dropout_rng, {c.grads[0], c.inputs[1]}, c.attrs), Tensor()};
}
}  // namespace

const OpImpl op_impl_dropout{infer_dropout, cpu::dropout, grad_dropout};
const OpImpl op_impl_dropout_rng{infer_dropout, cpu::dropout_rng, grad_dropout_rng, 0b10, 0};
const OpImpl op_impl_multinomial{infer_multinomial, cpu::multinomial, nullptr};

// ---- front ends ----

Tensor rand(const Shape& shape, TensorOptions opts) {
  check_sizes(shape, opts.dtype, "rand");
  check_floating(opts.dtype, "rand", "use randint for integers");
  uint64_t per = opts.dtype == DType::Float64 ? 2 : 1;
  Attrs a = random_attrs(shape, opts.dtype, opts.device, per * uint64_t(shape_numel(shape)), "rand");
  return finish(dispatch1(OpId::rand, {}, a), opts);
}

Tensor randn(const Shape& shape, TensorOptions opts) {
  check_sizes(shape, opts.dtype, "randn");
  check_floating(opts.dtype, "randn", "normal samples need a floating dtype");
  // Box-Muller pairs: an odd count still uses the draws of a whole pair.
  uint64_t pairs = (uint64_t(shape_numel(shape)) + 1) / 2;
  uint64_t per_pair = opts.dtype == DType::Float64 ? 4 : 2;
  Attrs a = random_attrs(shape, opts.dtype, opts.device, per_pair * pairs, "randn");
  return finish(dispatch1(OpId::randn, {}, a), opts);
}

Tensor randint(int64_t low, int64_t high, const Shape& shape, TensorOptions opts) {
  check_sizes(shape, opts.dtype, "randint");
  EMBER_CHECK(low < high, "randint: high (", high, ") must be greater than low (", low,
              "); values are drawn from [low, high)");
  EMBER_CHECK(opts.dtype != DType::Bool,
              "randint: dtype bool is not supported; use "
              "bernoulli(shape, 0.5, DType::Bool)");
  // Every value in [low, high) must be exactly representable, or rounding could land
  // outside the range.
  double limit = exact_integer_limit(opts.dtype);
  double lo_min = opts.dtype == DType::Int32 ? -limit - 1 : -limit;
  EMBER_CHECK(double(low) >= lo_min && double(high - 1) <= limit, "randint: the range [", low, ", ",
              high, ") does not fit ", dtype_name(opts.dtype),
              ", which holds every integer only in [", lo_min, ", ", limit, "]; use a wider dtype");
  Attrs a = random_attrs(shape, opts.dtype, opts.device, 2 * uint64_t(shape_numel(shape)), "randint");
  a.start = low;
  a.end = high;
  return finish(dispatch1(OpId::randint, {}, a), opts);
}

Tensor bernoulli(const Shape& shape, double p, TensorOptions opts) {
  check_sizes(shape, opts.dtype, "bernoulli");
  EMBER_CHECK(p >= 0 && p <= 1, "bernoulli: probability ", p, " is outside [0, 1]");
  Attrs a = random_attrs(shape, opts.dtype, opts.device, uint64_t(shape_numel(shape)), "bernoulli");
  a.value = p;
  return finish(dispatch1(OpId::bernoulli, {}, a), opts);
}

Tensor reserve_random_tensor(uint64_t draws, Device device, const char* op) {
  const RandomRange r = reserve_random(draws, op);
  Attrs s;
  s.shape = {2};
  s.dtype = DType::Int64;
  s.device = device;
  s.end = int64_t(draws);
  s.seed = r.seed;
  s.offset = r.offset;
  return dispatch1(OpId::rng_state, {}, s);
}

Tensor dropout(const Tensor& x, double p, bool training) {
  EMBER_CHECK(x.defined(), "dropout: undefined tensor argument");
  EMBER_CHECK(p >= 0 && p <= 1, "dropout: probability ", p, " is outside [0, 1]");
  check_floating(x.dtype(), "dropout", "convert the input with .to() first");
  if (!training || p == 0) return x;
  // Everything dropped: x * 0 keeps the graph (a zero gradient) without drawing; as in
  // PyTorch, infinities and NaNs in x still give NaN.
  if (p == 1) return x * 0.0;
  const double keep = 1 - p;
  if (x.device().type != DeviceType::CPU) {
    // One kernel, and no mask kept for the backward (it draws the mask again). Under capture
    // the draws come from an rng_state tensor (dropout_rng): the op's attrs would be repeated
    // by every replay of the graph.
    Attrs a;
    a.value = p;
    if (capture_hook())
      return dispatch1(OpId::dropout_rng,
                       {x, reserve_random_tensor(uint64_t(x.numel()), x.device(), "dropout")}, a);
    RandomRange r = reserve_random(uint64_t(x.numel()), "dropout");
    a.seed = r.seed;
    a.offset = r.offset;
    return dispatch1(OpId::dropout, {x}, a);
  }
  Tensor scaled_mask;
  {
    NoGradGuard no_grad;
    TensorOptions o(x.dtype());
    o.device = x.device();
    scaled_mask = bernoulli(x.sizes(), keep, o) * (1 / keep);
  }
  // The gradient of x * mask/(1-p) with respect to x is that same mask.
  return x * scaled_mask;
}

Tensor multinomial(const Tensor& probs, int64_t num_samples, bool replacement) {
  EMBER_CHECK(probs.defined(), "multinomial: undefined tensor argument");
  EMBER_CHECK(probs.dim() == 1 || probs.dim() == 2,
              "multinomial: expects weights of 1 or 2 dims ([categories] or [rows, "
              "categories]), got shape ",
              probs.shape_str());
  check_floating(probs.dtype(), "multinomial", "weights must be floating point");
  const int64_t cols = probs.size(-1);
  EMBER_CHECK(cols > 0, "multinomial: the weights (shape ", probs.shape_str(),
              ") have no categories");
  EMBER_CHECK(num_samples > 0, "multinomial: num_samples must be positive, got ", num_samples);
  EMBER_CHECK(replacement || num_samples <= cols, "multinomial: cannot draw ", num_samples,
              " samples without replacement from ", cols, " categories; pass replacement=true");
  const int64_t rows = probs.dim() == 1 ? 1 : probs.size(0);
  check_sizes({rows, num_samples}, DType::Int64, "multinomial");
  // One sample without replacement is drawn like one with replacement (see the kernel).
  bool race = !replacement && num_samples > 1;
  uint64_t per_row = round_up_to_block(2 * uint64_t(race ? cols : num_samples));
  EMBER_CHECK(rows == 0 || per_row <= UINT64_MAX / uint64_t(rows),
              "multinomial: too many samples (", rows, " rows of ", per_row, " draws)");
  Attrs a = random_attrs({}, DType::Int64, probs.device(), uint64_t(rows) * per_row, "multinomial");
  a.end = num_samples;
  a.flag = replacement;
  return dispatch1(OpId::multinomial, {probs}, a);
}

}  // namespace ember
