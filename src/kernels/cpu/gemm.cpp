// ember's float32 gemm (see gemm.h). With AVX-512: b is packed into panels of 32 columns by blocks
// of kKC along k (a transposed weight through 16 x 16 register transposes; a b larger than
// kPackFloats a group of panels at a time), the threads split the rows (or the panels, when that
// loads them more evenly), and a register tile of up to 12 x 32 outputs accumulates one broadcast
// element of a against two vectors of b per step. Each thread finishes blocks of kMC rows in turn
// and runs the epilogue on a block as soon as it is complete, while it is still in cache (after the
// last group, when b is packed in groups). Without AVX-512, for a single row, or with
// EMBER_GEMM=openblas, OpenBLAS computes the product and the epilogue follows in a pass.
#include "kernels/cpu/gemm.h"

#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "ember/error.h"

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace ember::cpu {

namespace {

// Rows per epilogue call in the OpenBLAS path, and the work below which one thread runs.
constexpr int64_t kEpilogueRows = 64;
constexpr int64_t kParallelMacs = int64_t(1) << 18;

void openblas_gemm(int64_t M, int64_t N, int64_t K, const float* a, int64_t lda, bool a_cols,
                   const float* b, int64_t bk, int64_t bn, float* c) {
  if (K == 0) {
    std::memset(c, 0, size_t(M * N) * sizeof(float));
    return;
  }
  // b(k, n) = b[k * bk + n * bn]: row-major [K, N] when bn == 1, else the transpose of a
  // row-major [N, K].
  const bool trans = bn != 1;
  cblas_sgemm(CblasRowMajor, a_cols ? CblasTrans : CblasNoTrans, trans ? CblasTrans : CblasNoTrans,
              blasint(M), blasint(N), blasint(K), 1.0f, a, blasint(lda), b,
              blasint(trans ? std::max<int64_t>(bn, 1) : std::max<int64_t>(bk, 1)), 0.0f, c,
              blasint(N));
}

#if defined(__AVX512F__)

constexpr int64_t kMR = 12, kNR = 32, kKC = 384, kMC = 96;
// Panels multiplied against one block of rows before the next panels: kNC x kKC x 32 floats
// (384 KiB) of packed b stay in L2 while the block's tiles pass over them (docs/bench.md has
// the figures against all panels at once).
constexpr int64_t kNC = 8;
// The most of b packed at once (8 MiB): a GPT's weights fit whole; a vocabulary-sized one is
// packed a group of panels at a time rather than into a buffer its own size.
constexpr int64_t kPackFloats = int64_t(2) << 20;

// c[R rows, up to 32 columns (masks m0, m1)] (+)= a[R, kc] times the packed panel bp[kc, 32];
// a's element (r, k) at a[r * lda + k], or with ACOLS (a stored by columns) at a[k * lda + r].
template <int R, bool ACOLS>
__attribute__((noinline)) void tile(int64_t kc, const float* a, int64_t lda, const float* bp,
                                    float* c, int64_t ldc, __mmask16 m0, __mmask16 m1,
                                    bool accumulate) {
  __m512 c0[R], c1[R];
  for (int r = 0; r < R; ++r) {
    c0[r] = accumulate ? _mm512_maskz_loadu_ps(m0, c + r * ldc) : _mm512_setzero_ps();
    c1[r] = accumulate ? _mm512_maskz_loadu_ps(m1, c + r * ldc + 16) : _mm512_setzero_ps();
  }
  for (int64_t k = 0; k < kc; ++k) {
    const __m512 b0 = _mm512_load_ps(bp + k * kNR), b1 = _mm512_load_ps(bp + k * kNR + 16);
#pragma GCC unroll 12
    for (int r = 0; r < R; ++r) {
      const __m512 x = _mm512_set1_ps(ACOLS ? a[k * lda + r] : a[r * lda + k]);
      c0[r] = _mm512_fmadd_ps(x, b0, c0[r]);
      c1[r] = _mm512_fmadd_ps(x, b1, c1[r]);
    }
  }
  for (int r = 0; r < R; ++r) {
    _mm512_mask_storeu_ps(c + r * ldc, m0, c0[r]);
    _mm512_mask_storeu_ps(c + r * ldc + 16, m1, c1[r]);
  }
}

using TileFn = void (*)(int64_t, const float*, int64_t, const float*, float*, int64_t, __mmask16,
                        __mmask16, bool);
template <bool ACOLS>
constexpr TileFn kTiles[kMR + 1] = {
    nullptr,         tile<1, ACOLS>,  tile<2, ACOLS>, tile<3, ACOLS>, tile<4, ACOLS>,
    tile<5, ACOLS>,  tile<6, ACOLS>,  tile<7, ACOLS>, tile<8, ACOLS>, tile<9, ACOLS>,
    tile<10, ACOLS>, tile<11, ACOLS>, tile<12, ACOLS>};

// The packing buffer of the calling thread, grown as needed (the team shares it).
float* pack_buffer(size_t floats) {
  struct Free {
    void operator()(float* p) const { std::free(p); }
  };
  static thread_local std::unique_ptr<float, Free> buf;
  static thread_local size_t cap = 0;
  if (floats > cap) {
    const size_t bytes = (floats * sizeof(float) + 63) / 64 * 64;
    buf.reset(static_cast<float*>(std::aligned_alloc(64, bytes)));
    EMBER_CHECK(buf, "matmul: cannot allocate ", bytes, " bytes to pack an operand");
    cap = floats;
  }
  return buf.get();
}

// GCC 12 reports the undefined pass-through value inside its own unpack and lane-shuffle
// intrinsics as used uninitialized (a false positive, gone in GCC 13).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
// dst[c * ldd + i] = src[i * ld + c] for a 16 x 16 block: unpacks and shuffles within 128-bit
// lanes give each lane four rows' values of one column, then two rounds of lane shuffles
// gather a column's four lanes.
void transpose16(const float* src, int64_t ld, float* dst, int64_t ldd) {
  __m512 r[16], t[16], u[16];
  for (int i = 0; i < 16; ++i) r[i] = _mm512_loadu_ps(src + i * ld);
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  // u[4i + j], lane l: rows 4i ... 4i + 3 of column 4l + j.
  for (int i = 0; i < 4; ++i) {
    u[4 * i] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], 0x44);
    u[4 * i + 1] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], 0xEE);
    u[4 * i + 2] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
    u[4 * i + 3] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xEE);
  }
  for (int j = 0; j < 4; ++j) {
    const __m512 x0 = _mm512_shuffle_f32x4(u[j], u[4 + j], 0x44);
    const __m512 x1 = _mm512_shuffle_f32x4(u[j], u[4 + j], 0xEE);
    const __m512 y0 = _mm512_shuffle_f32x4(u[8 + j], u[12 + j], 0x44);
    const __m512 y1 = _mm512_shuffle_f32x4(u[8 + j], u[12 + j], 0xEE);
    _mm512_storeu_ps(dst + (0 + j) * ldd, _mm512_shuffle_f32x4(x0, y0, 0x88));
    _mm512_storeu_ps(dst + (4 + j) * ldd, _mm512_shuffle_f32x4(x0, y0, 0xDD));
    _mm512_storeu_ps(dst + (8 + j) * ldd, _mm512_shuffle_f32x4(x1, y1, 0x88));
    _mm512_storeu_ps(dst + (12 + j) * ldd, _mm512_shuffle_f32x4(x1, y1, 0xDD));
  }
}
#pragma GCC diagnostic pop

