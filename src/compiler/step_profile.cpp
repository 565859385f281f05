// The EMBER_PROFILE table: per-step totals keyed by description, printed at exit.
#include "compiler/step_profile.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace ember::compiler {

namespace {

struct Entry {
  double ms = 0;
  long calls = 0;
};

struct Profile {
  std::mutex mu;
  std::map<std::string, Entry> totals;  // by step description

  std::string table() {
    std::lock_guard<std::mutex> lock(mu);
    if (totals.empty()) return "";
    std::vector<std::pair<std::string, Entry>> rows(totals.begin(), totals.end());
    std::sort(rows.begin(), rows.end(),
              [](const auto& a, const auto& b) { return a.second.ms > b.second.ms; });
    double all = 0;
    for (const auto& r : rows) all += r.second.ms;
    std::string out;
    char line[512];
    std::snprintf(line, sizeof line, "ember profile (EMBER_PROFILE): %.3f ms in compiled graphs\n",
                  all);
    out += line;
    std::snprintf(line, sizeof line, "%12s %7s %9s %10s  %s\n", "total ms", "share", "calls",
                  "us/call", "step");
    out += line;
    for (const auto& [name, e] : rows) {
      std::snprintf(line, sizeof line, "%12.3f %6.1f%% %9ld %10.2f  ", e.ms,
                    all > 0 ? 100 * e.ms / all : 0.0, e.calls, 1000 * e.ms / double(e.calls));
      out += line + name + "\n";
    }
    return out;
  }
};

Profile& profile() {
  static Profile* p = new Profile;  // printed by an atexit handler; never destroyed, so that
                                    // graphs freed during exit can still record
  return *p;
}

std::atomic<int> g_override{-1};  // -1: follow EMBER_PROFILE

}  // namespace

bool step_profile_enabled() {
  static const bool from_env = [] {
    const char* v = std::getenv("EMBER_PROFILE");
    const bool enabled = v && *v && std::string(v) != "0";
    if (enabled)
      std::atexit([] {
        const std::string t = profile().table();
        std::fputs(t.c_str(), stderr);
      });
    return enabled;
  }();
  const int o = g_override.load(std::memory_order_relaxed);
  return o < 0 ? from_env : o == 1;
}

void set_step_profile(bool on) { g_override = on ? 1 : 0; }

std::string step_profile_table() { return profile().table(); }

void reset_step_profile() {
  Profile& p = profile();
  std::lock_guard<std::mutex> lock(p.mu);
  p.totals.clear();
}

void record_step(const std::string& name, double ms) {
  Profile& p = profile();
  std::lock_guard<std::mutex> lock(p.mu);
  Entry& e = p.totals[name];
  e.ms += ms;
  ++e.calls;
}

}  // namespace ember::compiler
