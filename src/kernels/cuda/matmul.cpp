// CUDA matmul through cuBLAS: one strided-batched gemm per product. cuBLAS is column-major, so
// row-major C = A @ B is computed as C^T = B^T @ A^T; an operand whose last two dims have a unit
// stride (row-major, or a transposed view) is passed as it lies with the matching trans flag,
// others (and batch dims that no single stride describes) are copied first. float32 computes
// in full float32 (on TF32 tensor cores only after cuda::set_allow_tf32(true)), the half types
// in float32 with their storage type, float64 in float64; integers take matmul_int.cu's
// kernel; a product of at most four rows against a weight stored row by row, gemv.h's. The
// handle is per device, on the device's stream.
#include <cublas_v2.h>

#include <algorithm>
#include <array>
#include <mutex>

#include "core/make_tensor.h"
#include "ember/cuda.h"
#include "core/shape.h"
#include "ember/ops.h"
#include "kernels/cuda/gemv.h"
#include "kernels/cuda/kernel_table.h"
#include "kernels/cuda/matmul_int.h"
#include "kernels/cuda/runtime.h"

namespace ember::cuda {

namespace {

void check_blas(cublasStatus_t s, const char* what) {
  EMBER_CHECK(s == CUBLAS_STATUS_SUCCESS, "matmul: ", what, " failed: ", cublasGetStatusName(s),
              " (", cublasGetStatusString(s), ")");
}

// A handle a device, and a second one for work on a side branch of a recording, which may run
// beside the stream's.
cublasHandle_t handle(int device) {
  constexpr int kMaxDevices = 64;
  static std::array<std::array<cublasHandle_t, 2>, kMaxDevices> handles{};
  static std::array<std::array<std::once_flag, 2>, kMaxDevices> made;
  const int side = detail::on_side_branch() ? 1 : 0;
  std::call_once(made[size_t(device)][size_t(side)], [&] {
    detail::use_device(device);
    cublasHandle_t& h = handles[size_t(device)][size_t(side)];
    check_blas(cublasCreate(&h), "cublasCreate");
    check_blas(cublasSetStream(h, detail::stream(device)), "cublasSetStream");
    // A workspace of its own, of one size for both (so that both choose the same kernels):
    // the side branch's handle is made while recording.
    constexpr size_t kWorkspace = size_t(32) << 20;  // cuBLAS's suggestion for Hopper
    void* ws = nullptr;
    detail::check(cudaMalloc(&ws, kWorkspace), "cudaMalloc (a cuBLAS workspace)");
    check_blas(cublasSetWorkspace(h, ws, kWorkspace), "cublasSetWorkspace");
  });
  return handles[size_t(device)][size_t(side)];
}

// One operand as cuBLAS takes it: row-major rows x cols, its leading dimension, whether it is
// transposed in memory, and the stride between batch entries.
struct Operand {
  Tensor t;  // the tensor read (perhaps a copy)
  bool transposed = false;
  int64_t ld = 0;
  int64_t batch_stride = 0;
};

// Whether t's last two dims (r x c) are a matrix cuBLAS can read as it lies: rows of unit
// stride (not transposed) or columns of unit stride (transposed), rows or columns apart by at
// least their length.
bool as_matrix(const Tensor& t, bool* transposed, int64_t* ld) {
  const int64_t nd = t.dim(), r = t.sizes()[size_t(nd - 2)], c = t.sizes()[size_t(nd - 1)];
  const int64_t sr = t.strides()[size_t(nd - 2)], sc = t.strides()[size_t(nd - 1)];
  if ((sc == 1 || c == 1) && (r == 1 || sr >= std::max<int64_t>(c, 1))) {
    *transposed = false;
    *ld = r == 1 ? std::max<int64_t>(c, 1) : sr;
    return true;
  }
  if ((sr == 1 || r == 1) && (c == 1 || sc >= std::max<int64_t>(r, 1))) {
    *transposed = true;
    *ld = c == 1 ? std::max<int64_t>(r, 1) : sc;
    return true;
  }
  return false;
}

// Whether t's batch dims (all but the last two) step by one stride; sets it.
bool uniform_batch(const Tensor& t, int64_t* stride) {
  int64_t step = -1, next = 0;
  for (int64_t d = t.dim() - 3; d >= 0; --d) {
    const int64_t size = t.sizes()[size_t(d)], st = t.strides()[size_t(d)];
    if (size == 1) continue;
    if (step >= 0 && st != next) return false;
    if (step < 0) step = st;
    next = st * size;
  }
  *stride = step < 0 ? 0 : step;
  return true;
}

// x: [batch..., r, c], broadcast against the output's batch dims `batch`.
Operand operand_of(const Tensor& x, const Shape& batch) {
  Shape full = batch;
  full.push_back(x.sizes()[size_t(x.dim() - 2)]);
  full.push_back(x.sizes()[size_t(x.dim() - 1)]);
  Operand o;
  o.t = x.expand(full);
  if (!uniform_batch(o.t, &o.batch_stride) || !as_matrix(o.t, &o.transposed, &o.ld)) {
    o.t = o.t.contiguous();
    uniform_batch(o.t, &o.batch_stride);
    as_matrix(o.t, &o.transposed, &o.ld);
  }
  return o;
}

void matmul(std::span<const Tensor> in, std::span<Tensor> out, const Attrs&) {
  const Tensor &a = in[0], &b = in[1];
  Tensor& c = out[0];
  const DType dt = a.dtype();
  const int64_t nd = c.dim(), m = c.sizes()[size_t(nd - 2)], n = c.sizes()[size_t(nd - 1)];
  const int64_t k = a.sizes()[size_t(a.dim() - 1)];
  Shape batch(c.sizes().begin(), c.sizes().end() - 2);
  int64_t nb = 1;
  for (int64_t s : batch) nb *= s;
  if (m == 0 || n == 0 || nb == 0) return;
  const int device = c.device().index;
  if (k == 0) {  // an empty sum: zeros
    detail::use_device(device);
    detail::check(cudaMemsetAsync(c.impl()->data(), 0, size_t(c.numel()) * dtype_size(dt),
                                  detail::stream(device)),
                  "matmul");
    return;
  }
  if (dt == DType::Int32 || dt == DType::Int64) {
    integer_matmul(a, b, c);
    return;
  }
  cudaDataType_t type;
  cublasComputeType_t compute;
  switch (dt) {
    case DType::Float32:
      type = CUDA_R_32F;
      compute = allow_tf32() ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F_PEDANTIC;
      break;
    case DType::Float16: type = CUDA_R_16F; compute = CUBLAS_COMPUTE_32F; break;
    case DType::BFloat16: type = CUDA_R_16BF; compute = CUBLAS_COMPUTE_32F; break;
    case DType::Float64: type = CUDA_R_64F; compute = CUBLAS_COMPUTE_64F; break;
    default:
      EMBER_FAIL("matmul: no kernel for ", c.device().str(), " tensors of dtype ",
                 dtype_name(dt), " (floating and integer dtypes only); cast with .to()");
  }
  Operand A = operand_of(a, batch), B = operand_of(b, batch);
  // One matrix for every batch entry (a linear layer's weight) and rows of a that continue
  // from one entry to the next: one gemm over all the rows instead of a batch of small ones
  // with a zero stride for the weight.
  int64_t rows = m, batches = nb;
  if (nb > 1 && B.batch_stride == 0 && !A.transposed && A.batch_stride == m * A.ld) {
    rows = m * nb;
    batches = 1;
  }
  // A few rows against a weight stored row by row (a decode step's linear layers): the gemv
  // kernel, which streams the weight once where a gemm's tiles would leave the GPU idle.
  if (batches == 1 && !A.transposed && B.transposed &&
      gemv::run(A.t.impl()->data(), A.ld, B.t.impl()->data(), B.ld, nullptr, nullptr,
                c.impl()->data(), rows, n, k, dt, device))
    return;
  EMBER_CHECK(rows < (int64_t(1) << 31) && n < (int64_t(1) << 31) && k < (int64_t(1) << 31),
              "matmul: dims past 2^31 on CUDA (", rows, " x ", k, " x ", n, ")");
  const float one_f = 1, zero_f = 0;
  const double one_d = 1, zero_d = 0;
  const void* alpha = dt == DType::Float64 ? static_cast<const void*>(&one_d) : &one_f;
  const void* beta = dt == DType::Float64 ? static_cast<const void*>(&zero_d) : &zero_f;
  cublasHandle_t h = handle(device);
  detail::use_device(device);
  // C^T (n x m, column-major, ld n) = B^T (n x k) @ A^T (k x m).
  check_blas(cublasGemmStridedBatchedEx(
                 h, B.transposed ? CUBLAS_OP_T : CUBLAS_OP_N, A.transposed ? CUBLAS_OP_T : CUBLAS_OP_N,
                 int(n), int(rows), int(k), alpha, B.t.impl()->data(), type, int(B.ld), B.batch_stride,
                 A.t.impl()->data(), type, int(A.ld), A.batch_stride, beta, c.impl()->data(), type,
                 int(n), m * n, int(batches), compute, CUBLAS_GEMM_DEFAULT),
             "cublasGemmStridedBatchedEx");
}

}  // namespace

void register_matmul(KernelTable& t) { t[OpId::matmul] = matmul; }

}  // namespace ember::cuda
