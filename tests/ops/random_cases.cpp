// Op cases: random ops. The references recompute every element from the Philox stream
// (core/philox.h, itself checked against the published known-answer vectors in
// random_test.cpp) following the layout documented in ops/defs/factory.def, with plain
// per-element loops that share nothing with the kernels' block loops.
#include <algorithm>
#include <numeric>

#include "core/generator.h"
#include "core/make_tensor.h"
#include "core/philox.h"
#include "dispatch/dispatcher.h"
#include "support/op_cases.h"

namespace ember::test {

namespace {

constexpr uint64_t kSeed = 0x5eed1234abcdull;
const std::vector<Shapes> kShapes = {{{}}, {{7}}, {{3, 5}}, {{0, 3}}, {{2, 3, 4}}, {{1001}}};
const std::vector<DType> kFloatTypes = {DType::Float32, DType::Float64, DType::Float16,
                                        DType::BFloat16};

// Draw d of the stream of kSeed, seeded afresh (offset 0).
uint32_t word(uint64_t d) {
  return philox::draw(kSeed, d);
}

// A tensor whose only job is to carry the shape and dtype of the result into `run`.
Inputs shape_carrier(const Shapes& s, DType t) {
  return Inputs{zeros(s[0], t)};
}

double uniform_ref(int64_t i, DType t) {
  if (t == DType::Float64) {
    uint64_t m = (uint64_t(word(2 * i)) << 21) | (word(2 * i + 1) >> 11);
    return std::ldexp(double(m), -53);
  }
  int bits = t == DType::Float16 ? 11 : t == DType::BFloat16 ? 8 : 24;
  return std::ldexp(double(word(i) >> (32 - bits)), -bits);
}

double normal_ref(int64_t i, DType t) {
  int64_t pair = i / 2;
  double radius, angle;
  if (t == DType::Float64) {
    uint64_t a = (uint64_t(word(4 * pair)) << 21) | (word(4 * pair + 1) >> 11);
    uint64_t b = (uint64_t(word(4 * pair + 2)) << 21) | (word(4 * pair + 3) >> 11);
    radius = std::ldexp(double(a + 1), -53);
    angle = std::ldexp(double(b), -53);
  } else {
    radius = std::ldexp(double((word(2 * pair) >> 8) + 1), -24);
    angle = std::ldexp(double(word(2 * pair + 1) >> 8), -24);
  }
  double r = std::sqrt(-2 * std::log(radius)), theta = 2 * M_PI * angle;
  return i % 2 == 0 ? r * std::cos(theta) : r * std::sin(theta);
}

Ref generate(const Shape& s, const std::function<double(int64_t)>& f) {
  Ref out(s, 0.0);
  for (int64_t i = 0; i < out.numel(); ++i) out.v[i] = f(i);
  return out;
}

OpCase distribution_case(const std::string& name, OpId op, DType t,
                         std::function<Tensor(const Shape&, DType)> draw,
                         std::function<double(int64_t)> ref) {
  OpCase c;
  c.name = name + "_" + std::string(dtype_name(t));
  c.covers = {op};
  c.shapes = kShapes;
  c.dtypes = {t};
  c.make_inputs = shape_carrier;
  c.run = [draw](const Inputs& in) {
    manual_seed(kSeed);
    return Inputs{draw(in[0].sizes(), in[0].dtype())};
  };
  c.reference = [ref](const std::vector<Ref>& r) {
    return std::vector<Ref>{generate(r[0].shape, ref)};
  };
  return c;
}

// Multinomial with replacement: a linear scan of the running sum for each sample; without:
// every key computed, then a full sort.
Ref multinomial_ref(const Ref& w, int64_t samples, bool replacement) {
  replacement = replacement || samples == 1;  // one sample: the same distribution
  const int64_t cols = w.shape.back(), rows = w.dim() == 1 ? 1 : w.shape[0];
  const int64_t per_row = (2 * (replacement ? samples : cols) + 3) / 4 * 4;
  Shape out_shape = w.dim() == 1 ? Shape{samples} : Shape{rows, samples};
  Ref out(out_shape, 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    auto u53 = [&](int64_t k, bool open0) {
      uint64_t d = uint64_t(r * per_row + 2 * k);
      uint64_t m = (uint64_t(word(d)) << 21) | (word(d + 1) >> 11);
      return std::ldexp(double(m + (open0 ? 1 : 0)), -53);
    };
    const double* row = &w.v[size_t(r * cols)];
    if (replacement) {
      double total = 0;
      for (int64_t c = 0; c < cols; ++c) total += row[c];
      for (int64_t j = 0; j < samples; ++j) {
        double target = u53(j, false) * total, run = 0;
        int64_t pick = -1;
        for (int64_t c = 0; c < cols && pick < 0; ++c) {
          run += row[c];
          if (run > target) pick = c;
        }
        out.v[size_t(r * samples + j)] = double(pick);
      }
    } else {
      std::vector<std::pair<double, int64_t>> keys;
      for (int64_t c = 0; c < cols; ++c)
        if (row[c] > 0) keys.push_back({-std::log(u53(c, true)) / row[c], c});
      std::sort(keys.begin(), keys.end());
      for (int64_t j = 0; j < samples; ++j) out.v[size_t(r * samples + j)] = double(keys[j].second);
    }
  }
  return out;
}

}  // namespace

EMBER_OP_CASES(random) {
  std::vector<OpCase> cases;
  for (DType t : kFloatTypes) {
    cases.push_back(distribution_case(
        "rand", OpId::rand, t, [](const Shape& s, DType d) { return rand(s, d); },
        [t](int64_t i) { return uniform_ref(i, t); }));
    cases.push_back(distribution_case(
        "randn", OpId::randn, t, [](const Shape& s, DType d) { return randn(s, d); },
        [t](int64_t i) { return normal_ref(i, t); }));
  }

  // randint: 64 bits per element, reduced modulo the range.
  struct IntRange {
    int64_t low, high;
    DType dtype;
  };
  for (IntRange ir : {IntRange{-5, 17, DType::Int64}, IntRange{0, 3, DType::Int32},
                      IntRange{-1000, 1000, DType::Float32}, IntRange{-7, 9, DType::Float16},
                      IntRange{INT64_MIN, INT64_MAX, DType::Int64},
                      IntRange{-(int64_t(1) << 40), int64_t(1) << 50, DType::Int64}}) {
    auto ref = [ir](int64_t i) {
      uint64_t x = (uint64_t(word(2 * i)) << 32) | word(2 * i + 1);
      uint64_t range = uint64_t(ir.high) - uint64_t(ir.low);
      return double(int64_t(uint64_t(ir.low) + x % range));
    };
    OpCase c = distribution_case(
        "randint_" + std::to_string(ir.low) + "_" + std::to_string(ir.high), OpId::randint,
        ir.dtype, [ir](const Shape& s, DType d) { return randint(ir.low, ir.high, s, d); }, ref);
    cases.push_back(c);
  }

  // bernoulli: 1 where the draw is below p * 2^32.
  for (double p : {0.37, 0.0, 1.0}) {
    for (DType t : {DType::Float32, DType::Float16, DType::Bool, DType::Int64}) {
      auto ref = [p](int64_t i) { return double(word(i)) < p * 4294967296.0 ? 1.0 : 0.0; };
      cases.push_back(distribution_case(
          "bernoulli_" + std::to_string(p), OpId::bernoulli, t,
          [p](const Shape& s, DType d) { return bernoulli(s, p, d); }, ref));
    }
  }

  // dropout: x * mask / (1 - p) with the mask of bernoulli(1 - p); the gradient is checked
  // by finite differences (each call reseeds, so every evaluation sees the same mask).
  const double p = 0.4;
  OpCase drop;
  drop.name = "dropout";
  drop.covers = {OpId::bernoulli};
  drop.shapes = {{{}}, {{9}}, {{4, 5}}, {{0, 2}}, {{3, 2, 7}}};
  drop.run = [p](const Inputs& in) {
    manual_seed(kSeed);
    return Inputs{dropout(in[0], p)};
  };
  drop.reference = [p](const std::vector<Ref>& r) {
    Ref out = r[0];
    for (int64_t i = 0; i < out.numel(); ++i) {
      bool keep = double(word(i)) < (1 - p) * 4294967296.0;
      out.v[i] = keep ? out.v[i] / (1 - p) : 0.0;
    }
    return std::vector<Ref>{out};
  };
  drop.gradcheck = true;
  drop.tol_scale = 2;  // the mask scale is rounded to the dtype before the product
  cases.push_back(drop);

  // The dropout op itself (what the front end runs on a GPU): the same mask, drawn again by
  // its grad.
  OpCase op = drop;
  op.name = "dropout_op";
  op.covers = {OpId::dropout};
  op.run = [p](const Inputs& in) {
    manual_seed(kSeed);
    Attrs a;
    a.value = p;
    const RandomRange r = reserve_random(uint64_t(in[0].numel()), "dropout");
    a.seed = r.seed;
    a.offset = r.offset;
    return Inputs{dispatch1(OpId::dropout, {in[0]}, a)};
  };
  cases.push_back(op);

  // dropout_rng: the same mask from an rng_state tensor ({kSeed, 0}, an input like any other):
  // a pure function of its inputs, so compiled programs and training compiles take it too.
  OpCase drawn = drop;
  drawn.name = "dropout_rng";
  drawn.covers = {OpId::dropout_rng};
  drawn.make_inputs = [](const Shapes& s, DType t) {
    Tensor rng = make_tensor({2}, DType::Int64, kCPU);
    static_cast<int64_t*>(rng.impl()->data())[0] = int64_t(kSeed);
    static_cast<int64_t*>(rng.impl()->data())[1] = 0;
    return Inputs{random_tensor(s[0], t), rng};
  };
  drawn.run = [p](const Inputs& in) {
    Attrs a;
    a.value = p;
    return Inputs{dispatch1(OpId::dropout_rng, {in[0], in[1]}, a)};
  };
  drawn.grad_inputs = {0};
  cases.push_back(drawn);

  // multinomial over unnormalized weights, with and without replacement; the driver also
  // passes the weights strided.
  for (bool replacement : {true, false}) {
    OpCase c;
    c.name = replacement ? "multinomial_with_replacement" : "multinomial_without_replacement";
    c.covers = {OpId::multinomial};
    c.shapes = {{{6}}, {{3, 5}}, {{0, 4}}, {{2, 40}}, {{1, 1}}, {{4, 2}}};
    c.dtypes = {DType::Float32, DType::Float64, DType::Float16};
    c.make_inputs = [](const Shapes& s, DType t) {
      Tensor w = positive_tensor(s[0], DType::Float64);
      if (w.numel() > 2) {
        // A zero weight, which must never be drawn.
        std::vector<double> v = w.to_vector<double>();
        v[1] = 0;
        w = from_vector(v, w.sizes(), DType::Float64);
      }
      return Inputs{w.to(t)};
    };
    c.run = [replacement](const Inputs& in) {
      manual_seed(kSeed);
      int64_t cols = in[0].size(-1);
      int64_t n = replacement ? 2 * cols + 1 : std::max<int64_t>(1, cols - 1 - (cols > 2));
      return Inputs{multinomial(in[0], n, replacement)};
    };
    c.reference = [replacement](const std::vector<Ref>& r) {
      int64_t cols = r[0].shape.back();
      int64_t n = replacement ? 2 * cols + 1 : std::max<int64_t>(1, cols - 1 - (cols > 2));
      return std::vector<Ref>{multinomial_ref(r[0], n, replacement)};
    };
    cases.push_back(c);
  }
  return cases;
}

}  // namespace ember::test
