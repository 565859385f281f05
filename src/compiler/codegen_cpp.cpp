// Generating C++ for fusion groups: pointwise kernels (a flat loop over the output, or rows
// and columns when an input is broadcast; inputs indexed with their strides baked in; large
// outputs streamed), horizontal batches, the shared prelude, and the translation unit that
// calls each group's emitter (row kernels: codegen_rows.cpp). The math is done by the fn:: functors
// the eager kernels call; fused float code may still round differently (FMA contraction, sum
// order).
#include "compiler/codegen_cpp.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <map>
#include <sstream>

#include "compiler/codegen_util.h"
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

namespace {
bool is_16bit_float(DType t) { return t == DType::Float16 || t == DType::BFloat16; }
}  // namespace

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

std::string index_expr(const graph::Value& v, const Shape& out) {
  const Shape& vs = v.meta.sizes;
  if (shape_numel(vs) == 1) return "";
  if (vs == out && v.meta.strides == contiguous_strides(vs)) return "i";
  const size_t lead = out.size() - vs.size();
  std::string expr;
  int64_t inner = 1;  // elements of the output after dim d
  for (size_t k = out.size(); k-- > 0;) {
    const size_t d = k;
    const int64_t size = out[d];
    if (d >= lead && size > 1 && vs[d - lead] != 1 && v.meta.strides[d - lead] != 0) {
      std::string coord = inner == 1 ? "i" : "(i / " + std::to_string(inner) + ")";
      if (d > 0) coord = "(" + coord + " % " + std::to_string(size) + ")";
      const int64_t stride = v.meta.strides[d - lead];
      std::string term = stride == 1 ? coord : coord + " * " + std::to_string(stride);
      expr = expr.empty() ? term : term + " + " + expr;
    }
    inner *= size;
  }
  return expr.empty() ? "0" : expr;
}

RowIndex row_index(const graph::Value& v, const Shape& out) {
  RowIndex ri;
  const Shape& vs = v.meta.sizes;
  if (shape_numel(vs) == 1) return ri;
  if (vs == out && v.meta.strides == contiguous_strides(vs)) {  // the output's own layout
    ri.row = "r * " + std::to_string(out.back());
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
      std::string coord = inner == 1 ? "r" : "(r / " + std::to_string(inner) + ")";
      if (d > 0) coord = "(" + coord + " % " + std::to_string(out[d]) + ")";
      std::string term = stride == 1 ? coord : coord + " * " + std::to_string(stride);
      ri.row = ri.row.empty() ? term : term + " + " + ri.row;
    }
    inner *= out[d];
  }
  if (ri.row.empty()) ri.row = "0";
  const int64_t cs = out[nd - 1] > 1 ? stride_at(nd - 1) : 0;
  ri.col = cs == 0 ? "" : cs == 1 ? "j" : "j * " + std::to_string(cs);
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

