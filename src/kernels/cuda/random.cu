// CUDA kernels of the random ops (rand, randn, randint, bernoulli, multinomial), laid out on the
// Philox stream as ops/defs/factory.def says and as the CPU kernels (kernels/cpu/random.cpp)
// compute them. The elementwise ops run one thread per Philox block (grid-stride): block b feeds
// the same elements as on the CPU, through the same word-to-value functions of core/philox.h, and
// half types are rounded from float to nearest even as on the CPU, so the values are the CPU's bit
// for bit (randn aside: log, sin and cos of CUDA may differ from the host's libm in the last bit).
// multinomial runs a block per row: one thread checks the weights and builds the cumulative sums
// in double in the CPU's order, then the samples are drawn in parallel (with replacement: a
// binary search of the sums per sample; without: exponential keys, the smallest taken one at a
// time by block-wide selection with the CPU's tie-break). Weights no distribution can have are
// reported through the device's fault slot and raised by the host at the next sync.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "core/make_tensor.h"
#include "core/philox.h"
#include "kernels/cuda/elementwise.cuh"
#include "kernels/cuda/fault.cuh"
#include "kernels/cuda/kernel_table.h"
#include "kernels/cuda/row_registers.cuh"

namespace ember::cuda {

namespace {

constexpr int kThreads = 256;

// Ops start on a Philox block; the front ends reserve whole blocks.
void check_offset(const Attrs& a, const char* op) {
  EMBER_CHECK(a.offset % 4 == 0, op, ": the random offset ", a.offset,
              " must start a Philox block (a multiple of 4)");
}

int grid_for(int64_t work) {
  static const int max_blocks = [] {
    int sms = 0;
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
    return (sms > 0 ? sms : 80) * 32;
  }();
  const int64_t want = (work + kThreads - 1) / kThreads;
  return int(want < max_blocks ? want : max_blocks);
}

// Significant bits of a uniform in [0, 1) for each 16/32-bit float type (as on the CPU).
template <class T>
constexpr int uniform_bits() {
  if constexpr (std::is_same_v<T, __half>) return 11;
  if constexpr (std::is_same_v<T, __nv_bfloat16>) return 8;
  return 24;
}

// Block b of the op feeds elements [b * per_block, b * per_block + count) of p; `fill` writes
// them from the block's four words.
template <class T, class Fill>
__global__ void philox_kernel(T* p, int64_t n, int64_t per_block, uint64_t seed, uint64_t base,
                              Fill fill) {
  const int64_t nblocks = (n + per_block - 1) / per_block;
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t b = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; b < nblocks; b += step) {
    const philox::Block w = philox::block(seed, base + uint64_t(b));
    const int64_t first = b * per_block;
    const int64_t left = n - first;
    fill(w, p + first, int(left < per_block ? left : per_block));
  }
}

template <class T, class Fill>
void launch_blocks(const char* op, Tensor& out, int64_t per_block, const Attrs& a, Fill fill) {
  const int64_t n = out.numel();
  if (n == 0) return;
  const int device = out.device().index;
  detail::use_device(device);
  const int64_t nblocks = (n + per_block - 1) / per_block;
  philox_kernel<T, Fill><<<grid_for(nblocks), kThreads, 0, detail::stream(device)>>>(
      static_cast<T*>(out.impl()->data()), n, per_block, a.seed, a.offset / 4, fill);
  detail::check(cudaGetLastError(), op);
}

// ---- rand ----

// 16/32-bit floats: word k of the block is element k, the top `Bits` bits of it.
template <int Bits>
struct UniformFloat {
  template <class T>
  __device__ void operator()(const philox::Block& w, T* p, int count) const {
    for (int k = 0; k < count; ++k) store(p + k, philox::uniform_float(w.v[k], Bits));
  }
};
// float64: words 2k and 2k+1 are element k (53 bits).
struct UniformDouble {
  __device__ void operator()(const philox::Block& w, double* p, int count) const {
    for (int k = 0; k < count; ++k) p[k] = philox::uniform_double(w.v[2 * k], w.v[2 * k + 1]);
  }
};

void rand_op(std::span<const Tensor>, std::span<Tensor> out, const Attrs& a) {
  check_offset(a, "rand");
  visit<Kinds::Float>(out[0].dtype(), "rand", [&]<class T>() {
    if constexpr (std::is_same_v<T, double>)
      launch_blocks<T>("rand", out[0], 2, a, UniformDouble{});
    else
      launch_blocks<T>("rand", out[0], 4, a, UniformFloat<uniform_bits<T>()>{});
  });
}

// ---- randn ----

// 16/32-bit floats: words k (radius) and k+1 (angle) give elements k and k+1, computed in float
// and rounded to T.
struct NormalFloat {
  template <class T>
  __device__ void operator()(const philox::Block& w, T* p, int count) const {
    for (int k = 0; k < count; k += 2) {
      const auto z = philox::box_muller(philox::uniform_float_open0(w.v[k]),
                                        philox::uniform_float(w.v[k + 1]));
      store(p + k, z.z0);
      if (k + 1 < count) store(p + k + 1, z.z1);
    }
  }
};
// float64: the block's four words give one pair of elements.
struct NormalDouble {
  __device__ void operator()(const philox::Block& w, double* p, int count) const {
    const auto z = philox::box_muller(philox::uniform_double_open0(w.v[0], w.v[1]),
                                      philox::uniform_double(w.v[2], w.v[3]));
    p[0] = z.z0;
    if (count > 1) p[1] = z.z1;
  }
};

void randn_op(std::span<const Tensor>, std::span<Tensor> out, const Attrs& a) {
  check_offset(a, "randn");
  visit<Kinds::Float>(out[0].dtype(), "randn", [&]<class T>() {
    if constexpr (std::is_same_v<T, double>)
      launch_blocks<T>("randn", out[0], 2, a, NormalDouble{});
    else
      launch_blocks<T>("randn", out[0], 4, a, NormalFloat{});
  });
}

// ---- randint ----

// Element k: the 64 bits of words 2k, 2k+1 reduced modulo the range, added to low in unsigned
// arithmetic (high - low may exceed INT64_MAX; low + x wraps back into range), then converted
// through the compute type as on the CPU.
struct UniformInt {
  uint64_t low, range;
  template <class T>
  __device__ void operator()(const philox::Block& w, T* p, int count) const {
    for (int k = 0; k < count; ++k) {
      const uint64_t x = philox::uniform_below(w.v[2 * k], w.v[2 * k + 1], range);
      store(p + k, compute_t<T>(int64_t(low + x)));
    }
  }
};

void randint_op(std::span<const Tensor>, std::span<Tensor> out, const Attrs& a) {
  check_offset(a, "randint");
  const uint64_t low = uint64_t(a.start);
  const uint64_t range = uint64_t(a.end) - low;
  visit<Kinds::Numeric>(out[0].dtype(), "randint", [&]<class T>() {
    launch_blocks<T>("randint", out[0], 2, a, UniformInt{low, range});
  });
}

// ---- bernoulli ----

// Element k: 1 where word k is below p * 2^32.
struct Bernoulli {
  uint64_t threshold;
  template <class T>
  __device__ void operator()(const philox::Block& w, T* p, int count) const {
    for (int k = 0; k < count; ++k)
      store(p + k, compute_t<T>(philox::bernoulli(w.v[k], threshold) ? 1 : 0));
  }
};

void bernoulli_op(std::span<const Tensor>, std::span<Tensor> out, const Attrs& a) {
  check_offset(a, "bernoulli");
  const uint64_t threshold = philox::bernoulli_threshold(a.value);
  visit<Kinds::All>(out[0].dtype(), "bernoulli", [&]<class T>() {
    launch_blocks<T>("bernoulli", out[0], 4, a, Bernoulli{threshold});
  });
}

// ---- rng_state ----

__global__ void rng_state_kernel(int64_t* p, uint64_t seed, uint64_t offset) {
  p[0] = int64_t(seed);
  p[1] = int64_t(offset);
}

void rng_state_op(std::span<const Tensor>, std::span<Tensor> out, const Attrs& a) {
  const int device = out[0].device().index;
  detail::use_device(device);
  rng_state_kernel<<<1, 1, 0, detail::stream(device)>>>(
      static_cast<int64_t*>(out[0].impl()->data()), a.seed, a.offset);
  detail::check(cudaGetLastError(), "rng_state");
}

// ---- dropout ----

bool aligned(const void* p, size_t bytes) {
  return reinterpret_cast<uintptr_t>(p) % bytes == 0;
}

// Block b of the draws covers elements 4b .. 4b + 3 of x and y (contiguous). With `rng` (an
// rng_state tensor's {seed, offset}), the draws start there instead of at seed and base.
// With `vectors` (x and y aligned to four elements), a block's four elements move as one load
// and one store.
template <class T>
__global__ void dropout_kernel(const T* x, T* y, int64_t n, uint64_t seed, uint64_t base,
                               uint64_t threshold, compute_t<T> scale, const int64_t* rng,
                               bool vectors) {
  if (rng) {
    seed = uint64_t(rng[0]);
    base = uint64_t(rng[1]) / 4;
  }
  const int64_t nblocks = (n + 3) / 4;
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t b = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; b < nblocks; b += step) {
    const philox::Block w = philox::block(seed, base + uint64_t(b));
    const int64_t first = 4 * b;
    const int count = int(n - first < 4 ? n - first : 4);
    if (count == 4 && vectors) {  // the four elements as one access each way
      const Pack<T, 4> in = *reinterpret_cast<const Pack<T, 4>*>(x + first);
      Pack<T, 4> out;
#pragma unroll
      for (int k = 0; k < 4; ++k)
        store(&out.v[k],
              load(&in.v[k]) * (philox::bernoulli(w.v[k], threshold) ? scale : compute_t<T>(0)));
      *reinterpret_cast<Pack<T, 4>*>(y + first) = out;
      continue;
    }
    for (int k = 0; k < count; ++k)
      store(y + first + k, load(x + first + k) *
                               (philox::bernoulli(w.v[k], threshold) ? scale : compute_t<T>(0)));
  }
}

