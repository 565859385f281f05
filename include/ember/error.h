// Errors: every failure is an ember::Error naming the op, the operands and what to do.
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>

namespace ember {

class Error : public std::runtime_error {
 public:
  // The exception every ember check throws; the message names the op, shapes, dtypes, the fix.
  explicit Error(const std::string& msg) : std::runtime_error(msg) {}
};

namespace detail {
template <class... Args>
std::string cat_str(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}
}  // namespace detail

}  // namespace ember

// EMBER_CHECK(cond, "op: ", shape, " must be ...") throws ember::Error with the message.
#define EMBER_CHECK(cond, ...)                                        \
  do {                                                                \
    if (!(cond)) throw ::ember::Error(::ember::detail::cat_str(__VA_ARGS__)); \
  } while (0)

#define EMBER_FAIL(...) throw ::ember::Error(::ember::detail::cat_str(__VA_ARGS__))