// The body of a pointwise kernel, its arguments read from args[base ...]: pointers, one-element
// inputs loaded once, the loop. Inside a batch's parallel region (in_region) the loop is a
// worksharing loop without a barrier at its end. A gemm group's body is its epilogue: a plain
// loop over rows [r0, r1) that reads the gemm's product from the output where it stands.
void emit_pointwise_body(std::ostringstream& os, const FusionGroup& grp, size_t base,
                         bool in_region, const char* ind) {
  const bool epilogue = grp.gemm != nullptr;
  const graph::Value& out = *grp.output;
  // The output is stored as S and computed as T (16-bit floats: their bits, and float); each
  // input and node likewise in its own dtype's types (they differ only across casts).
  const DType dt = out.meta.dtype;
  const char* S = storage_type(dt);
  const char* T = compute_type(dt);
  auto load = [dt](const std::string& element) { return load_value(dt, element); };
  auto store = [dt](const std::string& value) { return store_value(dt, value); };
  // Input j's element at `index`, as its compute type, declared as the input's value.
  auto load_input = [&](size_t j, const std::string& index) {
    const DType t = grp.inputs[j]->meta.dtype;
    return std::string("const ") + compute_type(t) + " " + var(grp.inputs[j]) + " = " +
           load_value(t, "in" + std::to_string(j) + "[" + index + "]") + ";\n";
  };
  const int64_t n = shape_numel(out.meta.sizes);
  for (size_t j = 0; j < grp.inputs.size(); ++j) {
    const char* sj = storage_type(grp.inputs[j]->meta.dtype);
    os << ind << "const " << sj << "* __restrict in" << j << " = static_cast<const " << sj
       << "*>(args[" << base + j << "]);  // " << var(grp.inputs[j]) << " "
       << value_type_str(*grp.inputs[j]) << "\n";
  }
  os << ind << S << "* __restrict out = static_cast<" << S << "*>(args[" << base + grp.inputs.size()
     << "]);  // " << var(&out) << "\n";
  for (size_t j = 0; j < grp.inputs.size(); ++j)
    if (shape_numel(grp.inputs[j]->meta.sizes) == 1) os << ind << load_input(j, "0");
  auto emit_nodes = [&](const std::string& in) {
    for (const graph::Node* node : grp.nodes) {
      const DType nt = node->outputs[0]->meta.dtype;
      if (node->op == OpId::cast) {
        // As the eager cast: converted to the target's compute type, then (16-bit targets)
        // rounded to the target, which eager does by storing the result.
        const graph::Value& src = *node->inputs[0];
        const std::string converted =
            std::string(compute_type(nt)) + "(" + var(&src) + ")";
        os << in << "const " << compute_type(nt) << " " << var(node->outputs[0]) << " = "
           << load_value(nt, store_value(nt, converted)) << ";\n";
        continue;
      }
      if (node->op == OpId::slice_backward) {
        // The grad's column for output column j, or zero outside the slice (the load always
        // reads a valid element; the select discards it).
        const graph::Value& g = *node->inputs[0];
        const Attrs& a = node->attrs;
        const std::string o = var(node->outputs[0]);
        const char* T = compute_type(nt);  // the grad's and the result's (same dtype)
        auto load = [nt](const std::string& element) { return load_value(nt, element); };
        if (shape_numel(g.meta.sizes) == 0) {
          os << in << "const " << T << " " << o << " = " << T << "(0);\n";
          continue;
        }
        const size_t k =
            size_t(std::find(grp.inputs.begin(), grp.inputs.end(), &g) - grp.inputs.begin());
        // The grad is read at other columns than j: only a buffer, never a value computed here.
        EMBER_CHECK(k < grp.inputs.size(), "compiler: slice_backward's grad ", var(&g),
                    " is computed inside its kernel, which reads it at other columns");
        os << in << "const bool " << o << "_in = j >= " << a.start << " && j < " << a.end
           << (a.step > 1 ? " && (j - " + std::to_string(a.start) + ") % " +
                                std::to_string(a.step) + " == 0"
                          : std::string())
           << ";\n"
           << in << "const int64_t " << o << "_j = " << o << "_in ? (j - " << a.start << ")"
           << (a.step > 1 ? " / " + std::to_string(a.step) : std::string()) << " : 0;\n"
           << in << "const " << T << " " << o << " = " << o << "_in ? "
           << load("in" + std::to_string(k) + "[s" + std::to_string(k) + " + " + o + "_j * " +
                   std::to_string(g.meta.strides.back()) + "]")
           << " : " << T << "(0);\n";
        continue;
      }
      emit_functor_line(os, *node, compute_type(nt), in);
    }
  };
  if (epilogue || uses_row_loop(grp)) {
    // Rows of the last dim: each input's offset splits into a per-row base and a column term,
    // so broadcast inputs cost no division per element.
    const int64_t cols = out.meta.sizes.back(), rows = n / cols;
    if (epilogue) {
      os << ind << "constexpr int64_t cols = " << cols << ";\n"
         << ind << "for (int64_t r = r0; r < r1; ++r) {\n";
    } else {
      os << ind << "constexpr int64_t rows = " << rows << ", cols = " << cols << ";\n";
      if (in_region)
        os << "#pragma omp for schedule(static) nowait\n";
      else if (n >= cpu::kParallelGrain && rows > 1)
        os << "#pragma omp parallel for schedule(static)\n";
      os << ind << "for (int64_t r = 0; r < rows; ++r) {\n";
    }
    const std::string in1 = std::string(ind) + "  ", in2 = in1 + "  ";
    // Grads read by slice_backward nodes (at their own columns) and not element for element
    // by another node: no load at column j.
    std::vector<const graph::Value*> sliced, only_sliced;
    for (const graph::Node* node : grp.nodes)
      if (node->op == OpId::slice_backward &&
          std::find(sliced.begin(), sliced.end(), node->inputs[0]) == sliced.end())
        sliced.push_back(node->inputs[0]);
    for (const graph::Value* g : sliced) {
      bool direct = false;
      for (const graph::Node* node : grp.nodes)
        if (node->op != OpId::slice_backward)
          direct |= std::find(node->inputs.begin(), node->inputs.end(), g) != node->inputs.end();
      if (!direct) only_sliced.push_back(g);
    }
    const std::vector<std::string> bases =
        emit_row_bases(os, grp, out.meta.sizes, in1.c_str(), only_sliced);
    for (const graph::Value* g : sliced) {
      if (shape_numel(g->meta.sizes) == 0) continue;
      const size_t k =
          size_t(std::find(grp.inputs.begin(), grp.inputs.end(), g) - grp.inputs.begin());
      const RowIndex ri = row_index(*g, g->meta.sizes);  // g's rows are the output's rows
      os << in1 << "const int64_t s" << k << " = " << (ri.row.empty() ? "0" : ri.row) << ";\n";
    }
    os << in1 << S << "* __restrict orow = out + r * cols;\n"
       << "#pragma omp simd\n"
       << in1 << "for (int64_t j = 0; j < cols; ++j) {\n";
    if (epilogue)
      os << in2 << "const " << T << " " << var(grp.gemm->outputs[0]) << " = " << load("orow[j]")
         << ";\n";
    for (size_t j = 0; j < grp.inputs.size(); ++j)
      if (!bases[j].empty()) os << in2 << load_input(j, bases[j]);
    emit_nodes(in2);
    os << in2 << "orow[j] = " << store(var(&out)) << ";\n" << in1 << "}\n" << ind << "}\n";
    return;
  }
  os << ind << "constexpr int64_t n = " << n << ";\n";
  const int64_t esize = int64_t(dtype_size(out.meta.dtype));
  if (!in_region && n * esize >= cpu::kStreamBytes) {
    // A large output: chunks of 256 bytes computed in registers, then streamed out past the
    // cache, so the output's lines are not read from memory before being overwritten. One
    // fence per thread orders the streaming stores before the region's closing barrier.
    const int64_t chunk = 256 / esize;
    const std::string in1 = std::string(ind) + "  ", in2 = in1 + "  ", in3 = in2 + "  ";
    os << ind << "constexpr int64_t chunk = " << chunk << ";\n"
       << "#pragma omp parallel\n"
       << ind << "{\n"
       << "#pragma omp for schedule(static)\n"
       << in1 << "for (int64_t i0 = 0; i0 < n; i0 += chunk) {\n"
       << in2 << "alignas(64) " << S << " buf[chunk];\n"
       << in2 << "const int64_t cn = n - i0 < chunk ? n - i0 : chunk;\n"
       << "#pragma omp simd\n"
       << in2 << "for (int64_t l = 0; l < cn; ++l) {\n"
       << in3 << "const int64_t i = i0 + l;\n";
    for (size_t j = 0; j < grp.inputs.size(); ++j)
      if (shape_numel(grp.inputs[j]->meta.sizes) != 1)
        os << in3 << load_input(j, index_expr(*grp.inputs[j], out.meta.sizes));
    emit_nodes(in3);
    os << in3 << "buf[l] = " << store(var(&out)) << ";\n"
       << in2 << "}\n"
       << in2 << "ember_stream(out + i0, buf, sizeof(" << S << ") * cn);\n"
       << in1 << "}\n"
       << in1 << "ember_fence();\n"
       << ind << "}\n";
    return;
  }
  if (in_region)
    os << "#pragma omp for simd schedule(static) nowait\n";
  else
    os << (n >= cpu::kParallelGrain ? "#pragma omp parallel for simd\n" : "#pragma omp simd\n");
  os << ind << "for (int64_t i = 0; i < n; ++i) {\n";
  const std::string inner = std::string(ind) + "  ";
  for (size_t j = 0; j < grp.inputs.size(); ++j)
    if (shape_numel(grp.inputs[j]->meta.sizes) != 1)
      os << inner << load_input(j, index_expr(*grp.inputs[j], out.meta.sizes));
  emit_nodes(inner);
  os << inner << "out[i] = " << store(var(&out)) << ";\n" << ind << "}\n";
}

