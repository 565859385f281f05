// EMBER_LOGS for capture: which categories print as they happen (read once), and the lines;
// where graph breaks are reported (source positions).
#include <cstdio>
#include <mutex>

#include "capture/capture.h"
#include "core/logs.h"

namespace ember::capture {

namespace {
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
    case Log::Training:
      return "training";
    case Log::Dynamic:
      return "dynamic";
    case Log::CudaGraphs:
      return "cudagraphs";
  }
  return "?";
}
}  // namespace

bool log_enabled(Log what) {
  static const bool on[7] = {log_category_enabled("graph_breaks"),
                             log_category_enabled("recompiles"), log_category_enabled("guards"),
                             log_category_enabled("graph"),        log_category_enabled("training"),
                             log_category_enabled("dynamic"),      log_category_enabled("cudagraphs")};
  return on[int(what)];
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

namespace {
thread_local detail::SourcePositionScope::PositionFn tls_position = nullptr;
}  // namespace

std::string break_location(const ember::SourceLocation& loc) {
  if (tls_position) {
    std::string where = tls_position();
    if (!where.empty()) return where;
  }
  return loc_str(loc);
}

std::string loc_str(const ember::SourceLocation& loc) {
  if (loc.line() == 0 || !loc.file_name() || !*loc.file_name()) return "<unknown>";
  std::string f = loc.file_name();
  size_t slash = f.find_last_of('/');
  if (slash != std::string::npos) f = f.substr(slash + 1);
  return f + ":" + std::to_string(loc.line());
}

}  // namespace ember::capture

namespace ember::detail {

SourcePositionScope::SourcePositionScope(PositionFn fn) : prev_(capture::tls_position) {
  capture::tls_position = fn;
}
SourcePositionScope::~SourcePositionScope() {
  capture::tls_position = prev_;
}

}  // namespace ember::detail