// dropout, and dropout_rng (in[1] the rng_state tensor, read by the kernel on the device).
void dropout_op(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  const bool drawn = in.size() > 1;
  const char* op = drawn ? "dropout_rng" : "dropout";
  if (!drawn) check_offset(a, op);
  const Tensor x = in[0].contiguous();
  const Tensor rng = drawn ? in[1].contiguous() : Tensor();
  const int64_t n = out[0].numel();
  if (n == 0) return;
  const uint64_t threshold = philox::bernoulli_threshold(1 - a.value);
  const int device = out[0].device().index;
  detail::use_device(device);
  visit<Kinds::Float>(out[0].dtype(), op, [&]<class T>() {
    dropout_kernel<T><<<grid_for((n + 3) / 4), kThreads, 0, detail::stream(device)>>>(
        static_cast<const T*>(x.impl()->data()), static_cast<T*>(out[0].impl()->data()), n,
        a.seed, a.offset / 4, threshold, compute_t<T>(1 / (1 - a.value)),
        drawn ? static_cast<const int64_t*>(rng.impl()->data()) : nullptr,
        aligned(x.impl()->data(), 4 * sizeof(T)) && aligned(out[0].impl()->data(), 4 * sizeof(T)));
    detail::check(cudaGetLastError(), op);
  });
}

