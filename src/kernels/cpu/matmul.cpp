// CPU kernel of matmul: [..., M, K] x [..., K, N] with broadcast batch dims, through OpenBLAS.
// Operands go to BLAS in place whenever their last two dims are unit-strided in either order
// (a transposed view becomes a trans flag, not a copy); other layouts are copied first.
// float16/bfloat16 run through float32 copies; integers use a plain loop. BLAS writes the
// output with beta = 0, so the output is never zero-filled first.
#include <cblas.h>

#include <cstring>
#include <limits>
#include <optional>

#include "kernels/cpu/gemm.h"
#include "kernels/cpu/index.h"
#include "kernels/cpu/index_util.h"

namespace ember::cpu {

namespace {

// One operand seen as a batch of matrices, each `rows x cols`.
struct MatrixBatch {
  Tensor t;                        // the operand (possibly a contiguous copy)
  std::vector<int64_t> batch_off;  // element offset of each output batch position
  bool trans = false;              // stored column-major (a transposed row-major matrix)
  int64_t ld = 0;                  // BLAS leading dimension
};

// The BLAS view of a rows x cols matrix with strides (rs, cs): row-major when elements of a
// row are adjacent, column-major (trans) when elements of a column are; none otherwise. Size-1
// dims have meaningless strides, so they never disqualify a layout.
std::optional<std::pair<bool, int64_t>> blas_layout(int64_t rows, int64_t cols, int64_t rs,
                                                    int64_t cs) {
  const int64_t min_row_ld = std::max<int64_t>(cols, 1), min_col_ld = std::max<int64_t>(rows, 1);
  if ((cs == 1 || cols == 1) && (rows == 1 || rs >= min_row_ld))
    return std::make_pair(false, rows == 1 ? min_row_ld : rs);
  if ((rs == 1 || rows == 1) && (cols == 1 || cs >= min_col_ld))
    return std::make_pair(true, cols == 1 ? min_col_ld : cs);
  return std::nullopt;
}

// Offsets of t's matrices at every position of the broadcast batch shape `batch` (dims of
// size 1 in t, or missing from it, repeat the same matrix).
std::vector<int64_t> batch_offsets(const Tensor& t, const Shape& batch) {
  const int64_t nb = int64_t(batch.size()), tb = t.dim() - 2;
  Shape strides(size_t(nb), 0);
  for (int64_t j = 0; j < tb; ++j) {
    const int64_t bj = nb - tb + j;
    strides[bj] = t.sizes()[j] == 1 ? 0 : t.strides()[j];
  }
  return offset_table(batch, strides, 0, nb);
}

MatrixBatch prepare(const Tensor& t, const Shape& batch) {
  const int64_t nd = t.dim();
  const int64_t rows = t.sizes()[nd - 2], cols = t.sizes()[nd - 1];
  MatrixBatch m;
  m.t = t;
  auto layout = blas_layout(rows, cols, t.strides()[nd - 2], t.strides()[nd - 1]);
  if (!layout) {
    m.t = contiguous_copy(t);
    layout = blas_layout(rows, cols, m.t.strides()[nd - 2], m.t.strides()[nd - 1]);
  }
  m.trans = layout->first;  // a contiguous copy always has a row-major layout
  m.ld = layout->second;
  m.batch_off = batch_offsets(m.t, batch);
  return m;
}

void check_blas_size(int64_t v, const char* what) {
  EMBER_CHECK(v <= int64_t(std::numeric_limits<blasint>::max()), "matmul: ", what, " ", v,
              " exceeds what the BLAS library accepts (", std::numeric_limits<blasint>::max(), ")");
}

// c = a b (beta 0: OpenBLAS never reads c).
inline void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
                 const float* b, int64_t ldb, float* c, int64_t ldc) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
              blasint(m), blasint(n), blasint(k), 1.0f, a, blasint(lda), b, blasint(ldb), 0.0f, c,
              blasint(ldc));
}
inline void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const double* a, int64_t lda,
                 const double* b, int64_t ldb, double* c, int64_t ldc) {
  cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
              blasint(m), blasint(n), blasint(k), 1.0, a, blasint(lda), b, blasint(ldb), 0.0, c,
              blasint(ldc));
}

