// Generating C++ for fusion groups: pointwise kernels (a flat loop over the output, or rows
// and columns when an input is broadcast; inputs indexed with their strides baked in; large
// outputs streamed), row kernels (one task per row, the passes of the op's decomposition),
// horizontal batches, and the shared prelude. The math is done by the fn:: functors the eager
// kernels call; fused float code may still round differently (FMA contraction, sum order).
#include "compiler/codegen_cpp.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <map>
#include <sstream>

#include "compiler/codegen_util.h"
#include "compiler/decompositions.h"
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

// Row kernels with large outputs build each row in a stack buffer of the thread (up to this
// size) and stream it out, and fetch input rows ahead when a row is at most kPrefetchRowBytes:
// the rows being computed, their buffers and the row fetched then (nearly) share L1 (48 KiB on
// the machines measured in docs/bench.md), with L2 behind it.
constexpr int64_t kRowBufferBytes = int64_t(64) << 10;
constexpr int64_t kPrefetchRowBytes = int64_t(16) << 10;

// The body of a pointwise kernel, its arguments read from args[base ...]: pointers, one-element
// inputs loaded once, the loop. Inside a batch's parallel region (in_region) the loop is a
// worksharing loop without a barrier at its end. A gemm group's body is its epilogue: a plain
// loop over rows [r0, r1) that reads the gemm's product from the output where it stands.
void emit_pointwise_body(std::ostringstream& os, const FusionGroup& grp, size_t base,
                         bool in_region, const char* ind) {
  const bool epilogue = grp.gemm != nullptr;
  const graph::Value& out = *grp.output;
  const char* T = c_type(out.meta.dtype);
  const int64_t n = shape_numel(out.meta.sizes);
  for (size_t j = 0; j < grp.inputs.size(); ++j)
    os << ind << "const " << T << "* __restrict in" << j << " = static_cast<const " << T
       << "*>(args[" << base + j << "]);  // " << var(grp.inputs[j]) << " "
       << value_type_str(*grp.inputs[j]) << "\n";
  os << ind << T << "* __restrict out = static_cast<" << T << "*>(args[" << base + grp.inputs.size()
     << "]);  // " << var(&out) << "\n";
  for (size_t j = 0; j < grp.inputs.size(); ++j)
    if (shape_numel(grp.inputs[j]->meta.sizes) == 1)
      os << ind << "const " << T << " " << var(grp.inputs[j]) << " = in" << j << "[0];\n";
  auto emit_nodes = [&](const std::string& in) {
    for (const graph::Node* node : grp.nodes) {
      if (node->op == OpId::slice_backward) {
        // The grad's column for output column j, or zero outside the slice (the load always
        // reads a valid element; the select discards it).
        const graph::Value& g = *node->inputs[0];
        const Attrs& a = node->attrs;
        const std::string o = var(node->outputs[0]);
        if (shape_numel(g.meta.sizes) == 0) {
          os << in << "const " << T << " " << o << " = " << T << "(0);\n";
          continue;
        }
        const size_t k =
            size_t(std::find(grp.inputs.begin(), grp.inputs.end(), &g) - grp.inputs.begin());
        os << in << "const bool " << o << "_in = j >= " << a.start << " && j < " << a.end
           << (a.step > 1 ? " && (j - " + std::to_string(a.start) + ") % " +
                                std::to_string(a.step) + " == 0"
                          : std::string())
           << ";\n"
           << in << "const int64_t " << o << "_j = " << o << "_in ? (j - " << a.start << ")"
           << (a.step > 1 ? " / " + std::to_string(a.step) : std::string()) << " : 0;\n"
           << in << "const " << T << " " << o << " = " << o << "_in ? in" << k << "[s" << k << " + "
           << o << "_j * " << g.meta.strides.back() << "] : " << T << "(0);\n";
        continue;
      }
      emit_functor_line(os, *node, T, in);
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
    std::vector<const graph::Value*> sliced;  // grads read by slice_backward nodes
    for (const graph::Node* node : grp.nodes)
      if (node->op == OpId::slice_backward) sliced.push_back(node->inputs[0]);
    const std::vector<std::string> bases =
        emit_row_bases(os, grp, out.meta.sizes, in1.c_str(), sliced);
    for (const graph::Value* g : sliced) {
      if (shape_numel(g->meta.sizes) == 0) continue;
      const size_t k =
          size_t(std::find(grp.inputs.begin(), grp.inputs.end(), g) - grp.inputs.begin());
      const RowIndex ri = row_index(*g, g->meta.sizes);  // g's rows are the output's rows
      os << in1 << "const int64_t s" << k << " = " << (ri.row.empty() ? "0" : ri.row) << ";\n";
    }
    os << in1 << T << "* __restrict orow = out + r * cols;\n"
       << "#pragma omp simd\n"
       << in1 << "for (int64_t j = 0; j < cols; ++j) {\n";
    if (epilogue) os << in2 << "const " << T << " " << var(grp.gemm->outputs[0]) << " = orow[j];\n";
    for (size_t j = 0; j < grp.inputs.size(); ++j)
      if (!bases[j].empty())
        os << in2 << "const " << T << " " << var(grp.inputs[j]) << " = in" << j << "[" << bases[j]
           << "];\n";
    emit_nodes(in2);
    os << in2 << "orow[j] = " << var(&out) << ";\n" << in1 << "}\n" << ind << "}\n";
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
       << in2 << "alignas(64) " << T << " buf[chunk];\n"
       << in2 << "const int64_t cn = n - i0 < chunk ? n - i0 : chunk;\n"
       << "#pragma omp simd\n"
       << in2 << "for (int64_t l = 0; l < cn; ++l) {\n"
       << in3 << "const int64_t i = i0 + l;\n";
    for (size_t j = 0; j < grp.inputs.size(); ++j)
      if (shape_numel(grp.inputs[j]->meta.sizes) != 1)
        os << in3 << "const " << T << " " << var(grp.inputs[j]) << " = in" << j << "["
           << index_expr(*grp.inputs[j], out.meta.sizes) << "];\n";
    emit_nodes(in3);
    os << in3 << "buf[l] = " << var(&out) << ";\n"
       << in2 << "}\n"
       << in2 << "ember_stream(out + i0, buf, sizeof(" << T << ") * cn);\n"
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
      os << inner << "const " << T << " " << var(grp.inputs[j]) << " = in" << j << "["
         << index_expr(*grp.inputs[j], out.meta.sizes) << "];\n";
  emit_nodes(inner);
  os << inner << "out[i] = " << var(&out) << ";\n" << ind << "}\n";
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

// `text` with `extra` put before each line but pragmas.
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

// In a pass over a row in blocks of 256 bytes (block start jb): asks for the next row's cache
// lines at these offsets (in elements) from the block's start, so the next row's first pass finds
// its input in cache instead of waiting on memory. The lines of a block are shared out over the
// passes after the first, which spreads the memory traffic over the row's whole time.
void emit_prefetch(std::ostringstream& os, const std::vector<int64_t>& ahead) {
  for (int64_t q : ahead) os << "      __builtin_prefetch(next + jb + " << q << ");\n";
}

// Whether emit_reduce runs a row of n elements of esize bytes in blocks of 256 bytes.
bool reduces_in_blocks(int64_t n, int64_t esize) {
  const int64_t w = 256 / esize;
  return n % w == 0 && n >= 4 * w;
}

// Emits a reduction over the row's n columns into `acc`: `body` (lines using j) computes
// `value`, combined by max or +. Long rows run in blocks of 256 bytes whose lanes each keep
// their own partial result: four vector registers of independent accumulators hide the add
// latency (one chain would cap an L1-resident pass at one vector per add latency), and the
// loads run along contiguous memory. The partials fold in a fixed order at the end. Each block
// also prefetches `ahead`'s lines (see emit_prefetch) and then runs `tail`, lines of the
// block loop that use jb (a pipelined row kernel's output block of the row before).
void emit_reduce(std::ostringstream& os, const char* T, int64_t esize, int64_t n,
                 const std::string& acc, bool max, const std::string& body,
                 const std::string& value, const std::vector<int64_t>& ahead,
                 const std::string& tail = "") {
  const std::string init =
      max ? "-std::numeric_limits<" + std::string(T) + ">::infinity()" : std::string(T) + "(0)";
  auto combine = [&](const std::string& a, const std::string& v) {
    return max ? a + " = " + a + " < " + v + " ? " + v + " : " + a + ";" : a + " += " + v + ";";
  };
  const int64_t w = 256 / esize;
  if (!reduces_in_blocks(n, esize)) {
    os << "    " << T << " " << acc << " = " << init << ";\n"
       << "#pragma omp simd reduction(" << (max ? "max" : "+") << " : " << acc << ")\n"
       << "    for (int64_t j = 0; j < n; ++j) {\n"
       << body << "      " << combine(acc, value) << "\n    }\n";
    return;
  }
  const std::string lanes = acc + "_l";
  os << "    " << T << " " << lanes << "[" << w << "];\n"
     << "    for (int64_t l = 0; l < " << w << "; ++l) " << lanes << "[l] = " << init << ";\n"
     << "    for (int64_t jb = 0; jb < n; jb += " << w << ") {\n";
  emit_prefetch(os, ahead);
  os << "#pragma omp simd\n"
     << "      for (int64_t l = 0; l < " << w << "; ++l) {\n"
     << "        const int64_t j = jb + l;\n"
     << indent(body, "    ") << "        " << combine(lanes + "[l]", value) << "\n      }\n"
     << tail << "    }\n"
     << "    " << T << " " << acc << " = " << lanes << "[0];\n"
     << "    for (int64_t l = 1; l < " << w << "; ++l) " << combine(acc, lanes + "[l]") << "\n";
}

// One task per row of the row op's [rows, n] output. Pass 1 computes the row op's input
// (fused producers) into the output row and reduces it; the middle passes finish the
// statistics; the last pass applies the row op and the fused consumers and stores.
void emit_row_kernel(std::ostringstream& os, size_t k, const FusionGroup& grp) {
  const graph::Node& row = *grp.row;
  const graph::Value& out = *grp.output;
  const char* T = c_type(out.meta.dtype);
  const Shape& shape = row.inputs[0]->meta.sizes;  // whole rows
  // A row reduction with no consumers writes one value per row, not a row.
  const bool row_output = out.meta.sizes == shape;
  const int64_t n = shape.back(), rows = shape_numel(shape) / n;
  // Producers: the nodes the row op depends on; consumers: the rest, after it.
  std::vector<const graph::Node*> pre, post;
  std::vector<const graph::Value*> needed = {row.inputs[0]};
  for (size_t a = grp.nodes.size(); a-- > 0;) {
    const graph::Node* node = grp.nodes[a];
    if (node == &row) continue;
    if (std::find(needed.begin(), needed.end(), node->outputs[0]) != needed.end()) {
      pre.insert(pre.begin(), node);
      needed.insert(needed.end(), node->inputs.begin(), node->inputs.end());
    }
  }
  for (const graph::Node* node : grp.nodes)
    if (node != &row && std::find(pre.begin(), pre.end(), node) == pre.end()) post.push_back(node);

  os << "// " << kernel_name(k) << ": " << op_name(row.op) << " over the rows of "
     << value_type_str(*row.outputs[0]) << ", " << pre.size() << " producer(s) and " << post.size()
     << " consumer(s) fused\n";
  for (const graph::Node* node : grp.nodes) os << "//   " << node_str(*node) << "\n";
  os << "extern \"C\" void " << kernel_name(k) << "(void* const* args) {\n";
  for (size_t j = 0; j < grp.inputs.size(); ++j)
    os << "  const " << T << "* __restrict in" << j << " = static_cast<const " << T << "*>(args["
       << j << "]);  // " << var(grp.inputs[j]) << " " << value_type_str(*grp.inputs[j]) << "\n";
  size_t arg = grp.inputs.size();
  os << "  " << T << "* __restrict out = static_cast<" << T << "*>(args[" << arg++ << "]);  // "
     << var(&out) << "\n";
  for (size_t e = 0; e < grp.extra_outputs.size(); ++e)
    os << "  " << T << "* __restrict stat" << e << " = static_cast<" << T << "*>(args[" << arg++
       << "]);  // " << var(grp.extra_outputs[e]) << "\n";
  for (size_t j = 0; j < grp.inputs.size(); ++j)
    if (shape_numel(grp.inputs[j]->meta.sizes) == 1)
      os << "  const " << T << " " << var(grp.inputs[j]) << " = in" << j << "[0];\n";
  os << "  constexpr int64_t rows = " << rows << ", n = " << n << ";\n";
  // A large output is built row by row in the thread's buffer and streamed out past the cache,
  // so its lines are not read from memory before being overwritten; the input of the next row
  // is fetched while the current one is computed (rows that leave the cache room for it).
  const int64_t esize = int64_t(dtype_size(out.meta.dtype)), row_bytes = n * esize;
  const int64_t block = 256 / esize;  // elements in a block of the streamed last pass
  const bool large = rows > 1 && rows * row_bytes >= cpu::kStreamBytes;
  const bool stream = large && row_output && row_bytes % 256 == 0 && row_bytes <= kRowBufferBytes;
  // Where later passes read the row op's input: straight from a unit-stride group input when
  // nothing is computed before the row op (as the eager kernels do), else from the row, which
  // the first pass fills.
  std::string src = "row";
  std::string src_decl;
  if (pre.empty()) {
    const size_t k =
        size_t(std::find(grp.inputs.begin(), grp.inputs.end(), row.inputs[0]) - grp.inputs.begin());
    const RowIndex ri = row_index(*row.inputs[0], shape);
    if (k < grp.inputs.size() && ri.col == "j") {
      src = "src";
      src_decl = "    const " + std::string(T) + "* __restrict src = in" + std::to_string(k) +
                 " + " + ri.row + ";\n";
    }
  }
  const bool prefetch = stream && src == "src" && row_bytes <= kPrefetchRowBytes;
  // Pipelined rows (a prefetched input reduced in blocks): each thread takes a contiguous range
  // of rows, and the last reduction over row r also stores row r - 1's output block by block and
  // fetches row r + 2's input. The streaming stores and the reads from memory then spread over
  // the row's arithmetic instead of queueing behind each other in passes of their own. Row
  // r - 1's statistics are kept as <name>_p, its kept values in the other half of rowbuf.
  const bool pipelined = prefetch && reduces_in_blocks(n, esize);
  std::string ind = "  ";
  if (pipelined) {
    os << "#pragma omp parallel\n  {\n    alignas(64) " << T << " rowbuf[2][n];\n"
       << "    const int64_t nt = omp_get_num_threads(), t = omp_get_thread_num();\n"
       << "    const int64_t r0 = rows * t / nt, r1 = rows * (t + 1) / nt;\n";
    ind = "    ";
  } else if (stream) {
    os << "#pragma omp parallel\n  {\n    alignas(64) " << T << " rowbuf[n];\n"
       << "#pragma omp for schedule(static)\n";
    ind = "    ";
  } else if (rows > 1 && rows * n >= cpu::kParallelGrain) {
    os << "#pragma omp parallel for schedule(static)\n";
  }
  // The lines that put one row's inputs in scope, for the row `r` in scope.
  std::ostringstream row_scope;
  if (row_output)
    row_scope << "    " << T << "* __restrict row = "
              << (pipelined ? "rowbuf[r & 1];  // built in cache, then streamed out\n"
                  : stream  ? "rowbuf;  // built in cache, then streamed out\n"
                            : "out + r * n;  // built in place, in cache\n");
  const std::vector<std::string> idx = emit_row_bases(row_scope, grp, shape, "    ");
  row_scope << src_decl;
  std::ostringstream rowbody;
  std::swap(os, rowbody);
  os << row_scope.str();
  const std::string x = var(row.inputs[0]);
  // The decomposition's steps: reductions over the row (the first also computes the fused
  // producers), row scalars between them, then the elementwise output.
  const std::optional<RowDecomposition> dec = row_decomposition(row);
  EMBER_CHECK(dec.has_value(), "compiler: no row decomposition for ", op_name(row.op));
  const int64_t reductions_total =
      int64_t(std::count_if(dec->steps.begin(), dec->steps.end(),
                            [](const RowStep& s) { return s.kind != RowStep::Let; }));
  // The next row's lines, over the second reduction (if any, and run in blocks) and the output
  // pass; a pipelined kernel's row after next, over its last reduction.
  std::vector<int64_t> ahead_reduce, ahead_out;
  if (pipelined) {
    os << "    const " << T << "* next = r + 2 < r1 ? src + 2 * n : src;\n";
    for (int64_t q = 0, line = 64 / esize; q < block; q += line) ahead_reduce.push_back(q);
  } else if (prefetch) {
    os << "    const " << T << "* next = r + 1 < rows ? src + n : src;\n";
    const bool split = reduces_in_blocks(n, esize) && reductions_total >= 2;
    for (int64_t q = 0, line = 64 / esize; q < block; q += line)
      (split && q / line % 2 == 0 ? ahead_reduce : ahead_out).push_back(q);
  }
  int reductions = 0;  // emitted so far
  // Whether a step after the first, or the output, reads the input again (then the first pass
  // keeps a computed input in the row).
  bool reread = dec->out.find("$x") != std::string::npos;
  for (size_t i = 1; i < dec->steps.size(); ++i)
    reread |= dec->steps[i].expr.find("$x") != std::string::npos;
  EMBER_CHECK(row_output || !reread, "compiler: a row reduction cannot keep its input");
  bool kept = false, first = true;
  auto expand = [&](std::string e) {
    e = replace_all(e, "$x", src + "[j]");
    e = replace_all(e, "$kept", "row[j]");
    e = replace_all(e, "$T", T);
    e = replace_all(e, "$n", std::to_string(n));
    for (const auto& [name, input] : dec->row_vectors) {
      const size_t k = size_t(std::find(grp.inputs.begin(), grp.inputs.end(), row.inputs[input]) -
                              grp.inputs.begin());
      e = replace_all(e, name, "in" + std::to_string(k) + "[j]");
    }
    return e;
  };
  const std::string value = expand(dec->out);  // the row op's output at column j
  // The streamed output of row r, one block at jb: the row op's result, the fused consumers,
  // the store.
  std::string out_block;
  if (stream) {
    std::ostringstream last, blk;
    last << "      const " << T << " " << var(row.outputs[0]) << " = " << value << ";\n";
    emit_elementwise(last, grp, post, idx, T, "      ");
    blk << "      alignas(64) " << T << " blk[" << block << "];\n"
        << "#pragma omp simd\n"
        << "      for (int64_t l = 0; l < " << block << "; ++l) {\n"
        << "        const int64_t j = jb + l;\n"
        << indent(last.str(), "  ") << "        blk[l] = " << var(&out) << ";\n      }\n"
        << "      ember_stream(out + r * n + jb, blk, sizeof blk);\n";
    out_block = blk.str();
  }
  // Row r - 1's scope inside the pipelined last reduction: its row, inputs and statistics
  // shadow row r's.
  std::string prev_scope;
  if (pipelined) {
    prev_scope = "    const int64_t r = rp;\n" + row_scope.str();
    for (const RowStep& step : dec->steps)
      prev_scope += "    const " + std::string(T) + " " + step.name + " = " + step.name + "_p;\n";
  }
  for (const RowStep& step : dec->steps) {
    if (step.kind == RowStep::Let) {
      os << "    const " << T << " " << step.name << " = " << expand(step.expr) << ";\n";
      continue;
    }
    EMBER_CHECK(!kept || step.expr.find("$x") == std::string::npos,
                "compiler: a row step reads the input after the row was overwritten");
    std::ostringstream body;
    std::string value = expand(step.expr);
    if (first && src == "row") {  // the row op's input computed here (kept when reread)
      emit_elementwise(body, grp, pre, idx, T, "      ", row.inputs[0]);
      if (reread) body << "      row[j] = " << x << ";\n";
      value = replace_all(value, "row[j]", x);
    }
    if (step.keep) {
      body << "      const " << T << " kept = " << value << ";\n      row[j] = kept;\n";
      value = "kept";
      kept = true;
    }
    ++reductions;
    const bool last_reduction = reductions == reductions_total;
    std::string tail;
    if (pipelined && last_reduction) {
      os << "    const int64_t rp = r - 1;\n";
      tail = "      if (rp >= r0) {\n" + indent(prev_scope, "    ") + indent(out_block, "  ") +
             "      }\n";
    }
    emit_reduce(
        os, T, esize, n, step.name, step.kind == RowStep::Max, body.str(), value,
        (pipelined ? last_reduction : reductions == 2) ? ahead_reduce : std::vector<int64_t>{},
        tail);
    first = false;
  }
  for (const auto& [index, name] : dec->stat_outputs)
    for (size_t e = 0; e < grp.extra_outputs.size(); ++e)
      if (grp.extra_outputs[e] == row.outputs[index])
        os << "    stat" << e << "[r] = " << name << ";\n";
  if (!row_output) {
    os << "    out[r] = " << value << ";\n";
  } else if (pipelined) {
    for (const RowStep& step : dec->steps)
      os << "    " << step.name << "_p = " << step.name << ";\n";
  } else if (stream) {
    // Last pass: streamed out a block of 256 bytes at a time.
    os << "    for (int64_t jb = 0; jb < n; jb += " << block << ") {\n";
    emit_prefetch(os, ahead_out);
    os << out_block << "    }\n";
  } else {
    std::ostringstream last;
    last << "      const " << T << " " << var(row.outputs[0]) << " = " << value << ";\n";
    emit_elementwise(last, grp, post, idx, T, "      ");
    os << "#pragma omp simd\n"
       << "    for (int64_t j = 0; j < n; ++j) {\n"
       << last.str() << "      row[j] = " << var(&out) << ";\n    }\n";
  }
  std::swap(os, rowbody);
  if (pipelined) {
    os << ind << T;
    for (size_t i = 0; i < dec->steps.size(); ++i)
      os << (i ? ", " : " ") << dec->steps[i].name << "_p = " << T << "(0)";
    os << ";  // row r - 1's statistics\n"
       << ind << "for (int64_t r = r0; r < r1; ++r) {\n"
       << indent(rowbody.str(), ind.substr(2)) << ind << "}\n"
       << ind << "if (r1 > r0) {  // the last row's output\n"
       << indent("    const int64_t rp = r1 - 1;\n" + prev_scope, ind.substr(2)) << ind
       << "  for (int64_t jb = 0; jb < n; jb += " << block << ") {\n"
       << indent(out_block, "  ") << ind << "  }\n"
       << ind << "}\n";
  } else {
    os << ind << "for (int64_t r = 0; r < rows; ++r) {\n"
       << indent(rowbody.str(), ind.substr(2)) << ind << "}\n";
  }
  // One fence per thread orders the streaming stores before the region's closing barrier.
  if (stream) os << "    ember_fence();\n  }\n";
  os << "}\n\n";
}

}  // namespace

std::string replace_all(std::string text, const std::string& from, const std::string& to) {
  for (size_t at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size()))
    text.replace(at, from.size(), to);
  return text;
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
    if (batched[k])
      emit_kernel_comment(os, k, plan.groups[k]);
    else if (plan.groups[k].col)
      emit_column_kernel(os, kernel_name(k), plan.groups[k]);
    else if (plan.groups[k].attn_bwd)
      emit_attention_backward_kernel(os, kernel_name(k), plan.groups[k], shared);
    else if (plan.groups[k].ln_bwd)
      emit_layer_norm_backward_kernel(os, kernel_name(k), plan.groups[k]);
    else if (plan.groups[k].attn_qk)
      emit_attention_kernel(os, kernel_name(k), plan.groups[k]);
    else if (plan.groups[k].row)
      emit_row_kernel(os, k, plan.groups[k]);
    else
      emit_kernel(os, k, plan.groups[k]);
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