// Panel p of k-block kb: kc rows of 32 values, b's columns p*32 ... (zeros past N). A
// transposed b (a linear layer's weight) goes through 16 x 16 register transposes; what they
// leave (a partial half panel, k past the last 16) is copied row by row, every write
// contiguous.
void pack_panel(const float* b, int64_t bk, int64_t bn, int64_t N, int64_t k0, int64_t kc,
                int64_t p, float* dst) {
  const int64_t n0 = p * kNR, nr = std::min(kNR, N - n0);
  int64_t kvec = 0, jvec = 0;  // rows [0, kvec) x columns [0, jvec) done by transposes
  if (bk == 1 && bn != 1) {
    kvec = kc / 16 * 16;
    jvec = nr / 16 * 16;
    for (int64_t h = 0; h < jvec; h += 16)
      for (int64_t k = 0; k < kvec; k += 16)
        transpose16(b + (n0 + h) * bn + k0 + k, bn, dst + k * kNR + h, kNR);
  }
  for (int64_t k = 0; k < kc; ++k) {
    const float* src = b + (k0 + k) * bk + n0 * bn;
    const int64_t j0 = k < kvec ? jvec : 0;
    for (int64_t j = j0; j < nr; ++j) dst[k * kNR + j] = src[j * bn];
    for (int64_t j = std::max(nr, j0); j < kNR; ++j) dst[k * kNR + j] = 0.0f;
  }
}