// Below this many multiply-adds per matrix, a batch runs one matrix per thread (BLAS then
// stays single-threaded inside the parallel region) instead of threading each small gemm.
constexpr int64_t kSmallGemm = 128 * 128 * 128;

// Whether every batch entry multiplies the same matrix b and a's m-row matrices follow each
// other at a fixed stride: then the whole batch is one [nb * m, K] x [K, N] product (the
// linear-layer case).
bool one_b_and_stacked_a(const MatrixBatch& A, const MatrixBatch& B, int64_t m) {
  for (size_t i = 0; i < A.batch_off.size(); ++i)
    if (B.batch_off[i] != B.batch_off[0] ||
        A.batch_off[i] != A.batch_off[0] + int64_t(i) * m * A.ld)
      return false;
  return true;
}

// o = a @ b over the batch, the operands already prepared for o's batch shape.
template <class T>
void blas_matmul(const MatrixBatch& A, const MatrixBatch& B, int64_t k, const Tensor& o) {
  const int64_t nd = o.dim();
  const int64_t m = o.sizes()[nd - 2], n = o.sizes()[nd - 1];
  for (int64_t v : {m, n, k, A.ld, B.ld}) check_blas_size(v, "size");
  const T* ap = static_cast<const T*>(A.t.impl()->data());
  const T* bp = static_cast<const T*>(B.t.impl()->data());
  T* op = static_cast<T*>(o.impl()->data());
  const int64_t nb = int64_t(A.batch_off.size());

  if (nb > 1 && !A.trans && one_b_and_stacked_a(A, B, m) &&
      nb * m <= int64_t(std::numeric_limits<blasint>::max())) {
    gemm(false, B.trans, nb * m, n, k, ap + A.batch_off[0], A.ld, bp + B.batch_off[0], B.ld, op, n);
    return;
  }
  if (nb > 1 && m * n * k <= kSmallGemm && omp_get_max_threads() > 1 && !omp_in_parallel()) {
#pragma omp parallel for
    for (int64_t i = 0; i < nb; ++i)
      gemm(A.trans, B.trans, m, n, k, ap + A.batch_off[i], A.ld, bp + B.batch_off[i], B.ld,
           op + i * m * n, n);
    return;
  }
  for (int64_t i = 0; i < nb; ++i)
    gemm(A.trans, B.trans, m, n, k, ap + A.batch_off[i], A.ld, bp + B.batch_off[i], B.ld,
         op + i * m * n, n);
}

template <class T>
void blas_matmul(const Tensor& a, const Tensor& b, const Tensor& o) {
  const Shape batch(o.sizes().begin(), o.sizes().end() - 2);
  blas_matmul<T>(prepare(a, batch), prepare(b, batch), a.sizes()[a.dim() - 1], o);
}

// 16-bit floats: float32 copies of the operands, a float32 gemm, one rounding at the end.
void half_matmul(const Tensor& a, const Tensor& b, const Tensor& o) {
  auto to_f32 = [](const Tensor& t) {
    Tensor c = make_tensor(t.sizes(), DType::Float32, t.device());
    Tensor src[1] = {t};
    Tensor dst[1] = {c};
    cast(src, dst, Attrs{});
    return c;
  };
  Tensor of = make_tensor(o.sizes(), DType::Float32, o.device());
  blas_matmul<float>(to_f32(a), to_f32(b), of);
  Tensor src[1] = {of};
  Tensor dst[1] = {o};
  cast(src, dst, Attrs{});
}