// ---- multinomial ----

// One row of weights, read through its strides.
template <class T>
struct WeightRows {
  const T* data;
  int64_t rows, cols, row_stride, col_stride;  // strides in elements

  __device__ double at(int64_t r, int64_t c) const {
    return double(load(data + r * row_stride + c * col_stride));
  }
};

struct Draws {
  uint64_t seed, base, row_blocks;  // row r's draws start at block base + r * row_blocks
  // The 53-bit uniform of draws 2k, 2k+1 of row r, in [0, 1) or (0, 1].
  __device__ void words(int64_t r, int64_t k, uint32_t& hi, uint32_t& lo) const {
    const philox::Block b = philox::block(seed, base + uint64_t(r) * row_blocks + uint64_t(k / 2));
    const int lane = int(k % 2) * 2;
    hi = b.v[lane];
    lo = b.v[lane + 1];
  }
};

// Block-wide selection of the smallest (key, column) among the keys not NaN (NaN marks a
// column that is out of the race or taken already). Every thread gets the winner's column, -1
// when none is left.
__device__ int64_t block_argmin(double key, int64_t col) {
  __shared__ double keys[32];
  __shared__ int64_t cols[32];
  __shared__ int64_t winner;
  auto better = [](double k1, int64_t c1, double k2, int64_t c2) {
    if (c2 < 0) return c1 >= 0;
    if (c1 < 0) return false;
    return k1 < k2 || (k1 == k2 && c1 < c2);
  };
  for (int s = 16; s > 0; s >>= 1) {
    const double k2 = __shfl_down_sync(0xffffffffu, key, s);
    const int64_t c2 = __shfl_down_sync(0xffffffffu, col, s);
    if (better(k2, c2, key, col)) {
      key = k2;
      col = c2;
    }
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) {
    keys[warp] = key;
    cols[warp] = col;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    const int warps = int((blockDim.x + 31) >> 5);
    for (int w = 1; w < warps; ++w)
      if (better(keys[w], cols[w], key, col)) {
        key = keys[w];
        col = cols[w];
      }
    winner = col;
  }
  __syncthreads();
  const int64_t c = winner;
  __syncthreads();  // `winner` is written again by the next call
  return c;
}

