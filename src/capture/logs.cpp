// EMBER_LOGS for capture: which categories print as they happen (read once), and the lines.
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <sstream>

#include "capture/capture.h"

namespace ember::capture {

namespace {
struct LogConfig {
  bool on[4] = {false, false, false, false};
  LogConfig() {
    const char* env = std::getenv("EMBER_LOGS");
    if (!env) return;
    std::stringstream ss(env);
    std::string item;
    while (std::getline(ss, item, ',')) {
      // "+graph_breaks" is accepted too, as in TORCH_LOGS.
      if (!item.empty() && item[0] == '+') item.erase(0, 1);
      if (item == "graph_breaks") on[0] = true;
      if (item == "recompiles") on[1] = true;
      if (item == "guards") on[2] = true;
      if (item == "graph") on[3] = true;
      if (item == "all") on[0] = on[1] = on[2] = on[3] = true;
    }
  }
};
const LogConfig& config() {
  static const LogConfig c;
  return c;
}
std::mutex& out_mutex() {
  static std::mutex m;
  return m;
}
const char* tag(Log what) {
  switch (what) {
    case Log::GraphBreaks:
      return "graph_breaks";
    case Log::Recompiles:
      return "recompiles";
    case Log::Guards:
      return "guards";
    case Log::Graph:
      return "graph";
  }
  return "?";
}
}  // namespace

bool log_enabled(Log what) {
  return config().on[int(what)];
}

void log_line(Log what, const std::string& text) {
  if (!log_enabled(what)) return;
  std::lock_guard<std::mutex> g(out_mutex());
  std::fprintf(stderr, "[ember:%s] %s\n", tag(what), text.c_str());
}

void warn(const std::string& text) {
  std::lock_guard<std::mutex> g(out_mutex());
  std::fprintf(stderr, "ember::compile warning: %s\n", text.c_str());
}

std::string loc_str(const std::source_location& loc) {
  if (loc.line() == 0 || !loc.file_name() || !*loc.file_name()) return "<unknown>";
  std::string f = loc.file_name();
  size_t slash = f.find_last_of('/');
  if (slash != std::string::npos) f = f.substr(slash + 1);
  return f + ":" + std::to_string(loc.line());
}

}  // namespace ember::capture
