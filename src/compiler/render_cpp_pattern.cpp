// Rendering a pattern kernel (kir::Pattern) as C++: its integers spelled back into its text,
// as literals where they are constants and as expressions over the size symbols where they
// are not (the symbols' values then follow the kernel's pointer arguments).
#include "compiler/codegen_util.h"
#include "compiler/render_cpp.h"

namespace ember::compiler {

namespace {

std::string symbol_name(int id) { return std::string("ember_s").append(std::to_string(id)); }

std::string spell(const std::string& text, const std::vector<kir::Index>& ints) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const size_t end = text[i] == '@' ? text.find('@', i + 1) : std::string::npos;
    if (end == std::string::npos || end == i + 1 ||
        text.find_first_not_of("0123456789", i + 1) != end) {  // not "@<digits>@" ("@NS@")
      out += text[i++];
      continue;
    }
    const kir::Index& e = ints[size_t(std::stoul(text.substr(i + 1, end - i - 1)))];
    out += e.is_constant() ? std::to_string(e.constant()) : "(" + e.str(symbol_name) + ")";
    i = end + 1;
  }
  return out;
}

}  // namespace

void render_cpp_pattern(std::ostringstream& os, const kir::Kernel& k, SharedCode& shared) {
  const kir::Pattern& p = *k.pattern;
  const std::vector<int> symbols = k.size_symbols();
  std::string text = spell(p.text, p.ints);
  if (!symbols.empty()) {
    // Over symbolic sizes the comments (which describe the first sizes seen) go; the sizes
    // are read first thing in the function.
    text = "// " + k.name + ": a pattern kernel over symbolic sizes\n" + kir::strip_comments(text);
    const std::string open = "(void* const* args) {\n";
    const size_t at = text.find(open);
    EMBER_CHECK(at != std::string::npos, "compiler: ", k.name, " has no kernel function");
    std::string decl = std::string("  const int64_t* __restrict ember_sizes = static_cast<const int64_t*>(args[")
                           .append(std::to_string(p.args))
                           .append("]);\n");
    for (int s : symbols)
      decl.append("  const int64_t ").append(symbol_name(s)).append(" = ember_sizes[")
          .append(std::to_string(s)).append("];\n");
    text.insert(at + open.size(), decl);
  }
  if (!p.shared.empty()) {
    std::string helpers = spell(p.shared, p.ints);
    if (!symbols.empty()) helpers = kir::strip_comments(helpers);
    text = replace_all(text, "@NS@", shared.use(os, helpers, p.shared_prefix));
  }
  os << text;
}

}  // namespace ember::compiler
