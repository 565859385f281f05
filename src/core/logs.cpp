// EMBER_LOGS parsing.
#include "core/logs.h"

#include <cstdlib>
#include <set>
#include <sstream>
#include <string>

namespace ember {

namespace {
struct LogCategories {
  std::set<std::string, std::less<>> names;
  bool all = false;
  LogCategories() {
    const char* env = std::getenv("EMBER_LOGS");
    if (!env) return;
    std::stringstream ss(env);
    std::string item;
    while (std::getline(ss, item, ',')) {
      if (!item.empty() && item[0] == '+') item.erase(0, 1);
      if (item == "all") all = true;
      names.insert(item);
    }
  }
};
}  // namespace

bool log_category_enabled(std::string_view category) {
  static const LogCategories c;
  return c.all || c.names.count(category) > 0;
}

}  // namespace ember
