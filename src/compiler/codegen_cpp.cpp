// Generating C++ for fusion groups: the translation unit that calls each group's emitter
// (pointwise kernels, gemm epilogues and row kernels: lowered to the kernel IR, lower.h, and
// rendered, render_cpp.h), horizontal batches and the shared prelude. The math is done by the fn:: functors
// the eager kernels call; fused float code may still round differently (FMA contraction, sum
// order).
#include "compiler/codegen_cpp.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <map>
#include <sstream>

#include "compiler/codegen_util.h"
#include "compiler/lower.h"
#include "compiler/render_cpp.h"
#include "compiler/toolchain.h"
#include "core/shape.h"
#include "graph/graph_util.h"
#include "kernels/cpu/loops.h"

namespace ember::compiler {

const char* c_type(DType t) {
  switch (t) {
    case DType::Float32:
      return "float";
    case DType::Float64:
      return "double";
    case DType::Int32:
      return "int32_t";
    case DType::Int64:
      return "int64_t";
    default:
      EMBER_FAIL("compiler: no C++ element type for ", dtype_name(t));
  }
}

const char* storage_type(DType t) {
  if (t == DType::Bool) return "uint8_t";  // loops over bytes vectorize, over bool they do not
  return is_16bit_float(t) ? "uint16_t" : c_type(t);
}

const char* compute_type(DType t) {
  if (t == DType::Bool) return "bool";
  return is_16bit_float(t) ? "float" : c_type(t);
}

std::string load_value(DType t, const std::string& element) {
  if (t == DType::Bool) return "(" + element + " != 0)";
  if (t == DType::Float16) return "ember::fn::half_to_float(" + element + ")";
  if (t == DType::BFloat16) return "ember::fn::bf16_to_float(" + element + ")";
  return element;
}

std::string store_value(DType t, const std::string& value) {
  if (t == DType::Bool) return "uint8_t(" + value + ")";
  if (t == DType::Float16) return "ember::fn::float_to_half(" + value + ")";
  if (t == DType::BFloat16) return "ember::fn::float_to_bf16(" + value + ")";
  return value;
}

std::string var(const graph::Value* v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "v%d", v->id);
  return buf;
}

RowIndex row_index(const graph::Value& v, const Shape& out) {
  RowIndex ri;
  const Shape& vs = v.meta.sizes;
  if (shape_numel(vs) == 1) return ri;
  if (vs == out && v.meta.strides == contiguous_strides(vs)) {  // the output's own layout
    ri.row = "r * " + sz(out.back());
    ri.col = "j";
    return ri;
  }
  const size_t nd = out.size(), lead = nd - vs.size();
  auto stride_at = [&](size_t d) -> int64_t {  // 0 where v broadcasts along out's dim d
    if (d < lead || vs[d - lead] == 1) return 0;
    return v.meta.strides[d - lead];
  };
  int64_t inner = 1;  // rows of the output per step of dim d
  for (size_t d = nd - 1; d-- > 0;) {
    const int64_t stride = stride_at(d);
    if (out[d] > 1 && stride != 0) {
      std::string coord = inner == 1 ? "r" : "(r / " + sz(inner) + ")";
      if (d > 0) coord = "(" + coord + " % " + sz(out[d]) + ")";
      std::string term = stride == 1 ? coord : coord + " * " + sz(stride);
      ri.row = ri.row.empty() ? term : term + " + " + ri.row;
    }
    inner *= out[d];
  }
  if (ri.row.empty()) ri.row = "0";
  const int64_t cs = out[nd - 1] > 1 ? stride_at(nd - 1) : 0;
  ri.col = cs == 0 ? "" : cs == 1 ? "j" : "j * " + sz(cs);
  return ri;
}

