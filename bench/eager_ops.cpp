// Eager engine rows: per-op overhead, memory-bound pointwise bandwidth against memcpy, and
// matmul against calling OpenBLAS directly.
#include <cblas.h>
#include <omp.h>

#include <cstring>

#include "bench.h"
#include "ember/ember.h"

namespace ember::bench {


EMBER_BENCH(eager) {
  std::vector<Row> rows;
  NoGradGuard no_grad;

  if (opt.wants("eager/add_1elem_overhead")) {
    Tensor a = ones({1}), b = ones({1});
    const int n = opt.quick ? 2000 : 200000;
    double ms = time_ms([&] {
      for (int i = 0; i < n; ++i) {
        Tensor c = a + b;
      }
    }, opt.quick ? 3 : 7);
    Row r{"eager/add_1elem_overhead", ms / n};
    r.extra.push_back({"us_per_op", ms / n * 1000});
    rows.push_back(r);
  }

  if (opt.wants("eager/add_f32_64M")) {
    const int64_t n = opt.quick ? (int64_t(1) << 22) : (int64_t(64) << 20);
    Tensor a = rand({n}), b = rand({n});
    double ms = time_ms([&] { Tensor c = a + b; }, opt.repeat);
    double bytes = 3.0 * double(n) * 4;  // two reads and one write
    // Reference: copying the same number of bytes moved (half read, half written).
    std::vector<char> src(size_t(bytes / 2), 1), dst(size_t(bytes / 2), 0);
    double copy_ms = time_ms([&] { parallel_memcpy(dst.data(), src.data(), src.size()); },
                             opt.repeat);
    double copy1_ms = time_ms([&] { std::memcpy(dst.data(), src.data(), src.size()); },
                              opt.repeat);
    copy_ms = std::min(copy_ms, copy1_ms);
    Row r{"eager/add_f32_64M", ms};
    double gbps = bytes / (ms * 1e6), copy_gbps = bytes / (copy_ms * 1e6);
    r.extra = {{"gbps", gbps}, {"memcpy_gbps", copy_gbps}, {"fraction_of_memcpy", gbps / copy_gbps}};
    rows.push_back(r);
  }

  if (opt.wants("eager/matmul_f32_1024")) {
    const int64_t m = opt.quick ? 256 : 1024;
    Tensor a = randn({m, m}), b = randn({m, m});
    double ms = time_ms([&] { Tensor c = matmul(a, b); }, opt.repeat);
    std::vector<float> c(size_t(m * m));
    const float* pa = a.data_ptr<float>();
    const float* pb = b.data_ptr<float>();
    double blas_ms = time_ms([&] {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(m), int(m), int(m), 1.0f, pa,
                  int(m), pb, int(m), 0.0f, c.data(), int(m));
    }, opt.repeat);
    double flops = 2.0 * double(m) * double(m) * double(m);
    Row r{"eager/matmul_f32_1024", ms};
    r.extra = {{"gflops", flops / (ms * 1e6)},
               {"sgemm_gflops", flops / (blas_ms * 1e6)},
               {"fraction_of_sgemm", blas_ms / ms}};
    rows.push_back(r);
  }
  return rows;
}

}  // namespace ember::bench
