// ember's float32 gemm (kernels/cpu/gemm.h) against a float64 reference: shapes off every
// blocking (rows past the 12-row tiles, columns past the 32-column panels, k past one packed
// block; one row, which goes to OpenBLAS), both layouts of b, a with a row stride wider than
// its rows; and the epilogue seen once on every row, after the row's product is complete.
#include "kernels/cpu/gemm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

namespace ember {
namespace {

struct EpilogueCtx {
  float* c;
  int64_t n;
  std::vector<int>* seen;  // epilogue calls per row
};

// Records the call and writes 2 * product + row into the row: a test of order as well as
// coverage, since a row finished before its product is complete would not match.
void record_rows(void* const* ctx, int64_t r0, int64_t r1) {
  auto* e = static_cast<EpilogueCtx*>(ctx[0]);
  for (int64_t r = r0; r < r1; ++r) {
#pragma omp atomic
    ++(*e->seen)[size_t(r)];
    for (int64_t j = 0; j < e->n; ++j) e->c[r * e->n + j] = 2.0f * e->c[r * e->n + j] + float(r);
  }
}

struct Shape3 {
  int64_t m, n, k;
};

// a_cols: a stored by columns, element (i, p) at a[p * lda + i] (lda = M + pad).
void check_gemm(Shape3 s, bool b_rows_along_k, int64_t lda_pad, bool a_cols = false) {
  const int64_t M = s.m, N = s.n, K = s.k, lda = (a_cols ? M : K) + lda_pad;
  std::mt19937 rng(unsigned(M * 131 + N * 7 + K));
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> a(size_t((a_cols ? K : M) * lda)), b(size_t(N * K)), c(size_t(M * N), -7.0f);
  for (float& v : a) v = u(rng);
  for (float& v : b) v = u(rng);
  // b(k, n) = b[k * bk + n * bn]: a [N, K] weight read transposed, or a [K, N] matrix.
  const int64_t bk = b_rows_along_k ? 1 : N, bn = b_rows_along_k ? K : 1;
  std::vector<int> seen(size_t(M), 0);
  EpilogueCtx e{c.data(), N, &seen};
  void* ctx[1] = {&e};
  cpu::gemm_f32(M, N, K, a.data(), lda, a_cols, b.data(), bk, bn, c.data(), record_rows, ctx);
  for (int64_t r = 0; r < M; ++r) ASSERT_EQ(seen[size_t(r)], 1) << "row " << r;
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double want = 0, mag = 0;
      for (int64_t p = 0; p < K; ++p) {
        const double t = double(a[size_t(a_cols ? p * lda + i : i * lda + p)]) *
                         double(b[size_t(p * bk + j * bn)]);
        want += t;
        mag += std::fabs(t);
      }
      want = 2.0 * want + double(i);
      // float32 sums: K roundings of terms up to mag, then the epilogue's two.
      const double tol = 2.0 * (double(K) + 2.0) * 6e-8 * (2.0 * mag + std::fabs(double(i))) + 1e-6;
      ASSERT_NEAR(c[size_t(i * N + j)], want, tol)
          << M << "x" << N << "x" << K << " at (" << i << ", " << j << ")"
          << (b_rows_along_k ? " b transposed" : " b row-major") << " lda " << lda
          << (a_cols ? " a by columns" : "");
    }
}

TEST(GemmF32, MatchesFloat64OnEdgeShapesAndBothLayouts) {
  const Shape3 shapes[] = {{1, 1, 1},      {13, 33, 7}, {12, 32, 384}, {25, 65, 385},
                           {100, 17, 800}, {3, 200, 5}, {97, 96, 129}, {40, 31, 0},
                           {1, 40, 9},    {1, 5, 300}};
  for (const Shape3& s : shapes)
    for (bool t : {true, false})
      for (int64_t pad : {0, 5}) check_gemm(s, t, pad);
}

TEST(GemmF32, LargeEnoughToThreadMatchesFloat64) {
  // Rows split between threads in whole tiles, with a partial tile and panel at the end (also
  // two tiles against many panels, as even either way); and rows that split unevenly (3 tiles
  // against 4 panels), where the threads split the panels instead.
  check_gemm({389, 130, 160}, true, 0);
  check_gemm({20, 1000, 96}, true, 3);
  check_gemm({20, 1000, 96}, false, 0);
  check_gemm({25, 128, 100}, true, 0);
  check_gemm({25, 100, 150}, false, 2);
}

TEST(GemmF32, AStoredByColumnsMatchesFloat64) {
  // A weight grad's dy^T @ x: a read down its columns, k past one packed block, both splits.
  for (const Shape3& s : {Shape3{13, 33, 7}, Shape3{128, 512, 768}, Shape3{389, 130, 160},
                          Shape3{20, 1000, 96}, Shape3{1, 40, 9}})
    for (bool t : {true, false}) check_gemm(s, t, 3, true);
}

TEST(GemmF32, BLargerThanThePackingBufferGoesInGroupsOfPanels) {
  // 2100 x 1100 floats is more than the 8 MiB packed at once: two groups of panels, rows split
  // between threads (37 rows) or panels split (13 rows), the epilogue after the last group.
  check_gemm({37, 2100, 1100}, true, 0);
  check_gemm({13, 2100, 1100}, false, 0);
}

}  // namespace
}  // namespace ember