void emit_kernel_comment(std::ostringstream& os, size_t k, const FusionGroup& grp) {
  const graph::Value& out = *grp.output;
  os << "// " << kernel_name(k) << ": " << grp.nodes.size() << " node"
     << (grp.nodes.size() == 1 ? "" : "s") << " fused, output " << value_type_str(out) << "\n";
  if (grp.gemm)
    os << "// the epilogue of " << node_str(*grp.gemm)
       << ": run on rows [r0, r1) of its product, in place\n";
  for (const graph::Node* node : grp.nodes) os << "//   " << node_str(*node) << "\n";
}

void emit_kernel(std::ostringstream& os, size_t k, const FusionGroup& grp) {
  emit_kernel_comment(os, k, grp);
  os << "extern \"C\" void " << kernel_name(k)
     << (grp.gemm ? "(void* const* args, int64_t r0, int64_t r1) {\n" : "(void* const* args) {\n");
  emit_pointwise_body(os, grp, 0, false, "  ");
  os << "}\n\n";
}

// `text` with each value name (v<id>) renamed t0, t1, ... in order of first appearance: the
// same loop over other values reads the same.
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

}  // namespace

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
  auto [it, fresh] = names_.emplace(text, "");
  if (fresh) {
    it->second = prefix + std::to_string(names_.size() - 1);
    os << comment << replace_all(text, "@NS@", it->second);
  }
  return it->second;
}

