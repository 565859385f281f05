// Lowering a pattern group (attention forward and backward, layer_norm backward, column sums)
// to a kir::Pattern: its emitter's text with the marked integers (codegen_util.h, sz) lifted
// out in order of appearance.
#include "compiler/codegen_cpp.h"
#include "compiler/codegen_util.h"
#include "compiler/lower.h"

namespace ember::compiler {

namespace {

// `marked` with each "\x01<integer>\x02" replaced by "@i@", i counting on from ints.size();
// the integers appended to ints.
std::string lift(const std::string& marked, std::vector<kir::Index>& ints) {
  std::string out;
  out.reserve(marked.size());
  for (size_t i = 0; i < marked.size();) {
    if (marked[i] != '\x01') {
      out += marked[i++];
      continue;
    }
    const size_t end = marked.find('\x02', i);
    EMBER_CHECK(end != std::string::npos, "compiler: an unterminated size mark in a pattern kernel");
    out.append("@").append(std::to_string(ints.size())).append("@");
    ints.emplace_back(int64_t(std::stoll(marked.substr(i + 1, end - i - 1))));
    i = end + 1;
  }
  return out;
}

}  // namespace

bool is_pattern(const FusionGroup& grp) {
  return grp.col || grp.attn_bwd || grp.ln_bwd || grp.attn_qk;
}

kir::Kernel lower_pattern(const FusionGroup& grp, const std::string& name) {
  std::ostringstream os;
  SharedCode deferred{SharedCode::Defer{}};
  if (grp.col)
    emit_column_kernel(os, name, grp);
  else if (grp.attn_bwd)
    emit_attention_backward_kernel(os, name, grp, deferred);
  else if (grp.ln_bwd)
    emit_layer_norm_backward_kernel(os, name, grp);
  else if (grp.attn_qk)
    emit_attention_kernel(os, name, grp);
  else
    EMBER_FAIL("compiler: ", name, " is no pattern kernel");
  kir::Kernel k;
  k.name = name;
  kir::Pattern p;
  p.text = lift(os.str(), p.ints);
  p.shared = lift(deferred.deferred_text(), p.ints);
  p.shared_prefix = deferred.deferred_prefix();
  p.args = kernel_arg_count(grp);
  k.pattern = std::move(p);
  return k;
}

}  // namespace ember::compiler
