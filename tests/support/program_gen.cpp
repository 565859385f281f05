// Random program generator for the compile backends: generation by probing real ops on small
// tensors (so shapes and dtypes come from ember itself), printing and shrinking.
#include "support/program_gen.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <set>
#include <sstream>

#include "ember/error.h"

namespace ember::testgen {
namespace {

using Rng = std::mt19937_64;

int64_t uniform(Rng& r, int64_t lo, int64_t hi) {  // inclusive
  return std::uniform_int_distribution<int64_t>(lo, hi)(r);
}
bool coin(Rng& r, double p = 0.5) { return std::uniform_real_distribution<double>(0, 1)(r) < p; }
template <class T>
const T& pick(Rng& r, const std::vector<T>& v) {
  return v[size_t(uniform(r, 0, int64_t(v.size()) - 1))];
}

// Beyond this, float32 rounding of intermediates would dominate the tolerances.
constexpr double kMaxBound = 1e3;

const char* unary_name(UnaryFn f) {
  static const char* n[] = {"neg", "exp", "log", "sqrt", "tanh", "sigmoid", "relu", "gelu", "silu", "abs"};
  return n[int(f)];
}
const char* binary_name(BinaryFn f) {
  static const char* n[] = {"add", "sub", "mul", "div", "maximum", "minimum"};
  return n[int(f)];
}
const char* dtype_cpp(DType t) {
  switch (t) {
    case DType::Float32: return "kFloat32";
    case DType::Float64: return "kFloat64";
    case DType::Int64: return "kInt64";
    default: return "?";
  }
}
std::string shape_cpp(const Shape& s) {
  std::string out = "{";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "}";
}
std::string num(double v) {
  std::ostringstream os;
  os << v;
  std::string s = os.str();
  if (s.find_first_of(".e") == std::string::npos) s += ".0";
  return s;
}

double result_bound(const Step& s, const std::vector<double>& b, const Tensor& in0) {
  auto arg = [&](size_t i) { return b[size_t(s.args[i])]; };
  switch (s.op) {
    case Op::Unary:
      switch (UnaryFn(s.fn)) {
        case UnaryFn::Exp: return std::exp(std::min(arg(0), 4.0));
        case UnaryFn::Log: return std::max(1.0, std::log(arg(0) + 0.5));
        case UnaryFn::Sqrt: return std::sqrt(arg(0) + 0.5);
        case UnaryFn::Tanh:
        case UnaryFn::Sigmoid: return 1;
        default: return arg(0);
      }
    case Op::Binary:
      switch (BinaryFn(s.fn)) {
        case BinaryFn::Add:
        case BinaryFn::Sub: return arg(0) + arg(1);
        case BinaryFn::Mul: return arg(0) * arg(1);
        case BinaryFn::Div: return arg(0) * 2;
        default: return std::max(arg(0), arg(1));
      }
    case Op::AddScalar: return arg(0) + std::abs(s.scalar);
    case Op::MulScalar: return arg(0) * std::abs(s.scalar);
    case Op::Where: return std::max(arg(1), arg(2));
    case Op::Sum: {
      double n = in0.dim() ? double(in0.sizes()[size_t(s.dim)]) : 1;
      if (!s.shape.empty()) {
        n = 1;
        for (int64_t d : s.shape) n *= double(in0.sizes()[size_t(d)]);
      }
      return arg(0) * n;
    }
    case Op::Softmax:  // log_softmax when flag: x - max - log(sum), down to -2 |x| - log(n)
      return s.flag ? 2 * arg(0) + std::log(double(in0.dim() ? in0.sizes().back() : 1)) + 1 : 1;
    case Op::Matmul: return arg(0) * arg(1) * double(in0.dim() ? in0.sizes().back() : 1);
    case Op::LayerNorm:
      // Normalized values stay within sqrt(n); a row of (nearly) equal values normalizes its
      // rounding noise, which scales with the input.
      return std::max(std::sqrt(double(in0.dim() ? in0.sizes().back() : 1)), arg(0)) *
                 (s.args.size() > 1 ? arg(1) : 1) +
             (s.args.size() > 2 ? arg(2) : 0);
    case Op::Composite:
      // rms_norm: x / sqrt(mean(x^2) + eps) is within sqrt(n), or 2 |x| with eps 0.25;
      // cumsum: the sum of a dim; roll: x's own values.
      if (s.fn == 0)
        return std::max(std::sqrt(double(in0.dim() ? in0.sizes().back() : 1)), 2 * arg(0));
      if (s.fn == 1) return arg(0) * double(in0.dim() ? in0.sizes()[size_t(s.dim)] : 1);
      return arg(0);
    case Op::ReduceBroadcast: {
      const double red =
          s.fn == 0 ? arg(0) * double(in0.dim() ? in0.sizes()[size_t(s.dim)] : 1) : arg(0);
      return BinaryFn(s.fn2) == BinaryFn::Mul ? arg(0) * red : arg(0) + red;
    }
    default: return arg(0);
  }
}

// A large layer_norm eps: a row of equal values (a broadcast) normalizes only rounding noise,
// which eps keeps from growing past the tolerances.
constexpr double kLayerNormEps = 0.25;

// One of the row ops over a float x's last dim (value number x; the dim is resolved when the
// step is applied): a reduction (kept or not), softmax or layer_norm.
Step row_op(Rng& r, int x) {
  Step s;
  s.args = {x};
  s.dim = -1;
  const int which = int(uniform(r, 0, 4));
  s.op = which == 0   ? Op::Sum
         : which == 1 ? Op::Amax
         : which == 2 ? Op::Mean
         : which == 3 ? Op::Softmax
                      : Op::LayerNorm;
  s.keepdim = coin(r);
  s.scalar = kLayerNormEps;
  return s;
}

// A product of x (value a) with a matrix: a [k, m] value when x ends in k (the program's
// weight), else x's own rows, matmul(x, x^T).
Step product(Rng& r, const std::vector<Tensor>& vals, int a) {
  const Tensor& x = vals[size_t(a)];
  Step s;
  s.op = Op::Matmul;
  std::vector<int> ys;
  for (int b = 0; b < int(vals.size()); ++b)
    if (x.dim() >= 1 && vals[size_t(b)].dim() == 2 &&
        vals[size_t(b)].sizes()[0] == x.sizes().back())
      ys.push_back(b);
  if (!ys.empty() && coin(r, 0.7)) {
    s.args = {a, pick(r, ys)};
  } else {
    s.args = {a, a};
    s.flag = true;
  }
  return s;
}

// Steps that exercise fusion across a matmul (a row op of a product, a row op's result combined
// with a product, both with a pointwise op over the two, or a softmax between two products as
// in attention), or none when x does not fit.
std::vector<Step> draw_pattern(Rng& r, const std::vector<Tensor>& vals) {
  const int n = int(vals.size());
  const int a = n - 1 - int(uniform(r, 0, std::min(n - 1, 2)));
  const Tensor& x = vals[size_t(a)];
  if (x.dim() < 1 || x.dtype() == DType::Int64) return {};
  std::vector<Step> steps;
  if (x.dim() >= 2 && coin(r, 0.25)) {
    // Self-attention over x's rows: softmax(x x^T * c) x (an attention group's form).
    Step qk, scale, probs, pv;
    qk.op = Op::Matmul;
    qk.args = {a, a};
    qk.flag = true;
    scale.op = Op::MulScalar;
    scale.args = {n};
    scale.scalar = double(uniform(r, 1, 4)) / 4;
    probs.op = Op::Softmax;
    probs.args = {n + 1};
    probs.dim = -1;
    pv.op = Op::Matmul;
    pv.args = {n + 2, a};
    return {qk, scale, probs, pv};
  }
  Step combine;
  combine.op = Op::Binary;
  combine.fn = int(pick(r, std::vector<BinaryFn>{BinaryFn::Add, BinaryFn::Sub, BinaryFn::Mul}));
  if (coin(r)) {  // a row op of a product, then maybe the two combined
    steps.push_back(product(r, vals, a));
    steps.push_back(row_op(r, n));
    combine.args = {n + 1, n};
  } else {  // a row op of x and a product of x combined
    steps.push_back(row_op(r, a));
    steps.push_back(product(r, vals, a));
    combine.args = {n, n + 1};
  }
  if (coin(r, 0.7)) {
    if (coin(r)) std::swap(combine.args[0], combine.args[1]);
    steps.push_back(combine);
  }
  return steps;
}

// Picks a random step that applies to the current values; returns false when the draw does
// not fit (the caller draws again).
bool draw_step(Rng& r, const std::vector<Tensor>& vals, Step& s) {
  int n = int(vals.size());
  // Prefer recent values so chains form.
  int a = coin(r, 0.7) ? n - 1 - int(uniform(r, 0, std::min(n - 1, 2))) : int(uniform(r, 0, n - 1));
  const Tensor& x = vals[size_t(a)];
  int64_t nd = x.dim();
  bool is_float = x.dtype() != DType::Int64;
  s = Step{};
  s.args = {a};
  // Values that broadcast with x (x itself always does).
  std::vector<int> partners;
  for (int b = 0; b < n; ++b) {
    const Shape &p = vals[size_t(b)].sizes(), &q = x.sizes();
    bool ok = true;
    for (size_t i = 0; i < std::min(p.size(), q.size()); ++i) {
      int64_t u = p[p.size() - 1 - i], v = q[q.size() - 1 - i];
      if (u != v && u != 1 && v != 1) ok = false;
    }
    if (ok) partners.push_back(b);
  }
  int kind = int(uniform(r, 0, 124));
  if (kind < 22) {
    s.op = Op::Unary;
    s.fn = int(uniform(r, 0, int(UnaryFn::kCount) - 1));
    if (!is_float && UnaryFn(s.fn) != UnaryFn::Neg && UnaryFn(s.fn) != UnaryFn::Abs) return false;
  } else if (kind < 44) {
    s.op = Op::Binary;
    s.fn = int(uniform(r, 0, int(BinaryFn::kCount) - 1));
    s.args.push_back(pick(r, partners));  // x itself always qualifies
    if (BinaryFn(s.fn) == BinaryFn::Div && (!is_float || vals[size_t(s.args[1])].dtype() == DType::Int64))
      return false;
  } else if (kind < 50) {
    s.op = coin(r) ? Op::AddScalar : Op::MulScalar;
    s.scalar = is_float ? double(uniform(r, -8, 8)) / 4 : double(uniform(r, -3, 3));
  } else if (kind < 56) {
    s.op = Op::Where;
    // cond from args[0]; args[1] : args[2], all three broadcast together (else redrawn).
    s.args = {pick(r, partners), a, pick(r, partners)};
    s.scalar = is_float ? 0.1234 : 0.5;
  } else if (kind < 61) {
    if (nd < 2) return false;
    s.op = Op::Transpose;
    s.dim = uniform(r, 0, nd - 1);
    s.dim2 = uniform(r, 0, nd - 1);
  } else if (kind < 65) {
    if (nd < 2) return false;
    s.op = Op::Permute;
    for (int64_t i = 0; i < nd; ++i) s.shape.push_back(i);
    std::shuffle(s.shape.begin(), s.shape.end(), r);
  } else if (kind < 70) {
    s.op = Op::Reshape;
    int64_t numel = x.numel();
    // Split numel into up to 3 factors, sometimes with -1.
    std::vector<int64_t> f;
    int64_t rest = numel;
    int64_t dims = uniform(r, 1, 3);
    for (int64_t i = 0; i + 1 < dims && rest > 0; ++i) {
      std::vector<int64_t> divs;
      for (int64_t d = 1; d <= rest; ++d)
        if (rest % d == 0) divs.push_back(d);
      int64_t d = pick(r, divs);
      f.push_back(d);
      rest /= d;
    }
    f.push_back(rest);
    if (coin(r, 0.3)) f[size_t(uniform(r, 0, int64_t(f.size()) - 1))] = -1;
    s.shape = f;
  } else if (kind < 74) {
    if (nd >= 4) return false;
    s.op = Op::Unsqueeze;
    s.dim = uniform(r, 0, nd);
  } else if (kind < 79) {
    if (nd < 1) return false;
    s.op = Op::Slice;
    s.dim = uniform(r, 0, nd - 1);
    int64_t size = x.sizes()[size_t(s.dim)];
    if (size < 2) return false;
    s.start = uniform(r, 0, size - 1);
    s.end = uniform(r, s.start + 1, size);
    s.step = uniform(r, 1, 2);
  } else if (kind < 84) {
    if (nd >= 4) return false;
    s.op = Op::Expand;
    s.shape = x.sizes();
    for (auto& d : s.shape)
      if (d == 1 && coin(r)) d = uniform(r, 2, 4);
    if (s.shape.size() < 3 && coin(r, 0.3)) s.shape.insert(s.shape.begin(), uniform(r, 1, 3));
    if (s.shape == x.sizes()) return false;
  } else if (kind < 88) {
    s.op = Op::Cast;
    // Integers may become floats; floats never become integers (rounding near an integer
    // boundary would turn a tolerated difference into an exact mismatch).
    s.dtype = is_float ? (x.dtype() == DType::Float32 ? DType::Float64 : DType::Float32)
                       : (coin(r) ? DType::Float32 : DType::Float64);
  } else if (kind < 96) {
    if (nd < 1) return false;
    int which = int(uniform(r, 0, 2));
    s.op = which == 0 ? Op::Sum : which == 1 ? Op::Mean : Op::Amax;
    if (s.op == Op::Mean && !is_float) return false;
    s.dim = uniform(r, 0, nd - 1);
    s.keepdim = coin(r);
    if (s.op != Op::Amax && nd >= 2 && coin(r, 0.25))  // every dim but the last (a bias grad)
      for (int64_t d = 0; d + 1 < nd; ++d) s.shape.push_back(d);
  } else if (kind < 100) {
    if (nd < 1 || !is_float) return false;
    s.op = Op::Softmax;
    s.dim = uniform(r, 0, nd - 1);
    s.flag = coin(r, 0.3);  // log_softmax
  } else if (kind < 105) {
    if (nd < 1) return false;
    s.op = Op::Narrow;
    s.dim = uniform(r, 0, nd - 1);
    const int64_t size = x.sizes()[size_t(s.dim)];
    if (coin(r, 0.6)) {  // the whole dim: a view that changes nothing, whose grad is the grad
      s.start = 0;
      s.end = size;
    } else {
      s.start = uniform(r, 0, size - 1);
      s.end = uniform(r, s.start + 1, size);
    }
  } else if (kind < 110) {
    if (nd < 1 || !is_float) return false;
    s = product(r, vals, a);
  } else if (kind < 113) {
    if (nd < 1 || !is_float) return false;
    s.op = Op::LayerNorm;
    s.scalar = kLayerNormEps;
    // A weight (and a bias) when some value fits: [n] of x's dtype.
    std::vector<int> params;
    for (int b = 0; b < n; ++b)
      if (vals[size_t(b)].sizes() == Shape{x.size(-1)} && vals[size_t(b)].dtype() == x.dtype())
        params.push_back(b);
    if (!params.empty() && coin(r, 0.7)) {
      s.args.push_back(pick(r, params));
      if (coin(r)) s.args.push_back(pick(r, params));
    }
  } else if (kind >= 120) {
    if (nd < 1 || !is_float) return false;
    s.op = Op::Composite;
    s.fn = int(uniform(r, 0, 2));
    s.dim = s.fn == 0 ? nd - 1 : uniform(r, 0, nd - 1);
    s.start = s.fn == 2 ? uniform(r, -3, 3) : 0;
    s.scalar = kLayerNormEps;
  } else {
    if (nd < 1) return false;
    s.op = Op::ReduceBroadcast;
    s.fn = int(uniform(r, 0, 2));
    if (s.fn == 1 && !is_float) return false;
    s.dim = uniform(r, 0, nd - 1);
    s.keepdim = coin(r);
    s.fn2 = int(pick(r, std::vector<BinaryFn>{BinaryFn::Add, BinaryFn::Sub, BinaryFn::Mul}));
    s.flag = coin(r);
  }
  return true;
}

Shape random_shape(Rng& r, const Shape& base) {
  // A suffix of the base shape, some dims replaced by 1 so inputs broadcast against each other.
  int64_t nd = uniform(r, 0, int64_t(base.size()));
  Shape s(base.end() - nd, base.end());
  for (auto& d : s)
    if (coin(r, 0.3)) d = 1;
  return s;
}

// Whether some step of p can carry a gradient to an input (training programs need one).
bool has_grads(const Program& p) {
  std::vector<Tensor> in;
  for (const InputSpec& i : p.inputs)
    in.push_back(zeros(i.shape, i.dtype).requires_grad_(is_floating(i.dtype)));
  for (const Tensor& o : run_program(p, in))
    if (is_floating(o.dtype()) && o.requires_grad()) return true;
  return false;
}

}  // namespace

Program generate_program(uint64_t seed) {
  Rng r(seed);
  Program p;
  p.seed = seed;
  Shape base;
  // One program in twelve is big enough for the multi-threaded paths (kParallelGrain).
  bool big = coin(r, 1.0 / 12);
  for (int i = 0; i < 3; ++i) base.push_back(big ? uniform(r, 16, 48) : uniform(r, 1, 7));
  // Square trailing dims (sometimes all three), so a reduction without keepdim broadcasts
  // against its input: x - x.sum(d) on [n, n].
  if (coin(r, 0.3)) {
    base[1] = base[2];
    if (coin(r)) base[0] = base[2];
  }
  int64_t ninputs = uniform(r, 1, 3);
  for (int64_t i = 0; i < ninputs; ++i) {
    InputSpec in;
    in.shape = big && i == 0 ? base : random_shape(r, base);
    int d = int(uniform(r, 0, 9));
    in.dtype = d < 5 ? DType::Float32 : d < 8 ? DType::Float64 : DType::Int64;
    in.strided = !in.shape.empty() && coin(r, 0.2);
    p.inputs.push_back(in);
  }
  // A weight for matmuls, [k, m] with k the base's last dim (often m = k: products of the
  // inputs' shape), its range such that a product stays near its operand's size.
  if (coin(r, 0.3)) {
    InputSpec w;
    const int64_t k = base.back();
    w.shape = {k, coin(r, 0.6) ? k : (big ? uniform(r, 16, 48) : uniform(r, 1, 7))};
    w.dtype = coin(r, 0.7) ? DType::Float32 : DType::Float64;
    w.range = 0.5 / double(k);
    p.inputs.push_back(w);
  }
  // Probe values: zeros of the right metadata, so each drawn step is checked against ember's
  // own shape and dtype rules (a step ember rejects is drawn again).
  std::vector<Tensor> vals;
  std::vector<double> bounds;
  for (const InputSpec& in : p.inputs) {
    vals.push_back(zeros(in.shape, in.dtype));
    bounds.push_back(2 * in.range);
  }
  constexpr size_t kMaxSteps = 10;
  const size_t nsteps = size_t(uniform(r, 3, int64_t(kMaxSteps)));
  for (int tries = 0; p.steps.size() < nsteps && tries < 400; ++tries) {
    // A pattern of a few steps now and then (matmuls with row ops), else one step.
    std::vector<Step> steps;
    if (coin(r, 0.12)) {
      steps = draw_pattern(r, vals);
    } else {
      Step s;
      if (draw_step(r, vals, s)) steps.push_back(s);
    }
    if (steps.empty() || p.steps.size() + steps.size() > kMaxSteps) continue;
    const size_t before = vals.size();
    bool ok = true;
    for (Step& s : steps) {
      if (s.dim < 0) s.dim += std::max<int64_t>(vals[size_t(s.args[0])].dim(), 1);  // the last
      Tensor y;
      try {
        y = apply_step(s, vals);
      } catch (const Error&) {
        ok = false;
        break;
      }
      s.bound = result_bound(s, bounds, vals[size_t(s.args[0])]);
      if (y.numel() == 0 || y.numel() > (big ? 200000 : 512) || s.bound > kMaxBound) {
        ok = false;
        break;
      }
      vals.push_back(y);
      bounds.push_back(s.bound);
    }
    if (!ok) {
      vals.resize(before);
      bounds.resize(before);
      continue;
    }
    p.steps.insert(p.steps.end(), steps.begin(), steps.end());
  }
  // Outputs: the last value and every value nothing else reads (so chains can fuse).
  std::set<int> used;
  for (const Step& s : p.steps) used.insert(s.args.begin(), s.args.end());
  int nvals = int(vals.size());
  for (int v = int(p.inputs.size()); v < nvals; ++v)
    if (!used.count(v) || v == nvals - 1) p.outputs.push_back(v);
  // One program in four trains: grads of a loss over its outputs.
  p.backward = coin(r, 0.25) && !p.steps.empty() && has_grads(p);
  return p;
}

std::string to_string(const Program& p) {
  std::ostringstream os;
  size_t ni = p.inputs.size();
  auto name = [&](int v) {
    std::string s(size_t(v) < ni ? "x" : "v");
    s += std::to_string(size_t(v) < ni ? v : v - int(ni));
    return s;
  };
  os << "// program seed " << p.seed << "\n";
  for (size_t i = 0; i < ni; ++i)
    os << "Tensor x" << i << " = " << (p.inputs[i].strided ? "strided_input(" : "input(")
       << shape_cpp(p.inputs[i].shape) << ", " << dtype_cpp(p.inputs[i].dtype)
       << (p.inputs[i].range != 2 ? ", range " + num(p.inputs[i].range) : std::string()) << ");\n";
  for (size_t i = 0; i < p.steps.size(); ++i) {
    const Step& s = p.steps[i];
    std::string x = name(s.args[0]), e;
    switch (s.op) {
      case Op::Unary:
        switch (UnaryFn(s.fn)) {
          case UnaryFn::Exp: e = x + ".clamp(-4.0, 4.0).exp()"; break;
          case UnaryFn::Log: e = "(" + x + ".abs() + 0.5).log()"; break;
          case UnaryFn::Sqrt: e = "(" + x + ".abs() + 0.5).sqrt()"; break;
          default: e = x + "." + unary_name(UnaryFn(s.fn)) + "()";
        }
        break;
      case Op::Binary:
        e = BinaryFn(s.fn) == BinaryFn::Div ? x + ".div(" + name(s.args[1]) + ".abs() + 0.5)"
                                            : x + "." + binary_name(BinaryFn(s.fn)) + "(" + name(s.args[1]) + ")";
        break;
      case Op::AddScalar: e = x + " + " + num(s.scalar); break;
      case Op::MulScalar: e = x + " * " + num(s.scalar); break;
      case Op::Where:
        e = name(s.args[1]) + ".where(" + x + ".gt(" + num(s.scalar) + "), " + name(s.args[2]) + ")";
        break;
      case Op::Transpose: e = x + ".transpose(" + std::to_string(s.dim) + ", " + std::to_string(s.dim2) + ")"; break;
      case Op::Permute: e = x + ".permute(" + shape_cpp(s.shape) + ")"; break;
      case Op::Reshape: e = x + ".reshape(" + shape_cpp(s.shape) + ")"; break;
      case Op::Unsqueeze: e = x + ".unsqueeze(" + std::to_string(s.dim) + ")"; break;
      case Op::Slice:
        e = x + ".slice(" + std::to_string(s.dim) + ", " + std::to_string(s.start) + ", " +
            std::to_string(s.end) + ", " + std::to_string(s.step) + ")";
        break;
      case Op::Expand: e = x + ".expand(" + shape_cpp(s.shape) + ")"; break;
      case Op::Cast: e = x + ".to(" + dtype_cpp(s.dtype) + ")"; break;
      case Op::Sum:
      case Op::Mean:
      case Op::Amax:
        e = x +
            (s.op == Op::Sum    ? ".sum("
             : s.op == Op::Mean ? ".mean("
                                : ".amax(") +
            (s.shape.empty() ? "{" + std::to_string(s.dim) + "}" : shape_cpp(s.shape)) + ", " +
            (s.keepdim ? "true" : "false") + ")";
        break;
      case Op::Softmax:
        e = x + (s.flag ? ".log_softmax(" : ".softmax(") + std::to_string(s.dim) + ")";
        break;
      case Op::Narrow:
        e = x + ".narrow(" + std::to_string(s.dim) + ", " + std::to_string(s.start) + ", " +
            std::to_string(s.end - s.start) + ")";
        break;
      case Op::Matmul:
        e = x + ".matmul(" + name(s.args[1]) + (s.flag ? ".transpose(-2, -1))" : ")");
        break;
      case Op::LayerNorm:
        e = "layer_norm(" + x + ", {" + x + ".size(-1)}, " +
            (s.args.size() > 1 ? name(s.args[1]) : "{}") + ", " +
            (s.args.size() > 2 ? name(s.args[2]) : "{}") + ", " + num(s.scalar) + ")";
        break;
      case Op::Composite:
        e = s.fn == 0   ? "rms_norm(" + x + ", {" + x + ".size(-1)}, {}, " + num(s.scalar) + ")"
            : s.fn == 1 ? "cumsum(" + x + ", " + std::to_string(s.dim) + ")"
                        : "roll(" + x + ", {" + std::to_string(s.start) + "}, {" +
                              std::to_string(s.dim) + "})";
        break;
      case Op::ReduceBroadcast: {
        const char* red[] = {".sum({", ".mean({", ".amax({"};
        const std::string r =
            x + red[s.fn] + std::to_string(s.dim) + "}, " + (s.keepdim ? "true" : "false") + ")";
        e = (s.flag ? r : x) + "." + binary_name(BinaryFn(s.fn2)) + "(" + (s.flag ? x : r) + ")";
        break;
      }
      case Op::kCount:
        break;
    }
    os << "Tensor v" << i << " = " << e << ";\n";
  }
  os << "return {";
  for (size_t i = 0; i < p.outputs.size(); ++i) os << (i ? ", " : "") << name(p.outputs[i]);
  os << "};\n";
  if (p.backward)
    os << "// training: the loss sum((out * w).sum()) over the float outputs, random weights w,\n"
       << "// and its grads w.r.t. the float inputs\n";
  return os.str();
}

namespace {

// Keeps only the steps and inputs the outputs depend on, renumbering values.
Program dead_code_eliminate(const Program& p) {
  int ni = int(p.inputs.size()), nv = ni + int(p.steps.size());
  std::vector<bool> live(size_t(nv), false);
  for (int o : p.outputs) live[size_t(o)] = true;
  for (int v = nv - 1; v >= ni; --v)
    if (live[size_t(v)])
      for (int a : p.steps[size_t(v - ni)].args) live[size_t(a)] = true;
  Program q;
  q.seed = p.seed;
  q.backward = p.backward;
  std::vector<int> map(size_t(nv), -1);
  int next = 0;
  for (int v = 0; v < ni; ++v)
    if (live[size_t(v)]) {
      map[size_t(v)] = next++;
      q.inputs.push_back(p.inputs[size_t(v)]);
    }
  for (int v = ni; v < nv; ++v)
    if (live[size_t(v)]) {
      map[size_t(v)] = next++;
      Step s = p.steps[size_t(v - ni)];
      for (int& a : s.args) a = map[size_t(a)];
      q.steps.push_back(s);
    }
  for (int o : p.outputs) q.outputs.push_back(map[size_t(o)]);
  return q;
}

// Replaces every use of value `v` (a step's result) by value `by`, then drops the dead step.
Program substitute(const Program& p, int v, int by) {
  Program q = p;
  for (Step& s : q.steps)
    for (int& a : s.args)
      if (a == v) a = by;
  for (int& o : q.outputs)
    if (o == v) o = by;
  return dead_code_eliminate(q);
}

}  // namespace

Program shrink(Program p, const std::function<bool(const Program&)>& fails) {
  p = dead_code_eliminate(p);
  if (p.backward) {  // a forward that fails alone is the smaller program
    Program q = p;
    q.backward = false;
    if (fails(q)) p = q;
  }
  // One output at a time.
  if (p.outputs.size() > 1)
    for (int o : p.outputs) {
      Program q = p;
      q.outputs = {o};
      q = dead_code_eliminate(q);
      if (fails(q)) {
        p = q;
        break;
      }
    }
  // Bypass steps: a step whose operand has the same shape and dtype as its result can be
  // replaced by that operand. Repeat until nothing more can go.
  for (bool progress = true; progress;) {
    progress = false;
    std::vector<Tensor> probe;
    for (const InputSpec& in : p.inputs) probe.push_back(zeros(in.shape, in.dtype));
    std::vector<Tensor> vals = run_all(p, probe);
    int ni = int(p.inputs.size());
    for (int i = int(p.steps.size()) - 1; i >= 0 && !progress; --i) {
      const Tensor& y = vals[size_t(ni + i)];
      for (int a : p.steps[size_t(i)].args) {
        const Tensor& x = vals[size_t(a)];
        if (a == ni + i || x.sizes() != y.sizes() || x.dtype() != y.dtype()) continue;
        Program q = substitute(p, ni + i, a);
        if (q.steps.empty() || q.outputs.empty()) continue;
        if (fails(q)) {
          p = q;
          progress = true;
          break;
        }
      }
    }
  }
  return p;
}

}  // namespace ember::testgen