// Integers: BLAS has no integer gemm. Sums wrap around in two's complement, as integer
// matmul does in PyTorch (unsigned arithmetic keeps the wrap well defined).
template <class T>
void integer_matmul(const Tensor& a, const Tensor& b, const Tensor& o) {
  const int64_t nd = o.dim(), ad = a.dim(), bd = b.dim();
  const int64_t m = o.sizes()[nd - 2], n = o.sizes()[nd - 1], k = a.sizes()[ad - 1];
  const Shape batch(o.sizes().begin(), o.sizes().end() - 2);
  const std::vector<int64_t> aoff = batch_offsets(a, batch), boff = batch_offsets(b, batch);
  const int64_t ars = a.strides()[ad - 2], acs = a.strides()[ad - 1];
  const int64_t brs = b.strides()[bd - 2], bcs = b.strides()[bd - 1];
  const T* ap = static_cast<const T*>(a.impl()->data());
  const T* bp = static_cast<const T*>(b.impl()->data());
  T* op = static_cast<T*>(o.impl()->data());
  const int64_t rows = int64_t(aoff.size()) * m;
#pragma omp parallel if (rows * n * k >= kParallelGrain && rows > 1)
  {
    std::vector<uint64_t> acc(static_cast<size_t>(n));
#pragma omp for
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t bi = r / m, i = r % m;
      const T* arow = ap + aoff[bi] + i * ars;
      const T* bmat = bp + boff[bi];
      std::fill(acc.begin(), acc.end(), 0);
      for (int64_t p = 0; p < k; ++p) {
        const uint64_t av = uint64_t(int64_t(arow[p * acs]));
        const T* brow = bmat + p * brs;
        for (int64_t j = 0; j < n; ++j) acc[j] += av * uint64_t(int64_t(brow[j * bcs]));
      }
      for (int64_t j = 0; j < n; ++j) op[r * n + j] = T(int64_t(acc[j]));
    }
  }
}

}  // namespace

void matmul(std::span<const Tensor> in, std::span<Tensor> out, const Attrs&) {
  const Tensor &a = in[0], &b = in[1], &o = out[0];
  if (a.sizes()[a.dim() - 1] == 0) {  // empty sums: BLAS is not asked to handle k = 0
    std::memset(o.impl()->data(), 0, size_t(o.numel()) * dtype_size(o.dtype()));
    return;
  }
  switch (o.dtype()) {
    case DType::Float32:
      blas_matmul<float>(a, b, o);
      return;
    case DType::Float64:
      blas_matmul<double>(a, b, o);
      return;
    case DType::Float16:
    case DType::BFloat16:
      half_matmul(a, b, o);
      return;
    case DType::Int32:
      integer_matmul<int32_t>(a, b, o);
      return;
    case DType::Int64:
      integer_matmul<int64_t>(a, b, o);
      return;
    default:
      EMBER_FAIL("matmul: not implemented for dtype ", dtype_name(o.dtype()));
  }
}

void matmul_epilogue(const Tensor& a, const Tensor& b, const Tensor& out, RowEpilogue epi,
                     void* const* ctx) {
  EMBER_CHECK(out.is_contiguous() && a.dim() >= 2 && b.dim() >= 2 && out.dim() >= 2,
              "matmul_epilogue: needs matrices and a contiguous output, got ", a.shape_str(), " x ",
              b.shape_str(), " into ", out.shape_str());
  const int64_t nd = out.dim(), n = out.sizes()[nd - 1], k = a.sizes()[a.dim() - 1];
  const int64_t rows = n == 0 ? 0 : out.numel() / n;
  if (rows == 0) return;  // an empty output (an empty batch, too): nothing to compute
  const DType t = out.dtype();
  EMBER_CHECK(t == DType::Float32 || t == DType::Float64,
              "matmul_epilogue: not implemented for dtype ", dtype_name(t));
  if (k == 0) {
    std::memset(out.impl()->data(), 0, size_t(out.numel()) * dtype_size(t));
  } else {
    const int64_t m = out.sizes()[nd - 2];
    const Shape batch(out.sizes().begin(), out.sizes().end() - 2);
    const MatrixBatch A = prepare(a, batch), B = prepare(b, batch);
    // ember's gemm takes the whole batch as one [rows, K] x [K, N] product when b is one matrix
    // for all of it and a's matrices are row-major at a fixed stride (a linear layer's input),
    // or a single a stored by columns (a weight grad's dy^T).
    if (t == DType::Float32 && own_gemm_enabled() && (!A.trans || A.batch_off.size() == 1) &&
        one_b_and_stacked_a(A, B, m)) {
      gemm_f32(rows, n, k, static_cast<const float*>(A.t.impl()->data()) + A.batch_off[0], A.ld,
               A.trans, static_cast<const float*>(B.t.impl()->data()) + B.batch_off[0],
               B.trans ? 1 : B.ld, B.trans ? B.ld : 1, static_cast<float*>(out.impl()->data()), epi,
               ctx);
      return;
    }
    if (t == DType::Float32)
      blas_matmul<float>(A, B, k, out);
    else
      blas_matmul<double>(A, B, k, out);
  }
  epilogue_pass(rows, epi, ctx);
}

}  // namespace ember::cpu