void check_reads_declared(const std::string& code, const std::string& kernel) {
  auto word_char = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; };
  auto value_name = [](const std::string& w) {  // v<digits>
    return w.size() > 1 && w[0] == 'v' &&
           std::all_of(w.begin() + 1, w.end(), [](char c) { return c >= '0' && c <= '9'; });
  };
  // A name declared by the generated code follows its type (or a pointer's qualifiers).
  static const char* const kDeclarators[] = {"float", "double", "int32_t", "int64_t",   "bool",
                                             "auto",  "*",      "&",       "__restrict"};
  std::vector<std::vector<std::string>> scopes(1);
  std::string prev;  // the token before the current one
  for (size_t i = 0; i < code.size();) {
    const char c = code[i];
    if (c == '/' && i + 1 < code.size() && code[i + 1] == '/') {  // a comment: to the line's end
      i = code.find('\n', i);
      if (i == std::string::npos) break;
      continue;
    }
    if (c == '#' && (i == 0 || code[i - 1] == '\n')) {  // a pragma line
      i = code.find('\n', i);
      if (i == std::string::npos) break;
      continue;
    }
    if (std::isspace(static_cast<unsigned char>(c))) {
      ++i;
      continue;
    }
    if (!word_char(c)) {
      if (c == '{') scopes.emplace_back();
      if (c == '}' && scopes.size() > 1) scopes.pop_back();
      prev = std::string(1, c);
      ++i;
      continue;
    }
    size_t j = i;
    while (j < code.size() &&
           (word_char(code[j]) || (std::isdigit(static_cast<unsigned char>(c)) && code[j] == '.')))
      ++j;
    const std::string w = code.substr(i, j - i);
    i = j;
    if (value_name(w)) {
      const bool declares =
          std::find_if(std::begin(kDeclarators), std::end(kDeclarators),
                       [&](const char* d) { return prev == d; }) != std::end(kDeclarators);
      bool known = false;
      for (const auto& scope : scopes)
        known |= std::find(scope.begin(), scope.end(), w) != scope.end();
      if (declares)
        scopes.back().push_back(w);
      else
        EMBER_CHECK(known, "compiler: ", kernel, " reads ", w,
                    " without loading or computing it (the fusion plan gave the kernel a value "
                    "its form does not provide; a compiler bug, please report it with the graph: "
                    "EMBER_LOGS=output_code prints the source)\n",
                    code);
    }
    prev = w;
  }
}

void emit_functor_line(std::ostringstream& os, const graph::Node& node, const char* T,
                       const std::string& indent) {
  os << indent << "const " << T << " " << var(node.outputs[0])
     << " = ember::fn::" << fused_op_info(node)->functor << "{}(";
  for (size_t a = 0; a < node.inputs.size(); ++a) os << (a ? ", " : "") << var(node.inputs[a]);
  os << ");\n";
}

void emit_elementwise(std::ostringstream& os, const FusionGroup& grp,
                      const std::vector<const graph::Node*>& nodes,
                      const std::vector<std::string>& idx, const char* T, const char* indent,
                      const graph::Value* also_read) {
  for (size_t j = 0; j < grp.inputs.size(); ++j) {
    if (idx[j].empty()) continue;
    bool read = grp.inputs[j] == also_read;
    for (const graph::Node* node : nodes)
      for (const graph::Value* v : node->inputs) read |= v == grp.inputs[j];
    if (read)
      os << indent << "const " << T << " " << var(grp.inputs[j]) << " = in" << j << "[" << idx[j]
         << "];\n";
  }
  for (const graph::Node* node : nodes) emit_functor_line(os, *node, T, indent);
}

std::vector<std::string> emit_row_bases(std::ostringstream& os, const FusionGroup& grp,
                                        const Shape& out, const char* indent,
                                        const std::vector<const graph::Value*>& skip) {
  std::vector<std::string> idx(grp.inputs.size());
  for (size_t k = 0; k < grp.inputs.size(); ++k) {
    if (std::find(skip.begin(), skip.end(), grp.inputs[k]) != skip.end()) continue;
    const RowIndex ri = row_index(*grp.inputs[k], out);
    if (ri.row.empty()) continue;  // one element: loaded once, outside the rows
    std::string base;
    if (ri.row != "0") {
      base = std::string("b").append(std::to_string(k));
      os << indent << "const int64_t " << base << " = " << ri.row << ";\n";
    }
    idx[k] = base.empty() ? (ri.col.empty() ? "0" : ri.col)
                          : (ri.col.empty() ? base : base + " + " + ri.col);
  }
  return idx;
}

