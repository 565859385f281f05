// The EMBER_PROFILE_OPS table (op_profile.h).
#include "dispatch/op_profile.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "ember/cuda.h"

namespace ember::op_profile {

namespace {

struct Entry {
  int64_t calls = 0;
  double ms = 0;
};

struct Table {
  std::mutex mu;
  std::map<std::pair<std::string, std::string>, Entry> rows;  // (op, device)
  ~Table() {
    std::vector<std::pair<std::pair<std::string, std::string>, Entry>> v(rows.begin(), rows.end());
    std::sort(v.begin(), v.end(), [](auto& a, auto& b) { return a.second.ms > b.second.ms; });
    double total = 0;
    for (auto& [k, e] : v) total += e.ms;
    std::fprintf(stderr, "[ember op profile] %.3f ms in kernels, by op:\n", total);
    std::fprintf(stderr, "  %-22s %-8s %10s %12s %9s %6s\n", "op", "device", "calls", "total ms",
                 "us/call", "share");
    for (auto& [k, e] : v)
      std::fprintf(stderr, "  %-22s %-8s %10lld %12.3f %9.2f %5.1f%%\n", k.first.c_str(),
                   k.second.c_str(), (long long)e.calls, e.ms, 1000 * e.ms / double(e.calls),
                   total > 0 ? 100 * e.ms / total : 0.0);
  }
};

Table& table() {
  static Table t;  // printed by its destructor at exit
  return t;
}

}  // namespace

bool enabled() {
  static const bool on = [] {
    const char* v = std::getenv("EMBER_PROFILE_OPS");
    return v != nullptr && *v != '\0' && std::string(v) != "0";
  }();
  return on;
}

void record(OpId op, Device device, double ms) {
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mu);
  Entry& e = t.rows[{std::string(op_name(op)), device.str()}];
  ++e.calls;
  e.ms += ms;
}

void drain(Device device) {
  if (device.type == DeviceType::CUDA) cuda::synchronize(device.index);
}

}  // namespace ember::op_profile