void own_gemm(int64_t M, int64_t N, int64_t K, const float* a, int64_t lda, bool a_cols,
              const float* b, int64_t bk, int64_t bn, float* c, RowEpilogue epi, void* const* ctx) {
  const int64_t np = (N + kNR - 1) / kNR, nkb = std::max<int64_t>((K + kKC - 1) / kKC, 1);
  const int64_t block = kKC * kNR;  // floats per packed (k-block, panel)
  // Panels packed at a time: all of b when it fits kPackFloats, else groups of panels, each
  // packed and multiplied in turn, the epilogue then in a pass of its own.
  const int64_t group = std::min(np, std::max<int64_t>(1, kPackFloats / (nkb * block)));
  float* packed = pack_buffer(size_t(group * nkb * block));
  const int64_t tiles = (M + kMR - 1) / kMR;
  const __mmask16 full = 0xFFFF;
  auto masks = [&](int64_t p, __mmask16& m0, __mmask16& m1) {
    const int64_t nr = std::min(kNR, N - p * kNR);
    m0 = nr >= 16 ? full : __mmask16((1u << nr) - 1);
    m1 = nr >= 32 ? full : nr <= 16 ? __mmask16(0) : __mmask16((1u << (nr - 16)) - 1);
  };
  // Rows [r0, r1) times panels [p0, p1) of the group packed from panel g0 (gn panels), all of k.
  auto compute = [&](int64_t r0, int64_t r1, int64_t g0, int64_t gn, int64_t p0, int64_t p1) {
    if (K == 0) {
      for (int64_t r = r0; r < r1; ++r)
        std::memset(c + r * N + p0 * kNR, 0,
                    size_t(std::min(N, p1 * kNR) - p0 * kNR) * sizeof(float));
      return;
    }
    for (int64_t kb = 0; kb < nkb; ++kb) {
      const int64_t k0 = kb * kKC, kc = std::min(kKC, K - k0);
      for (int64_t q0 = p0; q0 < p1; q0 += kNC) {  // kNC panels (kc x 256 floats) stay in L2
        for (int64_t r = r0; r < r1; r += kMR) {
          const int64_t mr = r1 - r < kMR ? r1 - r : kMR;
          const TileFn fn = a_cols ? kTiles<true>[mr] : kTiles<false>[mr];
          const float* ar = a_cols ? a + k0 * lda + r : a + r * lda + k0;
          for (int64_t p = q0; p < std::min(p1, q0 + kNC); ++p) {
            __mmask16 m0, m1;
            masks(p, m0, m1);
            fn(kc, ar, lda, packed + (kb * gn + p - g0) * block, c + r * N + p * kNR, N, m0, m1,
               kb > 0);
          }
        }
      }
    }
  };
#pragma omp parallel if (M * N * K >= kParallelMacs)
  {
    const int64_t nt = omp_get_num_threads(), t = omp_get_thread_num();
    // The rows, unless splitting the panels leaves the threads more evenly loaded (a weight
    // grad of 128 rows: 11 tiles, 6 and 5, against 16 panels, 8 and 8); the rows win within 5%,
    // as each thread then runs the epilogue on its own rows while they are in cache.
    const int64_t row_load = (tiles + nt - 1) / nt * np, panel_load = (np + nt - 1) / nt * tiles;
    const bool split_rows = nt == 1 || (tiles >= nt && row_load * 20 <= panel_load * 21);
    const int64_t r0 = std::min(M, tiles * t / nt * kMR);
    const int64_t r1 = std::min(M, tiles * (t + 1) / nt * kMR);
    for (int64_t g0 = 0; g0 < np; g0 += group) {
      const int64_t gn = std::min(group, np - g0);
      if (g0 > 0) {
#pragma omp barrier
      }
#pragma omp for schedule(static)
      for (int64_t i = 0; i < nkb * gn; ++i) {
        const int64_t kb = i / gn, k0 = kb * kKC;
        pack_panel(b, bk, bn, N, k0, std::min(kKC, K - k0), g0 + i % gn, packed + i * block);
      }
      if (split_rows) {
        // Rows split by whole tiles. With all of b packed, each block of kMC rows is finished
        // and then goes through the epilogue at once.
        for (int64_t m0 = r0; m0 < r1; m0 += kMC) {
          const int64_t m1 = std::min(r1, m0 + kMC);
          compute(m0, m1, g0, gn, g0, g0 + gn);
          if (epi && group == np) epi(ctx, m0, m1);
        }
      } else {
        // The threads split the panels (more evenly than the rows).
        compute(0, M, g0, gn, g0 + gn * t / nt, g0 + gn * (t + 1) / nt);
      }
    }
    if (epi && (!split_rows || group < np)) {
#pragma omp barrier
#pragma omp for schedule(static)
      for (int64_t m0 = 0; m0 < M; m0 += kMR) epi(ctx, m0, std::min(M, m0 + kMR));
    }
  }
}

#endif  // __AVX512F__

}  // namespace

void epilogue_pass(int64_t rows, RowEpilogue epi, void* const* ctx) {
  if (!epi) return;
#pragma omp parallel for schedule(static) if (rows > kEpilogueRows)
  for (int64_t r0 = 0; r0 < rows; r0 += kEpilogueRows)
    epi(ctx, r0, std::min(rows, r0 + kEpilogueRows));
}

bool own_gemm_enabled() {
#if defined(__AVX512F__)
  static const bool on = [] {
    const char* v = std::getenv("EMBER_GEMM");
    return !(v && std::string(v) == "openblas");
  }();
  return on;
#else
  return false;
#endif
}

void gemm_f32(int64_t M, int64_t N, int64_t K, const float* a, int64_t lda, bool a_cols,
              const float* b, int64_t bk, int64_t bn, float* c, RowEpilogue epi, void* const* ctx) {
  if (M == 0 || N == 0) return;
#if defined(__AVX512F__)
  // One row is a matrix-vector product, where packing b costs as much as the product itself.
  if (own_gemm_enabled() && M > 1) {
    own_gemm(M, N, K, a, lda, a_cols, b, bk, bn, c, epi, ctx);
    return;
  }
#endif
  openblas_gemm(M, N, K, a, lda, a_cols, b, bk, bn, c);
  epilogue_pass(M, epi, ctx);
}

}  // namespace ember::cpu