namespace {

void emit_kernel_comment(std::ostringstream& os, size_t k, const FusionGroup& grp) {
  const graph::Value& out = *grp.output;
  os << "// " << kernel_name(k) << ": " << grp.nodes.size() << " node"
     << (grp.nodes.size() == 1 ? "" : "s") << " fused, output " << value_type_str(out) << "\n";
  if (grp.gemm)
    os << "// the epilogue of " << node_str(*grp.gemm)
       << ": run on rows [r0, r1) of its product, in place\n";
  for (const graph::Node* node : grp.nodes) os << "//   " << node_str(*node) << "\n";
}

void emit_kernel(std::ostringstream& os, size_t k, const FusionGroup& grp,
                 const kir::Kernel& kernel) {
  // Written from the kernel, not the group: a kernel over symbolic sizes shared by graphs at
  // several sizes is then the same text, and one library, for all of them.
  os << "// " << kernel_name(k) << ": " << kernel.comment.size() << " node"
     << (kernel.comment.size() == 1 ? "" : "s") << " fused, output "
     << kernel.buffers.back().about << "\n";
  if (kernel.epilogue) os << "// the epilogue of a matmul: run on rows [r0, r1) of its product, in place\n";
  for (const std::string& line : kernel.comment) os << "//   " << line << "\n";
  os << "extern \"C\" void " << kernel_name(k)
     << (grp.gemm ? "(void* const* args, int64_t r0, int64_t r1) {\n" : "(void* const* args) {\n");
  render_cpp_elementwise(os, kernel, 0, false, "  ");
  os << "}\n\n";
}

}  // namespace

std::string canonical_names(const std::string& text) {
  std::map<std::string, std::string> names;
  std::string out;
  for (size_t i = 0; i < text.size();) {
    const bool starts =
        text[i] == 'v' &&
        (i == 0 || !(std::isalnum(static_cast<unsigned char>(text[i - 1])) || text[i - 1] == '_'));
    size_t j = i + 1;
    while (starts && j < text.size() && std::isdigit(static_cast<unsigned char>(text[j]))) ++j;
    const bool ends =
        j == text.size() || !(std::isalnum(static_cast<unsigned char>(text[j])) || text[j] == '_');
    if (starts && j > i + 1 && ends) {
      auto [it, fresh] = names.emplace(text.substr(i, j - i), "");
      if (fresh) it->second = "t" + std::to_string(names.size() - 1);
      out += it->second;
      i = j;
    } else {
      out += text[i++];
    }
  }
  return out;
}

std::string replace_all(std::string text, const std::string& from, const std::string& to) {
  for (size_t at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size()))
    text.replace(at, from.size(), to);
  return text;
}

std::string indent(const std::string& text, const std::string& extra) {
  std::string r;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    end = end == std::string::npos ? text.size() : end + 1;
    if (text[start] != '#') r += extra;  // preprocessor lines stay in the first column
    r += text.substr(start, end - start);
    start = end;
  }
  return r;
}

std::string SharedCode::use(std::ostringstream& os, const std::string& text,
                            const std::string& prefix, const std::string& comment) {
  if (defer_) {
    deferred_text_ = text;
    deferred_prefix_ = prefix;
    return "@NS@";
  }
  auto [it, fresh] = names_.emplace(text, "");
  if (fresh) {
    it->second = prefix + std::to_string(names_.size() - 1);
    os << comment << replace_all(text, "@NS@", it->second);
  }
  return it->second;
}

std::string sz(int64_t v) { return std::string("\x01").append(std::to_string(v)).append("\x02"); }

std::string kernel_name(size_t k) {
  return "kernel_" + std::to_string(k);
}
std::string batch_name(size_t b) {
  return "batch_" + std::to_string(b);
}

size_t kernel_arg_count(const FusionGroup& grp) {
  size_t n = grp.inputs.size() + 1 + grp.extra_outputs.size();
  if (grp.attn_qk) n += 3;
  return n;
}