std::string kernel_name(size_t k) {
  return "kernel_" + std::to_string(k);
}
std::string batch_name(size_t b) {
  return "batch_" + std::to_string(b);
}

bool uses_row_loop(const FusionGroup& grp) {
  const Shape& out = grp.output->meta.sizes;
  if (!grp.elementwise()) return false;
  for (const graph::Node* n : grp.nodes)
    if (n->op == OpId::slice_backward) return true;  // its select needs the column
  if (out.size() < 2 || out.back() < 16) return false;
  for (const graph::Value* v : grp.inputs) {
    const std::string e = index_expr(*v, out);
    if (!e.empty() && e != "i") return true;  // an index needing division
  }
  return false;
}

size_t kernel_arg_count(const FusionGroup& grp) {
  size_t n = grp.inputs.size() + 1 + grp.extra_outputs.size();
  if (grp.attn_qk) n += 3;
  return n;
}

std::string generate_cpp(const FusionPlan& plan, const std::vector<KernelBatch>& batches) {
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
    else if (plan.groups[k].col)
      emit_column_kernel(ks, kernel_name(k), plan.groups[k]);
    else if (plan.groups[k].attn_bwd)
      emit_attention_backward_kernel(ks, kernel_name(k), plan.groups[k], shared);
    else if (plan.groups[k].ln_bwd)
      emit_layer_norm_backward_kernel(ks, kernel_name(k), plan.groups[k]);
    else if (plan.groups[k].attn_qk)
      emit_attention_kernel(ks, kernel_name(k), plan.groups[k]);
    else if (plan.groups[k].row)
      emit_row_kernel(ks, kernel_name(k), plan.groups[k]);
    else
      emit_kernel(ks, k, plan.groups[k]);
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
      emit_pointwise_body(body, plan.groups[k], 0, true, "  ");
      check_reads_declared(body.str(), kernel_name(k) + " (in " + batch_name(b) + ")");
      calls.push_back(
          shared.use(os,
                     "static __attribute__((noinline)) void @NS@(void* const* args) {\n" +
                         canonical_names(body.str()) + "}\n\n",
                     "part_", "// a batch's part: " + kernel_name(k) + " and those like it\n"));
    }
    os << "// " << batch_name(b) << ": kernels " << batch.kernels.front() << " to "
       << batch.kernels.back() << " in one parallel region (horizontal fusion)\n"
       << "extern \"C\" void " << batch_name(b) << "(void* const* args) {\n"
       << "#pragma omp parallel\n  {\n";
    size_t base = 0;
    for (size_t i = 0; i < batch.kernels.size(); ++i) {
      const size_t k = size_t(batch.kernels[i]);
      if (batch.barrier_before[i]) os << "#pragma omp barrier\n";
      os << "    " << calls[i] << "(args + " << base << ");  // " << kernel_name(k) << "\n";
      base += kernel_arg_count(plan.groups[k]);
    }
    os << "  }\n}\n\n";
  }
  return os.str();
}

}  // namespace ember::compiler