// A block a row (grid-stride). `scratch` holds `cols` doubles per block: the cumulative
// weights (with replacement) or the keys (without).
template <class T>
__global__ void multinomial_kernel(WeightRows<T> w, int64_t samples, bool flag, bool replacement,
                                   Draws draws, double* scratch, int64_t* out, Fault* slot) {
  __shared__ bool ok;
  __shared__ double total;
  __shared__ int64_t last_positive;
  double* buf = scratch + int64_t(blockIdx.x) * w.cols;
  for (int64_t r = blockIdx.x; r < w.rows; r += gridDim.x) {
    // One thread: the checks of the CPU's check_weights in its order, and the running sum in
    // the CPU's order (so the cumulative weights are its bits).
    if (threadIdx.x == 0) {
      bool good = true;
      int64_t positive = 0, last = 0;
      double sum = 0;
      for (int64_t c = 0; c < w.cols; ++c) {
        const double v = w.at(r, c);
        if (!(isfinite(v) && v >= 0)) {
          report_fault(slot, FaultKind::BadWeight, int32_t(OpId::multinomial), c, 0, r);
          good = false;
          break;
        }
        positive += v > 0;
        if (v > 0) last = c;
        sum += v;
        buf[c] = replacement ? sum : v;
      }
      if (good && positive == 0) {
        report_fault(slot, FaultKind::ZeroRow, int32_t(OpId::multinomial), 0, 0, r);
        good = false;
      }
      if (good && !flag && positive < samples) {
        report_fault(slot, FaultKind::TooFewCategories, int32_t(OpId::multinomial), positive,
                     samples, r);
        good = false;
      }
      ok = good;
      total = sum;
      last_positive = last;
    }
    __syncthreads();
    if (!ok) {
      __syncthreads();  // the shared values are rewritten for the next row
      continue;
    }
    int64_t* dst = out + r * samples;
    if (replacement) {
      // The first category whose cumulative weight exceeds the target (std::upper_bound);
      // zero weights never qualify because their cumulative weight equals the one before.
      for (int64_t j = threadIdx.x; j < samples; j += blockDim.x) {
        uint32_t hi, lo;
        draws.words(r, j, hi, lo);
        const double target = philox::uniform_double(hi, lo) * total;
        int64_t begin = 0, end = w.cols;
        while (begin < end) {
          const int64_t mid = begin + (end - begin) / 2;
          if (target < buf[mid]) end = mid;
          else begin = mid + 1;
        }
        dst[j] = begin < last_positive ? begin : last_positive;  // target == total by rounding
      }
    } else {
      // The exponential race: key -log(u) / w for every positive weight, NaN for the others.
      for (int64_t c = threadIdx.x; c < w.cols; c += blockDim.x) {
        const double v = buf[c];
        double key = NAN;
        if (v > 0) {
          uint32_t hi, lo;
          draws.words(r, c, hi, lo);
          key = -log(philox::uniform_double_open0(hi, lo)) / v;
        }
        buf[c] = key;
      }
      __syncthreads();
      // The smallest keys in increasing order, ties to the lower column.
      for (int64_t j = 0; j < samples; ++j) {
        double best = NAN;
        int64_t best_col = -1;
        for (int64_t c = threadIdx.x; c < w.cols; c += blockDim.x) {
          const double k = buf[c];
          if (k != k) continue;
          if (best_col < 0 || k < best) {  // columns rise, so an equal key keeps the lower one
            best = k;
            best_col = c;
          }
        }
        const int64_t win = block_argmin(best, best_col);
        if (threadIdx.x == 0) {
          dst[j] = win;
          if (win >= 0) buf[win] = NAN;
        }
        __syncthreads();
      }
    }
    __syncthreads();
  }
}

