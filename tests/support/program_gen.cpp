// Random program generator for the compile backends: generation by probing real ops on small
// tensors (so shapes and dtypes come from ember itself), at every call's sizes where they vary.
#include "support/program_gen.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "ember/error.h"
#include "support/program_layers.h"
#include "support/program_rng.h"

namespace ember::testgen {
namespace {

// Beyond this, float32 rounding of intermediates would dominate the tolerances.
constexpr double kMaxBound = 1e3;

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

// Whether every element of y is finite (a max pool whose window holds only padding gives -inf).
bool finite(const Tensor& y) {
  if (!is_floating(y.dtype())) return true;
  for (double v : y.to_vector<double>())
    if (!std::isfinite(v)) return false;
  return true;
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

// The values computed so far at each call of a program's schedule (one call for a program of
// fixed sizes). Steps are drawn at call 0 and must apply at every call.
struct Probes {
  std::vector<std::vector<Tensor>> calls;
  const std::vector<Tensor>& base() const { return calls.front(); }
  // Whether dim d of value v has other sizes at other calls.
  bool varies(int v, int64_t d) const {
    for (const auto& c : calls)
      if (c[size_t(v)].size(d) != base()[size_t(v)].size(d)) return true;
    return false;
  }
  bool varies(int v) const {
    for (int64_t d = 0; d < base()[size_t(v)].dim(); ++d)
      if (varies(v, d)) return true;
    return false;
  }
  int64_t min_size(int v, int64_t d) const {
    int64_t m = base()[size_t(v)].size(d);
    for (const auto& c : calls) m = std::min(m, c[size_t(v)].size(d));
    return m;
  }
};

// A reshape of value a (some of whose dims vary) that holds at every size: the varying dims
// are copied from the operand, or one run of adjacent dims is flattened (into -1 when it holds
// a varying dim); fixed dims are kept or split in two, and a 1 may be inserted.
Step symbolic_reshape(Rng& r, const Probes& pr, int a) {
  const Tensor& x = pr.base()[size_t(a)];
  const int64_t nd = x.dim();
  Step s;
  s.op = Op::Reshape;
  s.args = {a};
  int64_t lo = -1, hi = -1;
  if (nd >= 2 && coin(r)) {
    lo = uniform(r, 0, nd - 2);
    hi = uniform(r, lo + 1, nd - 1);
  }
  auto add = [&](int64_t size, int copy) {
    s.shape.push_back(size);
    s.copy.push_back(copy);
  };
  for (int64_t d = 0; d < nd; ++d) {
    if (d == lo) {
      bool varying = false;
      int64_t product = 1;
      for (int64_t e = lo; e <= hi; ++e) {
        varying |= pr.varies(a, e);
        product *= x.size(e);
      }
      add(varying ? -1 : product, -1);
      d = hi;
    } else if (pr.varies(a, d)) {
      add(x.size(d), int(d));
    } else {
      const int64_t n = x.size(d);
      std::vector<int64_t> divs;
      for (int64_t k = 2; k < n; ++k)
        if (n % k == 0) divs.push_back(k);
      if (!divs.empty() && coin(r, 0.4)) {
        const int64_t k = pick(r, divs);
        add(k, -1);
        add(n / k, -1);
      } else {
        add(n, -1);
      }
    }
  }
  if (s.shape.size() < 4 && coin(r, 0.2)) {
    const auto at = long(uniform(r, 0, int64_t(s.shape.size())));
    s.shape.insert(s.shape.begin() + at, 1);
    s.copy.insert(s.copy.begin() + at, -1);
  }
  return s;
}

// Picks a random step that applies to the current values; returns false when the draw does
// not fit (the caller draws again). Where a dim varies over the calls, attrs that depend on
// its size follow it (Slice, Narrow, Expand, Reshape). A layer program (`layers`) draws a
// layer step a third of the time.
bool draw_step(Rng& r, const Probes& pr, Step& s, bool layers) {
  const std::vector<Tensor>& vals = pr.base();
  if (layers && coin(r, 1.0 / 3)) return draw_layer_step(r, vals, s);
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
    if (pr.varies(a)) {
      s = symbolic_reshape(r, pr, a);
      return true;
    }
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
    if (pr.varies(a, s.dim)) {  // a start below every size, an end counted from the end
      // Step 1: a step of 2 would make the size (n - start - end + 1) / 2, which shared code
      // over symbolic sizes does not follow (it fits polynomials).
      const int64_t least = pr.min_size(a, s.dim);
      s.from_end = true;
      s.start = uniform(r, 0, least - 1);
      s.end = uniform(r, 0, least - 1 - s.start);
      return true;
    }
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
    const size_t lead = s.shape.size() - size_t(nd);
    for (int64_t d = 0; d < nd; ++d)  // a varying dim kept: -1, whatever its size
      if (pr.varies(a, d) && s.shape[lead + size_t(d)] == x.size(d)) s.shape[lead + size_t(d)] = -1;
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
    if (pr.varies(a, s.dim)) {  // as a Slice of a varying dim
      const int64_t least = pr.min_size(a, s.dim);
      s.from_end = true;
      if (coin(r, 0.4)) {
        s.start = uniform(r, 0, least - 1);
        s.end = uniform(r, 0, least - 1 - s.start);
      }
      return true;
    }
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

// An input's shape: a suffix of the base shape, some dims replaced by 1 so inputs broadcast
// against each other. `sym` gets the size symbol of each dim (the base dim's, -1 for a 1).
Shape random_shape(Rng& r, const Shape& base, const std::vector<int>& base_sym,
                   std::vector<int>& sym) {
  int64_t nd = uniform(r, 0, int64_t(base.size()));
  Shape s(base.end() - nd, base.end());
  sym.assign(base_sym.end() - nd, base_sym.end());
  for (size_t d = 0; d < s.size(); ++d)
    if (coin(r, 0.3)) {
      s[d] = 1;
      sym[d] = -1;
    }
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

// A program of fixed sizes (`sizes` null), or one whose inputs carry the symbols of `sizes`.
// A fixed program draws exactly what it drew before symbols existed, so seeds keep naming the
// same programs; so do seeds below kLayerSeeds, which draw no layer steps.
Program generate(uint64_t seed, const SizeSchedule* sizes) {
  Rng r(seed);
  Program p;
  p.seed = seed;
  const bool layers = !sizes && seed >= kLayerSeeds;
  Shape base;
  bool big = false;
  int group[3] = {0, 1, 2};  // base dims that are equal by construction share a group
  if (layers) {
    base = layer_base(r);  // the image input's shape
  } else {
    // One program in twelve is big enough for the multi-threaded paths (kParallelGrain).
    big = coin(r, 1.0 / 12);
    for (int i = 0; i < 3; ++i) base.push_back(big ? uniform(r, 16, 48) : uniform(r, 1, 7));
    // Square trailing dims (sometimes all three), so a reduction without keepdim broadcasts
    // against its input: x - x.sum(d) on [n, n].
    if (coin(r, 0.3)) {
      base[1] = base[2];
      group[1] = 2;
      if (coin(r)) {
        base[0] = base[2];
        group[0] = 2;
      }
    }
  }
  // Symbols: symbol 0 on one base dim, in half the programs symbol 1 (where the schedule has
  // one) on another; every dim of its group takes it, so squares stay square.
  std::vector<int> base_sym(base.size(), -1);
  if (sizes) {
    p.sizes = *sizes;
    const int nsym = sizes->front().size() > 1 && coin(r) ? 2 : 1;
    std::vector<int64_t> order = {0, 1, 2};
    std::shuffle(order.begin(), order.end(), r);
    for (int k = 0; k < nsym; ++k) {
      const int g = group[order[size_t(k)]];
      if (base_sym[size_t(g)] >= 0) continue;  // the group already has symbol 0
      for (size_t d = 0; d < 3; ++d)
        if (group[d] == g) {
          base_sym[d] = k;
          base[d] = sizes->front()[size_t(k)];
        }
    }
  }
  int64_t ninputs = uniform(r, 1, 3);
  for (int64_t i = 0; i < ninputs; ++i) {
    InputSpec in;
    std::vector<int> sym = base_sym;
    in.shape = (big || layers) && i == 0 ? base : random_shape(r, base, base_sym, sym);
    if (sizes) in.sym = sym;
    int d = int(uniform(r, 0, 9));
    in.dtype = d < 5 ? DType::Float32 : d < 8 ? DType::Float64 : DType::Int64;
    if (layers && i == 0 && in.dtype == DType::Int64) in.dtype = DType::Float32;  // an image
    in.strided = !in.shape.empty() && coin(r, 0.2);
    p.inputs.push_back(in);
  }
  // A weight for matmuls, [k, m] with k the base's last dim (often m = k: products of the
  // inputs' shape), its range such that a product stays near its operand's size.
  if (coin(r, 0.3)) {
    InputSpec w;
    const int64_t k = base.back();
    const bool square = coin(r, 0.6);
    w.shape = {k, square ? k : (big ? uniform(r, 16, 48) : uniform(r, 1, 7))};
    w.dtype = coin(r, 0.7) ? DType::Float32 : DType::Float64;
    int64_t kmax = k;  // a varying k: the range for the largest
    if (sizes) {
      w.sym = {base_sym.back(), square ? base_sym.back() : -1};
      if (base_sym.back() >= 0)
        for (const auto& row : *sizes) kmax = std::max(kmax, row[size_t(base_sym.back())]);
    }
    w.range = 0.5 / double(kmax);
    p.inputs.push_back(w);
  }
  if (layers) {
    add_layer_inputs(r, p, base, p.inputs.front().dtype);
    // The image last: the first steps draw on recent values.
    std::rotate(p.inputs.begin(), p.inputs.begin() + 1, p.inputs.end());
  }
  // Probe values: zeros of the right metadata, so each drawn step is checked against ember's
  // own shape and dtype rules (a step ember rejects is drawn again), at every call's sizes.
  Probes pr;
  pr.calls.resize(sizes ? sizes->size() : 1);
  std::vector<double> bounds;
  for (size_t i = 0; i < p.inputs.size(); ++i) {
    for (size_t c = 0; c < pr.calls.size(); ++c)
      pr.calls[c].push_back(zeros(input_shape(p, i, c), p.inputs[i].dtype));
    bounds.push_back(2 * p.inputs[i].range);
  }
  // Values past this many elements are too slow for a test of many programs.
  const int64_t max_numel = big ? 200000 : sizes ? 2048 : layers ? 1024 : 512;
  constexpr size_t kMaxSteps = 10;
  // Programs called at many sizes build several libraries each: shorter ones keep that quick.
  const size_t nsteps = size_t(uniform(r, 3, sizes ? 7 : int64_t(kMaxSteps)));
  for (int tries = 0; p.steps.size() < nsteps && tries < 400; ++tries) {
    // A pattern of a few steps now and then (matmuls with row ops), else one step.
    std::vector<Step> steps;
    if (coin(r, 0.12)) {
      steps = draw_pattern(r, pr.base());
    } else {
      Step s;
      if (draw_step(r, pr, s, layers)) steps.push_back(s);
    }
    if (steps.empty() || p.steps.size() + steps.size() > kMaxSteps) continue;
    const size_t before = pr.base().size();
    bool ok = true;
    for (Step& s : steps) {
      if (s.dim < 0) s.dim += std::max<int64_t>(pr.base()[size_t(s.args[0])].dim(), 1);  // the last
      std::vector<Tensor> ys;
      s.bound = 0;
      for (const std::vector<Tensor>& vals : pr.calls) {
        Tensor y;
        try {
          y = apply_step(s, vals);
        } catch (const Error&) {
          ok = false;
          break;
        }
        s.bound = std::max(s.bound, s.op == Op::Layer
                                        ? layer_bound(s, bounds, vals)
                                        : result_bound(s, bounds, vals[size_t(s.args[0])]));
        if (y.numel() == 0 || y.numel() > max_numel || s.bound > kMaxBound ||
            (s.op == Op::Layer && !finite(y))) {
          ok = false;
          break;
        }
        ys.push_back(y);
      }
      if (!ok) break;
      for (size_t c = 0; c < pr.calls.size(); ++c) pr.calls[c].push_back(ys[c]);
      bounds.push_back(s.bound);
    }
    if (!ok) {
      for (auto& vals : pr.calls) vals.resize(before);
      bounds.resize(before);
      continue;
    }
    p.steps.insert(p.steps.end(), steps.begin(), steps.end());
  }
  // Outputs: the last value and every value nothing else reads (so chains can fuse).
  std::set<int> used;
  for (const Step& s : p.steps) used.insert(s.args.begin(), s.args.end());
  int nvals = int(pr.base().size());
  for (int v = int(p.inputs.size()); v < nvals; ++v)
    if (!used.count(v) || v == nvals - 1) p.outputs.push_back(v);
  // One program in four trains: grads of a loss over its outputs.
  p.backward = coin(r, 0.25) && !p.steps.empty() && has_grads(p);
  return p;
}

}  // namespace

Program generate_program(uint64_t seed) { return generate(seed, nullptr); }

Program generate_symbolic_program(uint64_t seed, const SizeSchedule& sizes) {
  // Drawn again (from other seeds of the generator) until some output's size varies: a
  // program whose varying dims are all dropped along the way checks nothing new.
  for (uint64_t attempt = 0;; ++attempt) {
    Program p = generate(seed + attempt * 0x9E3779B97F4A7C15ull, &sizes);
    p.seed = seed;
    std::vector<Shape> first;
    bool varies = false;
    for (size_t c = 0; c < sizes.size() && !varies; ++c) {
      std::vector<Tensor> probe;
      for (size_t i = 0; i < p.inputs.size(); ++i)
        probe.push_back(zeros(input_shape(p, i, c), p.inputs[i].dtype));
      std::vector<Tensor> outs = run_program(p, probe);
      for (size_t o = 0; o < outs.size(); ++o) {
        if (c == 0) first.push_back(outs[o].sizes());
        varies |= outs[o].sizes() != first[o];
      }
    }
    if (varies || attempt >= 50) return p;
  }
}

SizeSchedule size_schedule(uint64_t seed) {
  Rng r(seed * 0x2545F4914F6CDD1Dull + 3);
  constexpr size_t kCalls = 6;
  std::vector<int64_t> pool;
  for (int64_t v = 2; v <= 12; ++v) pool.push_back(v);
  std::shuffle(pool.begin(), pool.end(), r);
  // Symbol 0: a new size at every call; 1 at a later call in half the schedules, so graphs
  // of another form (dims of 1 broadcast) come between graphs of one form.
  std::vector<int64_t> s0(pool.begin(), pool.begin() + long(kCalls));
  if (coin(r)) s0[size_t(uniform(r, 2, int64_t(kCalls) - 1))] = 1;
  // Symbol 1 in half of them: one size for the first half of the calls, another (sometimes 1)
  // for the rest; two symbols that both change at every call would need more samples than
  // calls to fit.
  const bool two = coin(r);
  const int64_t b0 = pool[kCalls], b1 = coin(r, 0.25) ? 1 : pool[kCalls + 1];
  SizeSchedule out;
  for (size_t c = 0; c < kCalls; ++c) {
    out.push_back({s0[c]});
    if (two) out.back().push_back(c < kCalls / 2 ? b0 : b1);
  }
  return out;
}

}  // namespace ember::testgen
