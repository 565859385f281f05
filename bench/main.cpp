// ember-bench driver: runs the registered groups, prints JSON lines, --filter selects rows.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <omp.h>
#include <unistd.h>
#include <iostream>
#include <regex>
#include <string>

#include "bench.h"

namespace ember::bench {

std::vector<std::pair<std::string, BenchFn>>& registry() {
  static std::vector<std::pair<std::string, BenchFn>> r;
  return r;
}
Registrar::Registrar(const char* group, BenchFn fn) { registry().emplace_back(group, std::move(fn)); }

double seconds_from_new_process(const std::string& args) {
  char exe[4096];
  const ssize_t n = ::readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0) return -1;
  exe[n] = 0;
  FILE* p = ::popen((std::string("'") + exe + "' " + args).c_str(), "r");
  if (!p) return -1;
  double secs = -1;
  if (std::fscanf(p, "%lf", &secs) != 1) secs = -1;
  return ::pclose(p) == 0 ? secs : -1;
}

double time_ms(const std::function<void()>& fn, int repeat, int warmup) {
  for (int i = 0; i < warmup; ++i) fn();
  std::vector<double> t;
  for (int i = 0; i < repeat; ++i) {
    auto a = std::chrono::steady_clock::now();
    fn();
    auto b = std::chrono::steady_clock::now();
    t.push_back(std::chrono::duration<double, std::milli>(b - a).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

std::pair<double, double> time_pair_ms(const std::function<void()>& a,
                                       const std::function<void()>& b, int repeat, int rounds) {
  double ta = 0, tb = 0;
  for (int r = 0; r < rounds; ++r) {
    const double ra = time_ms(a, repeat), rb = time_ms(b, repeat);
    ta = r == 0 ? ra : std::min(ta, ra);
    tb = r == 0 ? rb : std::min(tb, rb);
  }
  return {ta, tb};
}

void parallel_memcpy(char* dst, const char* src, size_t n) {
#pragma omp parallel
  {
    int nt = omp_get_num_threads(), t = omp_get_thread_num();
    size_t chunk = (n + size_t(nt) - 1) / size_t(nt);
    size_t b = std::min(n, size_t(t) * chunk), e = std::min(n, b + chunk);
    if (e > b) std::memcpy(dst + b, src + b, e - b);
  }
}

double memcpy_gbps(size_t bytes, int repeat) {
  std::vector<char> src(bytes, 1), dst(bytes, 0);
  double ms = time_ms([&] { parallel_memcpy(dst.data(), src.data(), bytes); }, repeat);
  ms = std::min(ms, time_ms([&] { std::memcpy(dst.data(), src.data(), bytes); }, repeat));
  return 2.0 * double(bytes) / (ms * 1e6);
}

bool Options::wants(const std::string& row_name) const {
  return filter.empty() || std::regex_search(row_name, std::regex(filter));
}

namespace {
std::string num(double v) {
  if (std::isnan(v)) return "null";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}
std::string escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '"' || c == '\\') o += '\\';
    o += c;
  }
  return o;
}
void print(const Row& r) {
  double speedup = r.eager_ms / r.compiled_ms;
  std::cout << "{\"name\": \"" << escape(r.name) << "\", \"device\": \"" << escape(r.device)
            << "\", \"eager_ms\": " << num(r.eager_ms)
            << ", \"compiled_ms\": " << num(r.compiled_ms) << ", \"speedup\": " << num(speedup);
  for (auto& [k, v] : r.extra) std::cout << ", \"" << escape(k) << "\": " << num(v);
  if (!r.note.empty()) std::cout << ", \"note\": \"" << escape(r.note) << "\"";
  std::cout << "}" << std::endl;
}
}  // namespace

}  // namespace ember::bench

int main(int argc, char** argv) {
  using namespace ember::bench;
  std::string filter;
  Options opt;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--filter" && i + 1 < argc) {
      filter = argv[++i];
    } else if (a.rfind("--filter=", 0) == 0) {
      filter = a.substr(9);
    } else if (a == "--repeat" && i + 1 < argc) {
      opt.repeat = std::max(1, std::atoi(argv[++i]));
    } else if (a == "--gpt-first-call" && i + 1 < argc) {
      return gpt_first_call_main(argv[++i]);
    } else if (a == "--cuda-train-first-call" && i + 1 < argc) {
      bool quick = false;
      for (int j = 1; j < argc; ++j) quick |= std::string(argv[j]) == "--quick";
      return cuda_train_first_call_main(argv[i + 1], quick);
    } else if (a == "--quick") {
      opt.quick = true;
      opt.repeat = 3;
    } else if (a == "--list") {
      for (auto& [g, f] : registry()) std::cout << g << "\n";
      return 0;
    } else if (a == "--help" || a == "-h") {
      std::cout << "usage: ember-bench [--filter REGEX] [--repeat N] [--quick] [--list]\n"
                   "Prints one JSON object per line: {name, device, eager_ms, compiled_ms, speedup, ...}.\n"
                   "--filter selects groups or rows whose name matches REGEX.\n";
      return 0;
    } else {
      std::cerr << "ember-bench: unknown argument '" << a << "' (see --help)\n";
      return 2;
    }
  }
  try {
    std::regex check(filter);
  } catch (const std::regex_error&) {
    std::cerr << "ember-bench: --filter '" << filter << "' is not a valid regular expression\n";
    return 2;
  }
  opt.filter = filter;
  int printed = 0;
  for (auto& [group, fn] : registry()) {
    for (const Row& r : fn(opt)) {
      if (!opt.wants(r.name)) continue;
      print(r);
      ++printed;
    }
  }
  if (printed == 0) {
    std::cerr << "ember-bench: no rows match '" << filter << "'\n";
    return 1;
  }
}
