// ember::SourceLocation: std::source_location where the standard library provides it, and an
// equivalent built on __builtin_FILE/__builtin_LINE where it does not (clang 14 with
// libstdc++ 12, which the fuzzing build uses).
#pragma once
#include <cstdint>
#include <version>

#if defined(__cpp_lib_source_location)
#include <source_location>
namespace ember {
using SourceLocation = std::source_location;
}
#else
namespace ember {
class SourceLocation {
 public:
  constexpr SourceLocation() noexcept = default;
  // The caller's file, function and line (a default argument evaluates it at the call site).
  static constexpr SourceLocation current(const char* file = __builtin_FILE(),
                                          const char* function = __builtin_FUNCTION(),
                                          uint_least32_t line = __builtin_LINE()) noexcept {
    SourceLocation s;
    s.file_ = file;
    s.function_ = function;
    s.line_ = line;
    return s;
  }
  // The file, function, line of the call site; the column is not known (0).
  constexpr const char* file_name() const noexcept { return file_; }
  constexpr const char* function_name() const noexcept { return function_; }
  constexpr uint_least32_t line() const noexcept { return line_; }
  constexpr uint_least32_t column() const noexcept { return 0; }

 private:
  const char* file_ = "";
  const char* function_ = "";
  uint_least32_t line_ = 0;
};
}  // namespace ember
#endif