void multinomial_op(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& a) {
  check_offset(a, "multinomial");
  const Tensor& probs = in[0];
  const bool one_row = probs.dim() == 1;
  const int64_t rows = one_row ? 1 : probs.size(0), cols = probs.size(-1);
  const int64_t samples = a.end;
  if (rows == 0) return;
  // One sample is distributed alike either way, and the cumulative search is much cheaper
  // than a key per category.
  const bool replacement = a.flag || samples == 1;
  const int64_t per_row = (replacement ? samples : cols) * 2;
  const Draws draws{a.seed, a.offset / 4, uint64_t((per_row + 3) / 4)};
  const int device = probs.device().index;
  detail::use_device(device);
  // Scratch of `cols` doubles a block, at most about 64 MiB in all.
  const int64_t per_block_bytes = (cols > 0 ? cols : 1) * int64_t(sizeof(double));
  int64_t blocks = (int64_t(64) << 20) / per_block_bytes;
  if (blocks < 1) blocks = 1;
  if (blocks > rows) blocks = rows;
  if (blocks > 65535) blocks = 65535;
  const Tensor scratch = make_tensor({blocks * cols}, DType::Float64, probs.device());
  Fault* slot = detail::fault_slot(device);
  visit<Kinds::Float>(probs.dtype(), "multinomial", [&]<class T>() {
    const WeightRows<T> w{static_cast<const T*>(probs.impl()->data()), rows, cols,
                          one_row ? 0 : probs.stride(0), probs.stride(-1)};
    const int threads = cols >= 4096 || samples >= 4096 ? 256 : 128;
    multinomial_kernel<T><<<int(blocks), threads, 0, detail::stream(device)>>>(
        w, samples, a.flag, replacement, draws, static_cast<double*>(scratch.impl()->data()),
        static_cast<int64_t*>(out[0].impl()->data()), slot);
    detail::check(cudaGetLastError(), "multinomial");
  });
}

}  // namespace

void register_random(KernelTable& t) {
  t[OpId::rand] = rand_op;
  t[OpId::randn] = randn_op;
  t[OpId::randint] = randint_op;
  t[OpId::bernoulli] = bernoulli_op;
  t[OpId::rng_state] = rng_state_op;
  t[OpId::dropout_rng] = dropout_op;
  t[OpId::dropout] = dropout_op;
  t[OpId::multinomial] = multinomial_op;
}

}  // namespace ember::cuda