std::string generate_cpp(const FusionPlan& plan, const std::vector<KernelBatch>& batches,
                         const std::vector<kir::Kernel>* lowered) {
  auto kernel_of = [&](size_t k) {
    if (lowered) return (*lowered)[k];
    const FusionGroup& grp = plan.groups[k];
    if (is_pattern(grp)) return lower_pattern(grp, kernel_name(k));
    return grp.row ? lower_rows(grp, kernel_name(k)) : lower_elementwise(grp, kernel_name(k));
  };
  std::ostringstream os;
  os << "// Generated by ember's compiler: fused pointwise and row-wise kernels of one graph.\n"
     << generated_includes() << "\n"
     << "// Copies bytes to dst past the cache (streaming stores) when dst is aligned to and the\n"
     << "// size a multiple of the vector width (64 bytes with AVX-512, else 32); otherwise an\n"
     << "// ordinary copy. ember_fence orders the streaming stores before later stores.\n"
     << "[[maybe_unused]] static inline void ember_stream(void* dst, const void* src,\n"
     << "                                                std::size_t bytes) {\n"
     << "#if defined(__AVX512F__)\n"
     << "  if (reinterpret_cast<std::uintptr_t>(dst) % 64 == 0 && bytes % 64 == 0) {\n"
     << "    for (std::size_t i = 0; i < bytes; i += 64)\n"
     << "      _mm512_stream_si512(reinterpret_cast<__m512i*>(static_cast<char*>(dst) + i),\n"
     << "                          _mm512_loadu_si512(static_cast<const char*>(src) + i));\n"
     << "    return;\n"
     << "  }\n"
     << "#endif\n"
     << "#if defined(__AVX__)\n"
     << "  if (reinterpret_cast<std::uintptr_t>(dst) % 32 == 0 && bytes % 32 == 0) {\n"
     << "    for (std::size_t i = 0; i < bytes; i += 32)\n"
     << "      _mm256_stream_si256(reinterpret_cast<__m256i*>(static_cast<char*>(dst) + i),\n"
     << "                          _mm256_load_si256(reinterpret_cast<const __m256i*>(\n"
     << "                              static_cast<const char*>(src) + i)));\n"
     << "    return;\n"
     << "  }\n"
     << "#endif\n"
     << "  std::memcpy(dst, src, bytes);\n"
     << "}\n"
     << "[[maybe_unused]] static inline void ember_fence() {\n"
     << "#if defined(__AVX__)\n"
     << "  _mm_sfence();\n"
     << "#endif\n"
     << "}\n\n";
  for (const FusionGroup& g : plan.groups)
    if (g.attn_qk) {
      emit_attention_helpers(os);
      break;
    }
  // A kernel run in a batch is written only there (its comment stays): a batch whose layout
  // check fails runs its groups eagerly instead. Half the code for the compiler to build.
  std::vector<char> batched(plan.groups.size(), 0);
  for (const KernelBatch& b : batches)
    for (int k : b.kernels) batched[size_t(k)] = 1;
  SharedCode shared;
  for (size_t k = 0; k < plan.groups.size(); ++k) {
    std::ostringstream ks;  // the kernel, checked before it joins the source
    if (batched[k])
      emit_kernel_comment(ks, k, plan.groups[k]);
    else if (is_pattern(plan.groups[k]))
      render_cpp_pattern(ks, kernel_of(k), shared);
    else if (plan.groups[k].row)
      render_cpp_rows(ks, kernel_of(k));
    else
      emit_kernel(ks, k, plan.groups[k], kernel_of(k));
    check_reads_declared(ks.str(), kernel_name(k));
    os << ks.str();
  }
  // A batch calls each kernel's part as a function of its own arguments, and kernels that
  // differ only in their values' names (an optimizer's update of same-shaped parameters) share
  // one function: the compiler builds each distinct loop once.
  for (size_t b = 0; b < batches.size(); ++b) {
    const KernelBatch& batch = batches[b];
    std::vector<std::string> calls;
    for (size_t i = 0; i < batch.kernels.size(); ++i) {
      const size_t k = size_t(batch.kernels[i]);
      std::ostringstream body;
      render_cpp_elementwise(body, kernel_of(k), 0, true, "  ");
      check_reads_declared(body.str(), kernel_name(k) + " (in " + batch_name(b) + ")");
      calls.push_back(
          shared.use(os,
                     "static __attribute__((noinline)) void @NS@(void* const* args) {\n" +
                         canonical_names(body.str()) + "}\n\n",
                     "part_", "// a batch's part: " + kernel_name(k) + " and those like it\n"));
    }
    os << "// " << batch_name(b) << ": kernels " << batch.kernels.front() << " to "
       << batch.kernels.back()
       << (batch.parallel ? " in one parallel region (horizontal fusion)\n"
                          : " on the calling thread (too little work to share)\n")
       << "extern \"C\" void " << batch_name(b) << "(void* const* args) {\n"
       << (batch.parallel ? "#pragma omp parallel\n" : "") << "  {\n";
    size_t base = 0;
    for (size_t i = 0; i < batch.kernels.size(); ++i) {
      const size_t k = size_t(batch.kernels[i]);
      if (batch.parallel && batch.barrier_before[i]) os << "#pragma omp barrier\n";
      os << "    " << calls[i] << "(args + " << base << ");  // " << kernel_name(k) << "\n";
      base += kernel_arg_count(plan.groups[k]);
    }
    os << "  }\n}\n\n";
  }
  return os.str();
}

}  // namespace ember::compiler
