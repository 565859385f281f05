// Op cases: gathers and scatters by index tensors (index_select, gather, index_add,
// scatter_add, embedding), positional masks (tril, triu) and topk.
#include <algorithm>
#include <numeric>

#include "support/op_cases.h"

namespace ember::test {

namespace {
const std::vector<DType> kAllDTypes = {DType::Float32,  DType::Float64, DType::Float16,
                                       DType::BFloat16, DType::Int32,   DType::Int64,
                                       DType::Bool};
const std::vector<DType> kNumericDTypes = {DType::Float32,  DType::Float64, DType::Float16,
                                           DType::BFloat16, DType::Int32,   DType::Int64};

// Values of a dtype: random floats, small integers, or random bools.
Tensor values(const Shape& s, DType t) {
  if (t == DType::Bool) return random_bool_tensor(s);
  if (is_integral(t)) return random_int_tensor(s, -50, 50, t);
  return random_tensor(s, t);
}

int64_t wrap(int64_t d, int64_t n) {
  return d < 0 ? d + n : d;
}

// ---- float64 references: plain loops over multi-indices ----

Ref ref_index_select(const Ref& x, int64_t d, const Ref& index) {
  Shape s = x.shape;
  s[d] = index.numel();
  Ref out(s, 0.0);
  for (int64_t p = 0; p < out.numel(); ++p) {
    auto idx = out.index(p);
    idx[d] = int64_t(index.v[idx[d]]);
    out.v[p] = x.at(idx);
  }
  return out;
}

Ref ref_gather(const Ref& x, int64_t d, const Ref& index) {
  Ref out(index.shape, 0.0);
  for (int64_t p = 0; p < out.numel(); ++p) {
    auto idx = out.index(p);
    idx[d] = int64_t(index.v[p]);
    out.v[p] = x.at(idx);
  }
  return out;
}

Ref ref_index_add(const Ref& x, int64_t d, const Ref& index, const Ref& src) {
  Ref out = x;
  for (int64_t p = 0; p < src.numel(); ++p) {
    auto idx = src.index(p);
    idx[d] = int64_t(index.v[idx[d]]);
    out.at(idx) += src.v[p];
  }
  return out;
}

Ref ref_scatter_add(const Ref& x, int64_t d, const Ref& index, const Ref& src) {
  Ref out = x;
  for (int64_t p = 0; p < index.numel(); ++p) {
    auto pos = index.index(p);
    auto idx = pos;
    idx[d] = int64_t(index.v[p]);
    out.at(idx) += src.at(pos);
  }
  return out;
}

Ref ref_tri(const Ref& x, int64_t k, bool lower) {
  Ref out = x;
  const int64_t nd = x.dim();
  for (int64_t p = 0; p < out.numel(); ++p) {
    auto idx = out.index(p);
    int64_t i = idx[nd - 2], j = idx[nd - 1];
    bool keep = lower ? j - i <= k : j - i >= k;
    if (!keep) out.v[p] = 0;
  }
  return out;
}

// Values and positions of the k largest (smallest) of each lane; ties keep the lower position.
std::vector<Ref> ref_topk(const Ref& x, int64_t d, int64_t k, bool largest) {
  Shape s = x.shape;
  const int64_t n = s[d];
  s[d] = k;
  Ref values(s, 0.0), positions(s, 0.0);
  for (int64_t p = 0; p < values.numel(); ++p) {
    auto idx = values.index(p);
    if (idx[d] != 0) continue;  // fill a whole lane when meeting its first slot
    std::vector<std::pair<double, int64_t>> lane;
    for (int64_t j = 0; j < n; ++j) {
      auto at = idx;
      at[d] = j;
      lane.push_back({x.at(at), j});
    }
    std::stable_sort(lane.begin(), lane.end(), [largest](const auto& a, const auto& b) {
      return largest ? a.first > b.first : a.first < b.first;
    });
    for (int64_t t = 0; t < k; ++t) {
      auto at = idx;
      at[d] = t;
      values.at(at) = lane[t].first;
      positions.at(at) = double(lane[t].second);
    }
  }
  return {values, positions};
}

// ---- case builders ----

// x of shape s[0] and a 1-D index of shape s[1] with entries in range for dim d.
OpCase index_select_case(std::string name, int64_t d, std::vector<Shapes> shapes,
                         DType index_dtype = DType::Int64) {
  OpCase c;
  c.name = std::move(name);
  c.covers = {OpId::index_select};
  c.shapes = std::move(shapes);
  c.dtypes = kAllDTypes;
  c.make_inputs = [d, index_dtype](const Shapes& s, DType t) {
    int64_t n = s[0][wrap(d, int64_t(s[0].size()))];
    return Inputs{values(s[0], t),
                  random_int_tensor(s[1], 0, std::max<int64_t>(n, 1), index_dtype)};
  };
  c.run = [d](const Inputs& in) { return Inputs{in[0].index_select(d, in[1])}; };
  c.reference = [d](const std::vector<Ref>& r) {
    return std::vector<Ref>{ref_index_select(r[0], wrap(d, r[0].dim()), r[1])};
  };
  c.gradcheck = true;
  return c;
}

OpCase gather_case(std::string name, int64_t d, std::vector<Shapes> shapes) {
  OpCase c;
  c.name = std::move(name);
  c.covers = {OpId::gather};
  c.shapes = std::move(shapes);
  c.dtypes = kAllDTypes;
  c.make_inputs = [d](const Shapes& s, DType t) {
    int64_t n = s[0][wrap(d, int64_t(s[0].size()))];
    return Inputs{values(s[0], t), random_int_tensor(s[1], 0, std::max<int64_t>(n, 1))};
  };
  c.run = [d](const Inputs& in) { return Inputs{in[0].gather(d, in[1])}; };
  c.reference = [d](const std::vector<Ref>& r) {
    return std::vector<Ref>{ref_gather(r[0], wrap(d, r[0].dim()), r[1])};
  };
  c.gradcheck = true;
  return c;
}

// Shapes: x, index, src.
OpCase index_add_case(std::string name, int64_t d, std::vector<Shapes> shapes,
                      DType index_dtype = DType::Int64) {
  OpCase c;
  c.name = std::move(name);
  c.covers = {OpId::index_add};
  c.shapes = std::move(shapes);
  c.dtypes = kNumericDTypes;
  c.make_inputs = [d, index_dtype](const Shapes& s, DType t) {
    int64_t n = s[0][wrap(d, int64_t(s[0].size()))];
    return Inputs{values(s[0], t), random_int_tensor(s[1], 0, std::max<int64_t>(n, 1), index_dtype),
                  values(s[2], t)};
  };
  c.run = [d](const Inputs& in) { return Inputs{index_add(in[0], d, in[1], in[2])}; };
  c.reference = [d](const std::vector<Ref>& r) {
    return std::vector<Ref>{ref_index_add(r[0], wrap(d, r[0].dim()), r[1], r[2])};
  };
  c.gradcheck = true;
  c.tol_scale = 4;  // several adds round into the same 16-bit element
  return c;
}

OpCase scatter_add_case(std::string name, int64_t d, std::vector<Shapes> shapes) {
  OpCase c = index_add_case(std::move(name), d, std::move(shapes));
  c.covers = {OpId::scatter_add};
  c.run = [d](const Inputs& in) { return Inputs{scatter_add(in[0], d, in[1], in[2])}; };
  c.reference = [d](const std::vector<Ref>& r) {
    return std::vector<Ref>{ref_scatter_add(r[0], wrap(d, r[0].dim()), r[1], r[2])};
  };
  return c;
}

OpCase tri_case(bool lower, int64_t k, std::vector<Shapes> shapes) {
  OpCase c;
  c.name = std::string(lower ? "tril" : "triu") + "_k" + std::to_string(k);
  c.covers = {lower ? OpId::tril : OpId::triu};
  c.shapes = std::move(shapes);
  c.dtypes = kAllDTypes;
  c.make_inputs = [](const Shapes& s, DType t) { return Inputs{values(s[0], t)}; };
  c.run = [lower, k](const Inputs& in) { return Inputs{lower ? in[0].tril(k) : in[0].triu(k)}; };
  c.reference = [lower, k](const std::vector<Ref>& r) {
    return std::vector<Ref>{ref_tri(r[0], k, lower)};
  };
  c.gradcheck = true;
  return c;
}

OpCase topk_case(std::string name, int64_t k, int64_t d, bool largest, std::vector<Shapes> shapes) {
  OpCase c;
  c.name = std::move(name);
  c.covers = {OpId::topk};
  c.shapes = std::move(shapes);
  c.dtypes = kNumericDTypes;  // integers bring many ties: their order is checked exactly
  c.make_inputs = [](const Shapes& s, DType t) {
    return Inputs{is_integral(t) ? random_int_tensor(s[0], -3, 3, t) : random_tensor(s[0], t)};
  };
  c.run = [k, d, largest](const Inputs& in) {
    auto [v, i] = in[0].topk(k, d, largest);
    return Inputs{v, i};
  };
  c.reference = [k, d, largest](const std::vector<Ref>& r) {
    return ref_topk(r[0], wrap(d, r[0].dim()), k, largest);
  };
  c.gradcheck = true;
  return c;
}
}  // namespace

EMBER_OP_CASES(index) {
  std::vector<OpCase> cases;
  cases.push_back(index_select_case(
      "index_select_dim0", 0,
      {{{5, 4}, {3}}, {{3, 6, 2}, {7}}, {{0, 3}, {0}}, {{4, 0}, {2}}, {{6}, {9}}}));
  cases.push_back(index_select_case("index_select_dim1", 1, {{{5, 4}, {6}}, {{3, 6, 2}, {4}}}));
  cases.push_back(index_select_case("index_select_last_int32_index", -1,
                                    {{{5, 4}, {6}}, {{2, 3, 5}, {2}}}, DType::Int32));
  OpCase big_select = index_select_case("index_select_parallel", 0, {{{300, 130}, {400}}});
  big_select.gradcheck = false;
  cases.push_back(big_select);
  OpCase big_select_inner =
      index_select_case("index_select_parallel_dim1", 1, {{{120, 300}, {400}}});
  big_select_inner.gradcheck = false;
  cases.push_back(big_select_inner);

  cases.push_back(
      gather_case("gather_dim1", 1,
                  {{{4, 5}, {4, 3}}, {{4, 5}, {2, 8}}, {{3, 4, 5}, {2, 6, 3}}, {{2, 3}, {0, 3}}}));
  cases.push_back(
      gather_case("gather_dim0", 0, {{{4, 5}, {6, 5}}, {{7}, {10}}, {{3, 2, 2}, {4, 1, 2}}}));
  cases.push_back(gather_case("gather_last", -1, {{{2, 3, 5}, {2, 3, 7}}}));
  OpCase big_gather = gather_case("gather_parallel", 1, {{{200, 210}, {200, 200}}});
  big_gather.gradcheck = false;
  cases.push_back(big_gather);

  cases.push_back(index_add_case("index_add_dim0", 0,
                                 {{{5, 3}, {7}, {7, 3}}, {{4}, {6}, {6}}, {{3, 2}, {0}, {0, 2}}}));
  cases.push_back(index_add_case(
      "index_add_dim1", 1, {{{2, 5, 3}, {4}, {2, 4, 3}}, {{4, 6}, {8}, {4, 8}}}, DType::Int32));
  OpCase big_index_add = index_add_case("index_add_parallel", 0, {{{50, 300}, {400}, {400, 300}}});
  big_index_add.gradcheck = false;
  big_index_add.tol_scale = 16;  // up to ~20 adds land on one element
  cases.push_back(big_index_add);

  cases.push_back(scatter_add_case(
      "scatter_add_dim1", 1,
      {{{4, 5}, {4, 3}, {4, 6}}, {{3, 4, 2}, {2, 6, 2}, {3, 7, 2}}, {{3, 4}, {0, 2}, {1, 2}}}));
  cases.push_back(
      scatter_add_case("scatter_add_dim0", 0, {{{5, 3}, {7, 3}, {7, 3}}, {{6}, {10}, {12}}}));
  OpCase big_scatter =
      scatter_add_case("scatter_add_parallel", 0, {{{40, 300}, {300, 300}, {300, 300}}});
  big_scatter.gradcheck = false;
  big_scatter.tol_scale = 16;
  cases.push_back(big_scatter);

  // embedding: index_select over rows of a weight, for indices of any shape.
  OpCase emb;
  emb.name = "embedding";
  emb.covers = {OpId::index_select};
  emb.shapes = {{{10, 4}, {2, 3}}, {{7, 3}, {}}, {{5, 2}, {4}}, {{5, 2}, {0, 3}}};
  emb.dtypes = {DType::Float32, DType::Float64, DType::BFloat16};
  emb.make_inputs = [](const Shapes& s, DType t) {
    return Inputs{random_tensor(s[0], t), random_int_tensor(s[1], 0, s[0][0])};
  };
  emb.run = [](const Inputs& in) { return Inputs{embedding(in[0], in[1])}; };
  emb.reference = [](const std::vector<Ref>& r) {
    Shape s = r[1].shape;
    s.push_back(r[0].shape[1]);
    Ref out(s, 0.0);
    const int64_t dim = r[0].shape[1];
    for (int64_t p = 0; p < out.numel(); ++p)
      out.v[p] = r[0].v[int64_t(r[1].v[p / dim]) * dim + p % dim];
    return std::vector<Ref>{out};
  };
  emb.gradcheck = true;
  cases.push_back(emb);

  for (bool lower : {true, false}) {
    for (int64_t k : {0, -1, 2}) {
      cases.push_back(tri_case(lower, k, {{{4, 5}}, {{2, 3, 3}}, {{0, 3}}, {{3, 1}}, {{5, 2}}}));
    }
    OpCase big = tri_case(lower, 1, {{{2, 160, 130}}});
    big.name += "_parallel";
    big.gradcheck = false;
    cases.push_back(big);
  }

  cases.push_back(topk_case("topk_largest_last", 3, -1, true, {{{10}}, {{4, 7}}, {{0, 5}}}));
  cases.push_back(topk_case("topk_smallest_dim1", 2, 1, false, {{{5, 3, 4}}, {{2, 6}}}));
  cases.push_back(topk_case("topk_all_dim0", 4, 0, true, {{{4, 3}}}));
  cases.push_back(topk_case("topk_k0", 0, 0, true, {{{4, 3}}}));
  OpCase big_topk = topk_case("topk_parallel", 5, 1, true, {{{512, 130}}});
  big_topk.gradcheck = false;
  cases.push_back(big_topk);
  return cases;
}

}  // namespace ember::test
