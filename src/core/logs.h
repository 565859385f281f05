// EMBER_LOGS: a comma-separated list of log categories ("graph_breaks,recompiles,output_code",
// "all"; a leading "+" is accepted as in TORCH_LOGS), read once per process.
#pragma once
#include <string_view>

namespace ember {

// Whether `category` was named in EMBER_LOGS (or "all" was).
bool log_category_enabled(std::string_view category);

}  // namespace ember
