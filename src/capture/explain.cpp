// explain(): the text report of what a compiled function captured.
#include <ostream>
#include <sstream>

#include "capture/capture.h"

namespace ember {

int64_t ExplainReport::total_ops() const {
  int64_t n = 0;
  for (int64_t k : ops_per_graph) n += k;
  return n;
}

std::string ExplainReport::str() const {
  std::ostringstream os;
  os << "explain " << name << ": " << graph_count << (graph_count == 1 ? " graph, " : " graphs, ")
     << breaks.size() << (breaks.size() == 1 ? " graph break, " : " graph breaks, ") << total_ops()
     << " ops\n";
  for (size_t i = 0; i < ops_per_graph.size(); ++i)
    os << "  graph " << i << ": " << ops_per_graph[i] << " ops\n";
  if (!breaks.empty()) {
    os << "graph breaks:\n";
    for (size_t i = 0; i < breaks.size(); ++i) {
      const GraphBreakInfo& b = breaks[i];
      os << "  " << i + 1 << ". " << b.location << ": " << b.reason << " [" << b.op << "]\n"
         << "     hint: " << b.hint << "\n";
    }
  }
  if (!guards.empty()) {
    os << "guards:\n";
    for (const std::string& g : guards) os << "  - " << g << "\n";
  }
  if (!recompile_reasons.empty()) {
    os << "recompiles:\n";
    for (const std::string& r : recompile_reasons) os << "  - " << r << "\n";
  }
  return os.str();
}

std::ostream& operator<<(std::ostream& os, const ExplainReport& r) {
  return os << r.str();
}

}  // namespace ember
