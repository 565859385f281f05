// Op cases: matmul (2-D, batched with broadcasting, 1-D conventions, transposed and strided
// layouts, every dtype), bmm and linear.
#include "support/op_cases.h"

namespace ember::test {

namespace {
const std::vector<DType> kFloatDTypes = {DType::Float32, DType::Float64, DType::Float16,
                                         DType::BFloat16};

// Batched product with PyTorch's rules: 1-D operands become a row / column and lose that dim
// again; batch dims broadcast.
Ref ref_matmul(Ref a, Ref b) {
  const bool row = a.dim() == 1, col = b.dim() == 1;
  if (row) a.shape.insert(a.shape.begin(), 1);
  if (col) b.shape.push_back(1);
  const int64_t m = a.shape[a.dim() - 2], k = a.shape[a.dim() - 1], n = b.shape[b.dim() - 1];
  Shape ab(a.shape.begin(), a.shape.end() - 2), bb(b.shape.begin(), b.shape.end() - 2);
  Shape batch = ref_broadcast(ab, bb);
  Shape s = batch;
  s.push_back(m);
  s.push_back(n);
  Ref out(s, 0.0);
  for (int64_t p = 0; p < out.numel(); ++p) {
    auto idx = out.index(p);
    const int64_t i = idx[idx.size() - 2], j = idx.back();
    // Batch position in each operand: missing leading dims dropped, size-1 dims pinned to 0.
    std::vector<int64_t> ai(a.shape.size()), bi(b.shape.size());
    for (size_t q = 0; q < ab.size(); ++q)
      ai[q] = ab[q] == 1 ? 0 : idx[q + batch.size() - ab.size()];
    for (size_t q = 0; q < bb.size(); ++q)
      bi[q] = bb[q] == 1 ? 0 : idx[q + batch.size() - bb.size()];
    double sum = 0;
    for (int64_t q = 0; q < k; ++q) {
      ai[ai.size() - 2] = i;
      ai.back() = q;
      bi[bi.size() - 2] = q;
      bi.back() = j;
      sum += a.at(ai) * b.at(bi);
    }
    out.v[p] = sum;
  }
  if (row) out.shape.erase(out.shape.end() - 2);
  if (col) out.shape.pop_back();
  return out;
}

Ref ref_transpose_last(const Ref& r) {
  Shape perm(r.shape.size());
  for (size_t i = 0; i < perm.size(); ++i) perm[i] = int64_t(i);
  std::swap(perm[perm.size() - 1], perm[perm.size() - 2]);
  return ref_permute(r, perm);
}

Shape swap_last(Shape s) {
  std::swap(s[s.size() - 1], s[s.size() - 2]);
  return s;
}

OpCase matmul_case(std::string name, std::vector<Shapes> shapes) {
  OpCase c;
  c.name = std::move(name);
  c.covers = {OpId::matmul};
  c.shapes = std::move(shapes);
  c.dtypes = kFloatDTypes;
  c.run = [](const Inputs& in) { return Inputs{matmul(in[0], in[1])}; };
  c.reference = [](const std::vector<Ref>& r) { return std::vector<Ref>{ref_matmul(r[0], r[1])}; };
  c.gradcheck = true;
  return c;
}

// Operands are made with their last two dims swapped and transposed back by a view, so BLAS
// sees column-major matrices (trans flags).
OpCase transposed_case(std::string name, bool ta, bool tb, std::vector<Shapes> shapes) {
  OpCase c = matmul_case(std::move(name), {});
  for (Shapes s : shapes) {
    if (ta) s[0] = swap_last(s[0]);
    if (tb) s[1] = swap_last(s[1]);
    c.shapes.push_back(s);
  }
  c.run = [ta, tb](const Inputs& in) {
    return Inputs{
        matmul(ta ? in[0].transpose(-2, -1) : in[0], tb ? in[1].transpose(-2, -1) : in[1])};
  };
  c.reference = [ta, tb](const std::vector<Ref>& r) {
    return std::vector<Ref>{
        ref_matmul(ta ? ref_transpose_last(r[0]) : r[0], tb ? ref_transpose_last(r[1]) : r[1])};
  };
  return c;
}

}  // namespace

EMBER_OP_CASES(linalg) {
  std::vector<OpCase> cases;
  cases.push_back(matmul_case("matmul_2d", {{{3, 4}, {4, 5}},
                                            {{1, 7}, {7, 1}},
                                            {{0, 3}, {3, 2}},
                                            {{3, 0}, {0, 2}},
                                            {{2, 3}, {3, 0}},
                                            {{37, 33}, {33, 17}}}));
  cases.push_back(matmul_case("matmul_batched_broadcast", {{{2, 3, 4}, {4, 5}},
                                                           {{4, 5}, {2, 5, 3}},
                                                           {{3, 2, 4}, {3, 4, 5}},
                                                           {{2, 1, 3, 4}, {5, 4, 2}},
                                                           {{2, 3, 4}, {1, 4, 2}},
                                                           {{0, 3, 4}, {4, 2}}}));
  cases.push_back(matmul_case(
      "matmul_vectors",
      {{{4}, {4}}, {{4}, {4, 3}}, {{3, 4}, {4}}, {{4}, {2, 4, 3}}, {{2, 3, 4}, {4}}, {{0}, {0}}}));
  cases.push_back(transposed_case("matmul_a_transposed", true, false,
                                  {{{3, 4}, {4, 5}}, {{2, 3, 4}, {4, 5}}, {{1, 4}, {4, 2}}}));
  cases.push_back(transposed_case("matmul_b_transposed", false, true,
                                  {{{3, 4}, {4, 5}}, {{2, 3, 4}, {2, 4, 5}}, {{3, 4}, {4, 1}}}));
  cases.push_back(transposed_case("matmul_both_transposed", true, true,
                                  {{{3, 4}, {4, 5}}, {{2, 3, 4}, {4, 5}}}));
  // Many rows and few columns (an lm_head's shape), in every operand layout, as folded
  // batches and matrix by matrix.
  cases.push_back(matmul_case("matmul_few_columns", {{{70, 20}, {20, 9}},
                                                     {{3, 50, 12}, {12, 7}},
                                                     {{3, 50, 12}, {3, 12, 7}},
                                                     {{130, 33}, {33, 1}}}));
  cases.push_back(transposed_case("matmul_few_columns_a_transposed", true, false,
                                  {{{70, 20}, {20, 9}}, {{2, 40, 6}, {6, 5}}}));
  cases.push_back(transposed_case("matmul_few_columns_b_transposed", false, true,
                                  {{{70, 20}, {20, 9}}, {{2, 40, 6}, {2, 6, 5}}}));
  cases.push_back(
      transposed_case("matmul_few_columns_both_transposed", true, true, {{{70, 20}, {20, 9}}}));
  OpCase big = matmul_case("matmul_large_batched",
                           {{{8, 40, 50}, {8, 50, 30}}, {{4, 150, 140}, {140, 130}}});
  big.gradcheck = false;
  big.tol_scale = 4;
  cases.push_back(big);

  // Integers: a plain loop, exact.
  OpCase ints = matmul_case("matmul_int", {{{3, 4}, {4, 5}},
                                           {{2, 3, 4}, {4}},
                                           {{2, 1, 4, 3}, {5, 3, 2}},
                                           {{70, 64}, {64, 60}},
                                           {{3, 0}, {0, 2}}});
  ints.dtypes = {DType::Int32, DType::Int64};
  ints.make_inputs = [](const Shapes& s, DType t) {
    return Inputs{random_int_tensor(s[0], -20, 20, t), random_int_tensor(s[1], -20, 20, t)};
  };
  ints.gradcheck = false;
  cases.push_back(ints);

  OpCase bmm_case = matmul_case("bmm", {{{2, 3, 4}, {2, 4, 5}}, {{0, 3, 4}, {0, 4, 2}}});
  bmm_case.run = [](const Inputs& in) { return Inputs{bmm(in[0], in[1])}; };
  cases.push_back(bmm_case);

  // linear: x @ weight^T + bias, with shapes x, weight [out, in], bias [out].
  OpCase lin;
  lin.name = "linear";
  lin.covers = {OpId::matmul};
  lin.shapes = {{{5, 3}, {4, 3}, {4}}, {{2, 6, 3}, {4, 3}, {4}}, {{3}, {2, 3}, {2}}};
  lin.dtypes = kFloatDTypes;
  lin.run = [](const Inputs& in) {
    return Inputs{linear(in[0], in[1], in[2]), linear(in[0], in[1])};
  };
  lin.reference = [](const std::vector<Ref>& r) {
    Ref y = ref_matmul(r[0], ref_transpose_last(r[1]));
    return std::vector<Ref>{ref_zip(y, r[2], [](double a, double b) { return a + b; }), y};
  };
  lin.gradcheck = true;
  cases.push_back(lin);

  return cases;
}

}  // namespace ember::test
