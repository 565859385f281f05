// ember-bench: a registry of benchmark rows, each printing one JSON object per line:
// {"name", "device", "eager_ms", "compiled_ms", "speedup", ...extra fields}.
#pragma once
#include <chrono>
#include <cmath>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace ember::bench {

// One result line. Fields left NaN are printed as null.
struct Row {
  std::string name;
  std::string device = "cpu";  // where the row ran ("cpu", "cuda:0"), as the PyTorch rows say
  double eager_ms = NAN;
  double compiled_ms = NAN;
  std::vector<std::pair<std::string, double>> extra;  // e.g. {"gbps", 41.2}
  std::string note;

  Row() = default;
  Row(std::string n, double eager) : name(std::move(n)), eager_ms(eager) {}
};

struct Options {
  int repeat = 20;   // timed runs per measurement (the median is reported)
  bool quick = false;  // smaller sizes / fewer runs (smoke test)
  std::string filter;  // regex; empty selects everything
  // Whether a row of this name is selected; groups skip the work of unselected rows.
  bool wants(const std::string& row_name) const;
};

using BenchFn = std::function<std::vector<Row>(const Options&)>;
struct Registrar {
  Registrar(const char* group, BenchFn fn);
};
std::vector<std::pair<std::string, BenchFn>>& registry();

// `ember-bench --gpt-first-call NAME`: prints the seconds of the first compiled GPT forward
// (config "baby" or "384") in this process; the gpt rows run it to time a warm start.
int gpt_first_call_main(const std::string& config);
// `ember-bench --cuda-train-first-call NAME [--quick]`: prints the seconds of the first compiled
// bf16 training step of the GPU GPT shape NAME ("shakespeare_char" or "gpt2") in this process,
// after one eager step; the cuda/gpt_train_step rows run it to time a warm start. 2 without a GPU.
int cuda_train_first_call_main(const std::string& shape, bool quick);
// Runs this ember-bench again with `args` (a new process, the same environment) and reads the
// number it prints (the --*-first-call modes' seconds); -1 when the child fails.
double seconds_from_new_process(const std::string& args);

// memcpy split across the OpenMP threads, as the kernels are.
void parallel_memcpy(char* dst, const char* src, size_t n);
// GB/s of copying `bytes` (read + written), the better of a threaded and a plain memcpy.
double memcpy_gbps(size_t bytes, int repeat);

// Median wall time of fn() in milliseconds over `repeat` runs after `warmup` runs.
double time_ms(const std::function<void()>& fn, int repeat, int warmup = 2);

// Eager against compiled on a machine whose speed drifts: `rounds` rounds, each timing a then
// b (time_ms), and each side's best round median. Both sides see the same drift.
std::pair<double, double> time_pair_ms(const std::function<void()>& a,
                                       const std::function<void()>& b, int repeat,
                                       int rounds = 3);

}  // namespace ember::bench

#define EMBER_BENCH(group) \
  static std::vector<::ember::bench::Row> group##_bench(const ::ember::bench::Options&); \
  static ::ember::bench::Registrar group##_registrar(#group, &group##_bench);             \
  static std::vector<::ember::bench::Row> group##_bench(const ::ember::bench::Options& opt)
