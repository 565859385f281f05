// Op cases: cumsum (floating, and integers summed in int64), sort and argsort in both orders
// against float64 loop references; cumsum and sort's values are gradchecked.
#include <algorithm>
#include <numeric>

#include "support/op_cases.h"

namespace ember::test {

namespace {

// Stable sort of each lane along dim: values, then the positions they came from.
std::vector<Ref> ref_sort(const Ref& x, int64_t dim, bool descending) {
  Ref positions = x;
  for (int64_t f = 0; f < x.numel(); ++f) positions.v[size_t(f)] = double(x.index(f)[size_t(dim)]);
  std::vector<std::vector<double>> order;  // the lanes' sorted positions, in lane order
  const Ref values = ref_lanes(x, dim, [&](const std::vector<double>& v) {
    std::vector<size_t> p(v.size());
    std::iota(p.begin(), p.end(), size_t(0));
    std::stable_sort(p.begin(), p.end(),
                     [&](size_t a, size_t b) { return descending ? v[a] > v[b] : v[a] < v[b]; });
    std::vector<double> sorted, pos;
    for (size_t i : p) {
      sorted.push_back(v[i]);
      pos.push_back(double(i));
    }
    order.push_back(pos);
    return sorted;
  });
  size_t lane = 0;
  const Ref indices = ref_lanes(positions, dim, [&](const std::vector<double>&) {
    return order[lane++];
  });
  return {values, indices};
}

}  // namespace

EMBER_OP_CASES(scan_sort) {
  std::vector<OpCase> cases;
  struct D {
    std::string name;
    int64_t dim;
    std::vector<Shapes> shapes;
  };
  const std::vector<D> dims = {
      {"last", -1, {{{}}, {{1}}, {{7}}, {{3, 9}}, {{2, 0}}, {{2, 3, 16}}}},
      {"first", 0, {{{5, 3}}, {{33, 2}}}},
      {"middle", 1, {{{2, 6, 3}}}},
  };
  for (const D& k : dims) {
    const int64_t dim = k.dim;
    OpCase c;
    c.name = "cumsum_" + k.name;
    c.shapes = k.shapes;
    c.run = [dim](const Inputs& in) { return Inputs{cumsum(in[0], dim)}; };
    c.reference = [dim](const std::vector<Ref>& r) {
      return std::vector<Ref>{ref_lanes(r[0], dim, [](const std::vector<double>& v) {
        std::vector<double> s(v.size());
        std::partial_sum(v.begin(), v.end(), s.begin());
        return s;
      })};
    };
    c.gradcheck = true;
    c.tol_scale = 3;
    cases.push_back(std::move(c));
    for (bool descending : {false, true}) {
      OpCase s;
      s.name = std::string(descending ? "sort_descending_" : "sort_") + k.name;
      s.shapes = k.shapes;
      s.dtypes.push_back(DType::Int64);
      s.make_inputs = [](const Shapes& sh, DType t) {
        // Small integers in the int64 runs, so that equal values show the stable order.
        return Inputs{t == DType::Int64 ? random_int_tensor(sh[0], -3, 4)
                                        : random_tensor(sh[0], t)};
      };
      s.run = [dim, descending](const Inputs& in) {
        auto [values, indices] = sort(in[0], dim, descending);
        return Inputs{values, indices, argsort(in[0], dim, descending)};
      };
      s.reference = [dim, descending](const std::vector<Ref>& r) {
        if (r[0].dim() == 0) return std::vector<Ref>{r[0], Ref({}, 0.0), Ref({}, 0.0)};
        std::vector<Ref> v = ref_sort(r[0], dim < 0 ? dim + r[0].dim() : dim, descending);
        v.push_back(v[1]);
        return v;
      };
      s.gradcheck = true;
      cases.push_back(std::move(s));
    }
  }
  {
    OpCase c;
    c.name = "cumsum_int";
    c.shapes = {{{4, 9}}};
    c.dtypes = {DType::Int64, DType::Int32};
    c.make_inputs = [](const Shapes& s, DType t) {
      return Inputs{random_int_tensor(s[0], -5, 6, t)};
    };
    c.run = [](const Inputs& in) { return Inputs{cumsum(in[0], 1)}; };
    c.reference = [](const std::vector<Ref>& r) {
      return std::vector<Ref>{ref_lanes(r[0], 1, [](const std::vector<double>& v) {
        std::vector<double> s(v.size());
        std::partial_sum(v.begin(), v.end(), s.begin());
        return s;
      })};
    };
    cases.push_back(std::move(c));
  }
  return cases;
}

}  // namespace ember::test
