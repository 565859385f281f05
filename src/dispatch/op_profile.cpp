// The EMBER_PROFILE_OPS table (op_profile.h).
#include "dispatch/op_profile.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
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

// GPU ops whose events are recorded but not read yet.
struct Pending {
  std::pair<std::string, std::string> key;
  int start, end;  // event slots
};

constexpr size_t kFlushAt = 4096;

struct Table {
  std::mutex mu;
  std::map<std::pair<std::string, std::string>, Entry> rows;  // (op, device)
  std::vector<std::unique_ptr<cuda::Event>> events;
  std::vector<int> free_events;
  std::vector<Pending> pending;

  int take_event() {
    if (free_events.empty()) {
      events.push_back(std::make_unique<cuda::Event>());
      return int(events.size() - 1);
    }
    const int e = free_events.back();
    free_events.pop_back();
    return e;
  }
  // Reads every pending pair (waiting for the last) and returns their events to the pool.
  void flush() {
    for (const Pending& p : pending) {
      Entry& e = rows[p.key];
      ++e.calls;
      e.ms += events[size_t(p.start)]->elapsed_ms(*events[size_t(p.end)]);
      free_events.push_back(p.start);
      free_events.push_back(p.end);
    }
    pending.clear();
  }
  ~Table() {
    try {
      flush();
    } catch (...) {
      std::fprintf(stderr, "[ember op profile] the last %zu GPU timings could not be read\n",
                   pending.size());
    }
    if (!rows.empty()) print("");
    // The CUDA runtime may be gone at exit: the events are left to the driver to free.
    for (auto& e : events) static_cast<void>(e.release());
  }
  void print(const std::string& title) const {
    std::vector<std::pair<std::pair<std::string, std::string>, Entry>> v(rows.begin(), rows.end());
    std::sort(v.begin(), v.end(), [](auto& a, auto& b) { return a.second.ms > b.second.ms; });
    double total = 0;
    for (auto& [k, e] : v) total += e.ms;
    std::fprintf(stderr, "[ember op profile] %.3f ms in kernels%s%s, by op:\n", total,
                 title.empty() ? "" : " of ", title.c_str());
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

const char* setting() {
  static const char* v = std::getenv("EMBER_PROFILE_OPS");
  return v;
}

bool enabled() {
  static const bool on = [] {
    const char* v = setting();
    return v != nullptr && *v != '\0' && std::string(v) != "0";
  }();
  return on;
}

std::string row_key(OpId op, std::span<const Tensor> inputs) {
  static const bool shapes = enabled() && std::string(setting()) == "shapes";
  std::string key(op_name(op));
  if (!shapes) return key;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& t = inputs[i];
    key += i == 0 ? " " : ", ";
    key += t.defined() ? t.shape_str() + " " + std::string(dtype_name(t.dtype())) +
                             (t.is_contiguous() ? "" : " strided")
                       : "-";
  }
  return key;
}

void record(const std::string& key, Device device, double ms) {
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mu);
  Entry& e = t.rows[{key, device.str()}];
  ++e.calls;
  e.ms += ms;
}

GpuMark gpu_begin(Device device) {
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mu);
  GpuMark m{t.take_event()};
  t.events[size_t(m.slot)]->record(device.index);
  return m;
}

void gpu_end(GpuMark mark, const std::string& key, Device device) {
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mu);
  const int end = t.take_event();
  t.events[size_t(end)]->record(device.index);
  t.pending.push_back({{key, device.str()}, mark.slot, end});
  if (t.pending.size() >= kFlushAt) t.flush();
}

void gpu_cancel(GpuMark mark) {
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mu);
  t.free_events.push_back(mark.slot);
}

void restart() {
  if (!enabled()) return;
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mu);
  t.flush();
  t.rows.clear();
}

void print_now(const std::string& title) {
  if (!enabled()) return;
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mu);
  t.flush();
  t.print(title);
  t.rows.clear();
}

}  // namespace ember::op_profile
