// Rendering row kernels as C++ (render_cpp.h): a row op over the last dim (softmax,
// log_softmax, layer_norm, a sum or mean) with its fused pointwise producers and consumers, as
// lowered to a kir::RowProgram. One task per row runs the program's passes; large outputs are
// built in a row buffer and streamed out, and rows read straight from an input are pipelined
// (docs/architecture.md, "Compiler").
#include <algorithm>
#include <cctype>
#include <cstdio>
#include <functional>

#include "compiler/codegen_util.h"
#include "compiler/render_common.h"
#include "compiler/render_cpp.h"
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


// One task per row of the domain [rows, n]. Pass 1 computes the row op's input (the fused
// producers) into the output row and reduces it; the middle passes finish the statistics; the
// last pass applies the row op and the fused consumers and stores.
void render_cpp_rows(std::ostringstream& os, const kir::Kernel& k) {
  const kir::RowProgram& rp = *k.rows;
  int out_buffer = -1;
  for (size_t b = 0; b < k.buffers.size() && out_buffer < 0; ++b)
    if (k.buffers[b].output) out_buffer = int(b);
  const char* T = c_type(k.buffers[size_t(out_buffer)].dtype);
  // Sizes may be symbols (their values follow the buffers in args, s<i> at [i]): then the
  // kernel takes the plain schedule (no streamed or pipelined rows, reductions not blocked
  // unless the row length is a constant), its parallel choice taken at run time.
  const kir::Index n_expr = k.domain.back();
  const kir::Index rows_expr = n_expr.is_constant() && n_expr.constant() == 0
                                   ? kir::Index(0)
                                   : floordiv(k.numel(), n_expr);
  const bool fixed = n_expr.is_constant() && rows_expr.is_constant();
  const int64_t n = n_expr.is_constant() ? n_expr.constant() : -1;
  const int64_t rows = rows_expr.is_constant() ? rows_expr.constant() : -1;
  const bool row_output = rp.row_output;
  int64_t consumers = 0;
  for (const kir::Stmt& s : rp.out) consumers += s.kind == kir::Stmt::Kind::Call;
  os << "// " << k.name << ": a row kernel over [" << rows << ", " << n << "], "
     << (rp.pre.size() - size_t(std::count_if(rp.pre.begin(), rp.pre.end(), [](const kir::Stmt& s) {
           return s.kind == kir::Stmt::Kind::Load;
         })))
     << " producer(s) fused\n";
  for (const std::string& line : k.comment) os << "//   " << line << "\n";
  os << "extern \"C\" void " << k.name << "(void* const* args) {\n";
  for (size_t b = 0; b < k.buffers.size(); ++b) {
    const kir::Buffer& buf = k.buffers[b];
    if (!buf.output)
      os << "  const " << T << "* __restrict in" << b << " = static_cast<const " << T << "*>(args["
         << b << "]);  // " << buf.about << "\n";
    else if (int(b) == out_buffer)
      os << "  " << T << "* __restrict out = static_cast<" << T << "*>(args[" << b << "]);  // "
         << buf.about << "\n";
    else
      os << "  " << T << "* __restrict stat" << b << " = static_cast<" << T << "*>(args[" << b
         << "]);  // " << buf.about << "\n";
  }
  emit_uniform_row_loads(os, k, T);
  const std::vector<int> symbols = k.size_symbols();
  if (!symbols.empty()) {
    os << "  const int64_t* __restrict sizes = static_cast<const int64_t*>(args["
       << k.buffers.size() << "]);\n";
    for (int sym : symbols) os << "  const int64_t s" << sym << " = sizes[" << sym << "];\n";
  }
  if (fixed)
    os << "  constexpr int64_t rows = " << rows << ", n = " << n << ";\n";
  else
    os << "  " << (rows_expr.is_constant() ? "constexpr" : "const") << " int64_t rows = "
       << rows_expr.str() << ";\n  " << (n_expr.is_constant() ? "constexpr" : "const")
       << " int64_t n = " << n_expr.str() << ";\n";
  // A large output is built row by row in the thread's buffer and streamed out past the cache,
  // so its lines are not read from memory before being overwritten; the input of the next row
  // is fetched while the current one is computed (rows that leave the cache room for it).
  const int64_t esize = int64_t(dtype_size(k.buffers[size_t(out_buffer)].dtype)),
                row_bytes = n * esize;
  const int64_t block = 256 / esize;  // elements in a block of the streamed last pass
  const bool large = fixed && rows > 1 && rows * row_bytes >= cpu::kStreamBytes;
  const bool stream = large && row_output && row_bytes % 256 == 0 && row_bytes <= kRowBufferBytes;
  // Each load's offset: a per-row base b<p> and a column term, one per distinct offset.
  RowOffsets offsets(k);
  auto offset_of = [&](const kir::Stmt& s) -> const RowOffsets::Entry& {
    return offsets.entries[offsets.position(s)];
  };
  auto offset = [&](const kir::Stmt& s) { return offsets.offset(s); };
  // Where later passes read the row op's input: straight from a unit-stride group input when
  // nothing is computed before the row op (as the eager kernels do), else from the row, which
  // the first pass fills.
  const bool no_producers = std::all_of(rp.pre.begin(), rp.pre.end(), [](const kir::Stmt& s) {
    return s.kind == kir::Stmt::Kind::Load;
  });
  std::string src = "row";
  std::string src_decl;
  for (const kir::Stmt& s : rp.pre)
    if (no_producers && s.out == rp.input && !k.uniform(s) && offset_of(s).col == "j") {
      src = "src";
      const RowOffsets::Entry& o = offset_of(s);
      src_decl = "    const " + std::string(T) + "* __restrict src = in" +
                 std::to_string(s.buffer) + " + " + (o.row.empty() ? "0" : o.row) + ";\n";
    }
  // The inputs whose rows are read from memory along the row (unit stride, a row each): the row
  // op's input read where it lies, or those the fused producers read.
  std::vector<std::pair<int, std::string>> fetched;  // buffer, its row offset
  for (const kir::Stmt& s : rp.pre)
    if (s.kind == kir::Stmt::Kind::Load && !k.uniform(s) && (src == "row" || s.out == rp.input)) {
      const RowOffsets::Entry& o = offset_of(s);
      if (o.col == "j" && !o.row.empty()) fetched.push_back({s.buffer, o.row});
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
  } else if (!fixed) {
    os << "#pragma omp parallel for schedule(static) if (rows > 1 && rows * n >= "
       << cpu::kParallelGrain << ")\n";
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
  for (size_t p = 0; p < offsets.entries.size(); ++p)
    if (!offsets.entries[p].row.empty())
      row_scope << "    const int64_t b" << p << " = " << offsets.entries[p].row << ";\n";
  row_scope << src_decl;
  std::ostringstream rowbody;
  std::swap(os, rowbody);
  os << row_scope.str();
  const std::string x = rp.input;
  const int64_t reductions_total =
      int64_t(std::count_if(rp.steps.begin(), rp.steps.end(), [](const kir::RowStep& s) {
        return s.kind != kir::RowStep::Kind::Let;
      }));
  // A pipelined kernel's row after next, over its last reduction; else the next row, over the
  // output pass.
  Ahead ahead_reduce, ahead_out;
  if (pipelined) {
    os << "    const int64_t rn = r + 2 < r1 ? r + 2 : r;  // the row fetched ahead\n";
    for (const auto& [b, offset_text] : fetched) {
      const std::string p = "next" + std::to_string(b);
      os << "    const " << T << "* " << p << " = in" << b << " + " << at_row(offset_text, "rn")
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
  bool reread = reads_value(rp.out, "", x);
  for (size_t i = 1; i < rp.steps.size(); ++i)
    reread |= reads_value(rp.steps[i].body, rp.steps[i].value, x);
  EMBER_CHECK(row_output || !reread, "compiler: a row reduction cannot keep its input");
  bool kept = false, first = true;
  // The row op's input read again at column j, by a pass after the first.
  const std::string x_again = "      const " + std::string(T) + " " + x + " = " + src + "[j];\n";
  RowSpell spell{k, offset, "row[j]", ""};
  // The output at column j of row r: the row op's result, the fused consumers, stored to `to`.
  auto output_at = [&](const std::string& to) {
    std::ostringstream last;
    if (reads_value(rp.out, "", x)) last << x_again;
    RowSpell s = spell;
    s.store_to = to;
    s(last, rp.out, "      ");
    return last.str();
  };
  // The streamed output of row r, one block at jb.
  std::string out_block;
  if (stream) {
    std::ostringstream blk;
    blk << "      alignas(64) " << T << " blk[" << block << "];\n"
        << "#pragma omp simd\n"
        << "      for (int64_t l = 0; l < " << block << "; ++l) {\n"
        << "        const int64_t j = jb + l;\n"
        << indent(output_at("blk[l]"), "  ") << "      }\n"
        << "      ember_stream(out + r * n + jb, blk, sizeof blk);\n";
    out_block = blk.str();
  }
  // Row r - 1's scope inside the pipelined last reduction: its row, inputs and statistics
  // shadow row r's.
  std::string prev_scope;
  if (pipelined) {
    prev_scope = "    const int64_t r = rp;\n" + row_scope.str();
    for (const kir::RowStep& step : rp.steps)
      prev_scope += "    const " + std::string(T) + " " + step.name + " = " + step.name + "_p;\n";
  }
  for (const kir::RowStep& step : rp.steps) {
    if (step.kind == kir::RowStep::Kind::Let) {
      std::ostringstream body;
      spell(body, step.body, "    ");
      os << body.str() << "    const " << T << " " << step.name << " = " << step.value << ";\n";
      continue;
    }
    EMBER_CHECK(!kept || !reads_value(step.body, step.value, x),
                "compiler: a row step reads the input after the row was overwritten");
    std::ostringstream body;
    if (first && src == "row") {  // the row op's input computed here (kept when reread)
      spell(body, rp.pre, "      ");
      if (reread) body << "      row[j] = " << x << ";\n";
    } else if (reads_value(step.body, step.value, x)) {
      body << x_again;
    }
    spell(body, step.body, "      ");
    std::string value = step.value;
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
    emit_reduce(os, T, esize, n, step.name, step.kind == kir::RowStep::Kind::Max, body.str(),
                value, pipelined && last_reduction ? ahead_reduce : Ahead{}, tail);
    first = false;
  }
  EMBER_CHECK(!(kept && src == "row" && reads_value(rp.out, "", x)),
              "compiler: ", k.name, "'s output reads the row op's input after the row was "
              "overwritten");
  for (const auto& [buffer, name] : rp.stats) os << "    stat" << buffer << "[r] = " << name << ";\n";
  if (!row_output) {
    RowSpell s = spell;
    s.store_to = "out[r]";
    s(os, rp.out, "    ");
  } else if (pipelined) {
    for (const kir::RowStep& step : rp.steps)
      os << "    " << step.name << "_p = " << step.name << ";\n";
  } else if (stream) {
    // Last pass: streamed out a block of 256 bytes at a time.
    os << "    for (int64_t jb = 0; jb < n; jb += " << block << ") {\n";
    emit_prefetch(os, ahead_out);
    os << out_block << "    }\n";
  } else {
    os << "#pragma omp simd\n"
       << "    for (int64_t j = 0; j < n; ++j) {\n"
       << output_at("row[j]") << "    }\n";
  }
  std::swap(os, rowbody);
  if (pipelined) {
    os << ind << T;
    for (size_t i = 0; i < rp.steps.size(); ++i)
      os << (i ? ", " : " ") << rp.steps[i].name << "_p = " << T << "(0)";
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
