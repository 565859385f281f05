// Op cases: reductions (sum, mean, amax/amin, argmax/argmin, var/std, logsumexp) over many dim
// choices, layouts (row form, column form, copied) and sizes (threaded paths, long rows), and the
// equal_mask helper of the amax/amin grads.
#include <algorithm>
#include <limits>

#include "dispatch/dispatcher.h"
#include "support/op_cases.h"

namespace ember::test {

namespace {

using RefFn = std::function<double(const std::vector<double>&)>;
using ReduceFn = std::function<Tensor(const Tensor&, const Shape&, bool)>;

const std::vector<DType> kFloats = {DType::Float32, DType::Float64, DType::Float16,
                                    DType::BFloat16};

// One dims choice and the shapes it runs on.
struct DimsCase {
  std::string tag;
  Shape dims;
  bool keepdim;
  std::vector<Shapes> shapes;
  bool gradcheck;  // small shapes only: finite differences cost two runs per element
};

// Shapes whose reductions are never empty (for ops without an identity) and the rest.
std::vector<DimsCase> dims_cases(bool allow_empty) {
  std::vector<DimsCase> c = {
      {"all", {}, false, {{{}}, {{7}}, {{3, 5}}, {{2, 3, 40}}}, true},
      {"last", {-1}, false, {{{7}}, {{3, 5}}, {{0, 3}}, {{2, 3, 40}}}, true},
      {"last_keepdim", {-1}, true, {{{3, 5}}, {{2, 1, 4}}}, true},
      {"first", {0}, false, {{{7}}, {{3, 5}}, {{3, 0}}, {{2, 3, 40}}, {{1, 4}}}, true},
      {"middle_keepdim", {1}, true, {{{2, 3, 40}}, {{3, 5}}}, true},
      {"outer_pair", {0, 2}, false, {{{2, 3, 40}}, {{4, 1, 5}}}, true},
      {"negative_pair", {-1, -2}, true, {{{2, 3, 4}}}, true},
      // Large: threaded rows, few long rows split by chunk, column form with row blocks.
      {"last_large", {-1}, false, {{{130, 300}}, {{3, 11001}}}, false},
      {"first_large", {0}, false, {{{600, 70}}, {{5000, 3}}, {{130, 300}}}, false},
      {"middle_large", {1}, false, {{{4, 600, 20}}}, false},
      {"all_large", {}, false, {{{40000}}, {{2, 9, 2000}}}, false},
  };
  if (allow_empty) {
    c.push_back({"all_empty", {}, false, {{{0, 3}}}, false});
    c.push_back({"empty_dim", {0}, true, {{{0, 3}}}, false});
    c.push_back({"empty_last", {-1}, false, {{{3, 0}}}, false});
  }
  return c;
}

void add_reduce_cases(std::vector<OpCase>& out, const std::string& name, OpId op, ReduceFn f,
                      RefFn ref, bool allow_empty, bool differentiable,
                      std::vector<DType> dtypes = kFloats,
                      std::function<Inputs(const Shapes&, DType)> make = nullptr) {
  for (const DimsCase& d : dims_cases(allow_empty)) {
    OpCase c;
    c.name = name + "_" + d.tag;
    c.covers = {op};
    c.shapes = d.shapes;
    c.dtypes = dtypes;
    c.make_inputs = make;
    Shape dims = d.dims;
    bool keep = d.keepdim;
    c.run = [f, dims, keep](const Inputs& in) { return Inputs{f(in[0], dims, keep)}; };
    c.reference = [ref, dims, keep](const std::vector<Ref>& r) {
      return std::vector<Ref>{ref_reduce(r[0], dims, keep, ref)};
    };
    c.gradcheck = differentiable && d.gradcheck;
    // Large shapes exercise the threaded paths; two dtypes (one widened) are enough there.
    // Positive values: sums of thousands of mixed-sign values cancel down to where float32's
    // rounding of the partial sums is no longer small next to the result.
    if (!d.gradcheck && dtypes == kFloats) {
      c.dtypes = {DType::Float32, DType::BFloat16};
      if (!make)
        c.make_inputs = [](const Shapes& s, DType t) { return Inputs{positive_tensor(s[0], t)}; };
    }
    out.push_back(std::move(c));
  }
  // Transposed input: the kept dim becomes the contiguous one (column form for dims {1}).
  for (int64_t dim : {0, 1}) {
    OpCase c;
    c.name = name + "_transposed_dim" + std::to_string(dim);
    c.covers = {op};
    c.shapes = {{{5, 7}}, {{300, 120}}};
    c.dtypes = dtypes;
    c.make_inputs = make;
    c.run = [f, dim](const Inputs& in) { return Inputs{f(in[0].t(), {dim}, false)}; };
    c.reference = [ref, dim](const std::vector<Ref>& r) {
      return std::vector<Ref>{ref_reduce(ref_permute(r[0], {1, 0}), {dim}, false, ref)};
    };
    out.push_back(std::move(c));
  }
}

double ref_sum(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return s;
}
double ref_mean(const std::vector<double>& v) {
  return ref_sum(v) / double(v.size());
}
double ref_max(const std::vector<double>& v) {
  return *std::max_element(v.begin(), v.end());
}
double ref_min(const std::vector<double>& v) {
  return *std::min_element(v.begin(), v.end());
}
double ref_var(const std::vector<double>& v, double correction) {
  double m = ref_mean(v), ss = 0;
  for (double x : v) ss += (x - m) * (x - m);
  return ss / std::max(0.0, double(v.size()) - correction);
}
double ref_logsumexp(const std::vector<double>& v) {
  if (v.empty()) return -std::numeric_limits<double>::infinity();
  double m = ref_max(v), s = 0;
  for (double x : v) s += std::exp(x - m);
  return m + std::log(s);
}
// First position of the extreme, as a double.
double ref_argmax(const std::vector<double>& v) {
  return double(std::max_element(v.begin(), v.end()) - v.begin());
}
double ref_argmin(const std::vector<double>& v) {
  return double(std::min_element(v.begin(), v.end()) - v.begin());
}

Inputs small_ints(const Shapes& s, DType t) {
  return {random_int_tensor(s[0], -3, 4, t)};
}

}  // namespace

EMBER_OP_CASES(reduction) {
  std::vector<OpCase> cases;
  add_reduce_cases(
      cases, "sum", OpId::sum, [](const Tensor& x, const Shape& d, bool k) { return x.sum(d, k); },
      ref_sum, true, true);
  add_reduce_cases(
      cases, "sum_int", OpId::sum,
      [](const Tensor& x, const Shape& d, bool k) { return x.sum(d, k); }, ref_sum, true, false,
      {DType::Int32, DType::Int64},
      [](const Shapes& s, DType t) { return Inputs{random_int_tensor(s[0], -1000, 1000, t)}; });
  add_reduce_cases(
      cases, "mean", OpId::mean,
      [](const Tensor& x, const Shape& d, bool k) { return x.mean(d, k); }, ref_mean, true, true);
  add_reduce_cases(
      cases, "amax", OpId::amax,
      [](const Tensor& x, const Shape& d, bool k) { return x.amax(d, k); }, ref_max, false, true);
  add_reduce_cases(
      cases, "amin", OpId::amin,
      [](const Tensor& x, const Shape& d, bool k) { return x.amin(d, k); }, ref_min, false, true);
  add_reduce_cases(
      cases, "amax_int", OpId::amax,
      [](const Tensor& x, const Shape& d, bool k) { return x.amax(d, k); }, ref_max, false, false,
      {DType::Int32, DType::Int64}, small_ints);
  add_reduce_cases(
      cases, "amin_int", OpId::amin,
      [](const Tensor& x, const Shape& d, bool k) { return x.amin(d, k); }, ref_min, false, false,
      {DType::Int32, DType::Int64}, small_ints);
  for (int64_t correction : {0, 1}) {
    std::string tag = "_correction" + std::to_string(correction);
    add_reduce_cases(
        cases, "var" + tag, OpId::var,
        [correction](const Tensor& x, const Shape& d, bool k) { return x.var(d, correction, k); },
        [correction](const std::vector<double>& v) { return ref_var(v, double(correction)); },
        false, true);
    add_reduce_cases(
        cases, "std" + tag, OpId::std_dev,
        [correction](const Tensor& x, const Shape& d, bool k) { return x.std(d, correction, k); },
        [correction](const std::vector<double>& v) {
          return std::sqrt(ref_var(v, double(correction)));
        },
        false, true);
  }
  add_reduce_cases(
      cases, "logsumexp", OpId::logsumexp,
      [](const Tensor& x, const Shape& d, bool k) { return x.logsumexp(d, k); }, ref_logsumexp,
      true, true);
  // Large magnitudes: exp(x) alone would overflow every dtype.
  add_reduce_cases(
      cases, "logsumexp_large_values", OpId::logsumexp,
      [](const Tensor& x, const Shape& d, bool k) { return x.logsumexp(d, k); }, ref_logsumexp,
      false, false, kFloats,
      [](const Shapes& s, DType t) { return Inputs{random_tensor(s[0], t, 500, 1000)}; });

  // argmax/argmin take one dim (or none: the flattened tensor). The reference receives each
  // group's values in row-major order, which is the order of positions along the dim.
  for (bool max : {true, false}) {
    std::string name = max ? "argmax" : "argmin";
    OpId op = max ? OpId::argmax : OpId::argmin;
    ReduceFn f = [max](const Tensor& x, const Shape& d, bool k) {
      std::optional<int64_t> dim;
      if (!d.empty()) dim = d[0];
      return max ? x.argmax(dim, k) : x.argmin(dim, k);
    };
    RefFn ref = max ? ref_argmax : ref_argmin;
    std::vector<OpCase> arg;
    add_reduce_cases(arg, name, op, f, ref, false, false);
    add_reduce_cases(arg, name + "_int", op, f, ref, false, false, {DType::Int32, DType::Int64},
                     small_ints);
    for (OpCase& c : arg) {
      // Pairs of dims are not argmax's business; "all" with keepdim is tested in its own case.
      if (c.name.find("pair") != std::string::npos) continue;
      cases.push_back(std::move(c));
    }
    OpCase keep;
    keep.name = name + "_all_keepdim";
    keep.covers = {op};
    keep.shapes = {{{3, 5}}, {{2, 3, 4}}, {{}}};
    keep.run = [max](const Inputs& in) {
      return Inputs{max ? in[0].argmax(std::nullopt, true) : in[0].argmin(std::nullopt, true)};
    };
    keep.reference = [ref](const std::vector<Ref>& r) {
      return std::vector<Ref>{ref_reduce(r[0], {}, true, ref)};
    };
    cases.push_back(std::move(keep));
  }

  OpCase mask;
  mask.name = "equal_mask";
  mask.covers = {OpId::equal_mask};
  mask.shapes = {{{}, {}}, {{3, 4}, {3, 4}}, {{3, 4}, {3, 1}}, {{2, 1, 4}, {3, 1}}, {{0, 4}, {4}}};
  mask.dtypes = {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16, DType::Int64};
  mask.make_inputs = [](const Shapes& s, DType t) {
    // Few distinct values, so equal pairs are common.
    return Inputs{random_int_tensor(s[0], 0, 3).to(t), random_int_tensor(s[1], 0, 3).to(t)};
  };
  mask.run = [](const Inputs& in) { return Inputs{dispatch1(OpId::equal_mask, {in[0], in[1]})}; };
  mask.reference = [](const std::vector<Ref>& r) {
    return std::vector<Ref>{
        ref_zip(r[0], r[1], [](double a, double b) { return a == b ? 1.0 : 0.0; })};
  };
  cases.push_back(std::move(mask));
  return cases;
}

}  // namespace ember::test
