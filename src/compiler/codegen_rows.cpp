// The row kernel: a row op over the last dim (softmax, log_softmax, layer_norm, a sum or mean)
// with its fused pointwise producers and consumers, from the op's row decomposition
// (decompositions.h). One task per row runs the decomposition's passes; large outputs are
// built in a row buffer and streamed out, and rows read straight from an input are pipelined
// (docs/architecture.md, "Compiler").
#include <algorithm>
#include <cctype>

#include "compiler/codegen_util.h"
#include "compiler/decompositions.h"
#include "graph/graph_util.h"
#include "kernels/cpu/loops.h"

namespace ember::compiler {
namespace {

// Row kernels with large outputs build each row in a stack buffer of the thread (up to this
// size) and stream it out, and fetch input rows ahead when a row is at most kPrefetchRowBytes:
// the rows being computed, their buffers and the row fetched then (nearly) share L1 (48 KiB on
// the machines measured in docs/bench.md), with L2 behind it.
constexpr int64_t kRowBufferBytes = int64_t(64) << 10;
constexpr int64_t kPrefetchRowBytes = int64_t(16) << 10;

// In a pass over a row in blocks of 256 bytes (block start jb): asks for a later row's cache
// lines at these offsets (in elements) from the block's start, in each input row that `ahead`
// points to, so that row's first pass finds its input in cache instead of waiting on memory.
struct Ahead {
  std::vector<std::string> rows;  // pointers to the rows fetched
  std::vector<int64_t> offsets;
};
void emit_prefetch(std::ostringstream& os, const Ahead& ahead) {
  for (const std::string& p : ahead.rows)
    for (int64_t q : ahead.offsets)
      os << "      __builtin_prefetch(" << p << " + jb + " << q << ");\n";
}

// `expr` with the identifier r (the row) renamed.
std::string at_row(const std::string& expr, const std::string& r) {
  auto word = [&](size_t i) {  // whether expr[i] exists and can be part of an identifier
    return i < expr.size() && (std::isalnum(static_cast<unsigned char>(expr[i])) || expr[i] == '_');
  };
  std::string out;
  for (size_t i = 0; i < expr.size(); ++i) {
    const bool alone = expr[i] == 'r' && (i == 0 || !word(i - 1)) && !word(i + 1);
    out += alone ? r : std::string(1, expr[i]);
  }
  return out;
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
                 const std::string& value, const Ahead& ahead, const std::string& tail = "") {
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

}  // namespace

// One task per row of the row op's [rows, n] output. Pass 1 computes the row op's input
// (fused producers) into the output row and reduces it; the middle passes finish the
// statistics; the last pass applies the row op and the fused consumers and stores.
void emit_row_kernel(std::ostringstream& os, const std::string& name, const FusionGroup& grp) {
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

  os << "// " << name << ": " << op_name(row.op) << " over the rows of "
     << value_type_str(*row.outputs[0]) << ", " << pre.size() << " producer(s) and " << post.size()
     << " consumer(s) fused\n";
  for (const graph::Node* node : grp.nodes) os << "//   " << node_str(*node) << "\n";
  os << "extern \"C\" void " << name << "(void* const* args) {\n";
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
  // The inputs whose rows are read from memory along the row (unit stride, a row each): the row
  // op's input read where it lies, or those the fused producers read.
  std::vector<std::pair<size_t, std::string>> fetched;  // group input, its row offset
  for (size_t k = 0; k < grp.inputs.size(); ++k) {
    bool read = src == "src" ? grp.inputs[k] == row.inputs[0] : false;
    for (const graph::Node* node : pre)
      read |=
          std::find(node->inputs.begin(), node->inputs.end(), grp.inputs[k]) != node->inputs.end();
    const RowIndex ri = row_index(*grp.inputs[k], shape);
    if (read && ri.col == "j" && ri.row != "0") fetched.push_back({k, ri.row});
  }
  // Pipelined rows (inputs fetched ahead, reduced in blocks): each thread takes a contiguous
  // range of rows, and the last reduction over row r also stores row r - 1's output block by
  // block and fetches row r + 2's inputs. The streaming stores and the reads from memory then
  // spread over the row's arithmetic instead of queueing behind each other in passes of their
  // own. Row r - 1's statistics are kept as <name>_p, its kept values in the other half of
  // rowbuf.
  const bool pipelined = stream && reduces_in_blocks(n, esize) && !fetched.empty() &&
                         int64_t(fetched.size()) * row_bytes <= kPrefetchRowBytes;
  // Rows too short for blocked reductions, read where they lie: the last pass fetches the next
  // row.
  const bool prefetch_next = !pipelined && stream && src == "src" && row_bytes <= kPrefetchRowBytes;
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
  // A pipelined kernel's row after next, over its last reduction; else the next row, over the
  // output pass.
  Ahead ahead_reduce, ahead_out;
  if (pipelined) {
    os << "    const int64_t rn = r + 2 < r1 ? r + 2 : r;  // the row fetched ahead\n";
    for (const auto& [k, offset] : fetched) {
      const std::string p = "next" + std::to_string(k);
      os << "    const " << T << "* " << p << " = in" << k << " + " << at_row(offset, "rn")
         << ";\n";
      ahead_reduce.rows.push_back(p);
    }
    for (int64_t q = 0, line = 64 / esize; q < block; q += line) ahead_reduce.offsets.push_back(q);
  } else if (prefetch_next) {
    os << "    const " << T << "* next = r + 1 < rows ? src + n : src;\n";
    ahead_out.rows = {"next"};
    for (int64_t q = 0, line = 64 / esize; q < block; q += line) ahead_out.offsets.push_back(q);
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
    emit_reduce(os, T, esize, n, step.name, step.kind == RowStep::Max, body.str(), value,
                pipelined && last_reduction ? ahead_reduce : Ahead{}, tail);
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

}  // namespace ember::compiler
