// Rendering elementwise kernels as C++ (render_cpp.h): a flat loop over the output (large
// outputs built in chunks and streamed past the cache), or rows and columns of its last dim
// with each input's offset split into a per-row base and a column term, so broadcast inputs
// cost no division per element. Coordinates are spelled from the loop variables here: the
// IR's index expressions are substituted and printed.
#include <algorithm>

#include "compiler/codegen_util.h"
#include "compiler/render_common.h"
#include "compiler/render_cpp.h"
#include "kernels/cpu/loops.h"

namespace ember::compiler {

namespace {

using kir::Index;
using kir::Stmt;

// e with the last coordinate set to `to` (0: the row part of an offset).
Index with_last(const Index& e, int last, const Index& to) {
  return e.substitute([&](int id) -> std::optional<Index> {
    if (id == kir::kCoord + last) return to;
    return std::nullopt;
  });
}

bool constant(const Index& e, int64_t v) { return e.is_constant() && e.constant() == v; }

}  // namespace

CppRowOffset cpp_row_offset(const kir::Kernel& k, const kir::Index& index) {
  const int last = int(k.domain.size()) - 1;
  const Index row_part = with_last(index, last, 0);
  const Index col_part = with_last(index - row_part, last, Index::symbol(kVarJ));
  const std::vector<Index> lead(k.domain.begin(), k.domain.end() - 1);
  CppRowOffset o;
  // A multiple of the row's position in the leading dims' own row-major order (a contiguous
  // input, or one broadcast only along the last dim): k * r, no division.
  Index lead_flat = 0, inner = 1;
  for (size_t d = lead.size(); d-- > 0;) {
    lead_flat = lead_flat + kir::coord(int(d)) * inner;
    inner = inner * lead[d];
  }
  const Index step = lead.empty() ? Index(0)
                                  : row_part.substitute([&](int id) -> std::optional<Index> {
                                      if (id == kir::kCoord + int(lead.size()) - 1) return 1;
                                      if (id >= kir::kCoord) return 0;
                                      return std::nullopt;
                                    });
  if (!constant(row_part, 0) && row_part == step * lead_flat)
    o.row = (step * Index::symbol(kVarR)).str(loop_names);
  else if (!constant(row_part, 0))
    o.row = row_part.substitute(flat_coordinates(lead, kVarR)).str(loop_names);
  if (!constant(col_part, 0)) o.col = col_part.str(loop_names);
  return o;
}

bool cpp_row_loop(const kir::Kernel& k) {
  for (const Stmt& s : k.body)
    if (s.kind == Stmt::Kind::Load && !s.when.empty()) return true;  // needs the column
  if (k.domain.size() < 2 || !k.domain.back().is_constant() || k.domain.back().constant() < 16)
    return false;
  const Index flat = k.contiguous_index();
  for (const Stmt& s : k.body)
    if (s.kind == Stmt::Kind::Load && !k.uniform(s) && s.index != flat) return true;
  return false;
}

void render_cpp_elementwise(std::ostringstream& os, const kir::Kernel& k, size_t base,
                            bool in_region, const char* ind) {
  // Values are stored as their dtype's storage type and computed in its compute type (16-bit
  // floats: their bits, and float).
  int out_buffer = -1;
  for (size_t b = 0; b < k.buffers.size(); ++b) {
    const kir::Buffer& buf = k.buffers[b];
    const char* S = storage_type(buf.dtype);
    if (buf.output) {
      out_buffer = int(b);
      os << ind << S << "* __restrict out = static_cast<" << S << "*>(args[" << base + b
         << "]);  // " << buf.about << "\n";
    } else {
      os << ind << "const " << S << "* __restrict in" << b << " = static_cast<const " << S
         << "*>(args[" << base + b << "]);  // " << buf.about << "\n";
    }
  }
  const kir::Buffer& outb = k.buffers[size_t(out_buffer)];
  const DType dt = outb.dtype;
  for (const Stmt& s : k.body)
    if (k.uniform(s))
      os << ind << value_decl(s) << load_value(s.dtype, buffer_name(k, s.buffer) + "[0]") << ";\n";
  // Symbolic sizes: their values follow the buffers in args (s<i> at [i]); the loop bounds and
  // the parallel and streaming choices that depend on them are taken at run time.
  const std::vector<int> symbols = k.size_symbols();
  if (!symbols.empty()) {
    os << ind << "const int64_t* __restrict sizes = static_cast<const int64_t*>(args["
       << base + k.buffers.size() << "]);\n";
    for (int sym : symbols)
      os << ind << "const int64_t " << loop_names(sym) << " = sizes[" << sym << "];\n";
  }
  const Index n_expr = k.numel();
  const bool fixed = n_expr.is_constant();
  const int64_t n = fixed ? n_expr.constant() : -1;
  // "constexpr int64_t x = 4" or "const int64_t x = 4*s0".
  auto size_decl = [&](const std::string& name, const Index& e) {
    return std::string(e.is_constant() ? "constexpr" : "const") + " int64_t " + name + " = " +
           e.str(loop_names) + ";\n";
  };
  const std::string grain = std::to_string(cpu::kParallelGrain);
  const Index flat = k.contiguous_index();
  if (k.epilogue || cpp_row_loop(k)) {
    const Index cols = k.domain.back();
    if (k.epilogue) {
      os << ind << size_decl("cols", cols) << ind << "for (int64_t r = r0; r < r1; ++r) {\n";
    } else {
      const Index rows =
          cols.is_constant() && cols.constant() == 0 ? Index(0) : floordiv(n_expr, cols);
      os << ind << size_decl("rows", rows) << ind << size_decl("cols", cols);
      if (in_region)
        os << "#pragma omp for schedule(static) nowait\n";
      else if (!fixed)
        os << "#pragma omp parallel for schedule(static) if (rows > 1 && rows * cols >= "
           << grain << ")\n";
      else if (n >= cpu::kParallelGrain && rows.constant() > 1)
        os << "#pragma omp parallel for schedule(static)\n";
      os << ind << "for (int64_t r = 0; r < rows; ++r) {\n";
    }
    const std::string in1 = std::string(ind) + "  ", in2 = in1 + "  ";
    // Each load's offset: a base computed once per row (b<stmt>) plus a column term.
    std::vector<std::string> offset(k.body.size());
    for (size_t i = 0; i < k.body.size(); ++i) {
      const Stmt& s = k.body[i];
      if (s.kind != Stmt::Kind::Load || k.uniform(s)) continue;
      if (s.buffer == out_buffer && s.index == flat) {
        offset[i] = "orow";  // the output's own element
        continue;
      }
      const CppRowOffset o = cpp_row_offset(k, s.index);
      std::string b;
      if (!o.row.empty()) {
        b = std::string("b").append(std::to_string(i));
        os << in1 << "const int64_t " << b << " = " << o.row << ";\n";
      }
      const std::string& c = o.col;
      offset[i] = b.empty() ? (c.empty() ? "0" : c) : (c.empty() ? b : b + " + " + c);
    }
    os << in1 << storage_type(dt) << "* __restrict orow = out + r * cols;\n"
       << "#pragma omp simd\n"
       << in1 << "for (int64_t j = 0; j < cols; ++j) {\n";
    emit_pointwise_body(
        os, k, in2, [&](const Stmt& s) { return offset[size_t(&s - k.body.data())]; },
        "orow[j]", [&](const Stmt& s) {
          return offset[size_t(&s - k.body.data())] == "orow" ? std::string("orow[j]")
                                                              : std::string();
        });
    os << in1 << "}\n" << ind << "}\n";
    return;
  }
  const Index::Substitution flat_coords = flat_coordinates(k.domain, kVarI);
  auto flat_at = [&](const Stmt& s) {
    if (s.index == flat) return std::string("i");
    return s.index.substitute(flat_coords).str(loop_names);
  };
  os << ind << size_decl("n", n_expr);
  const int64_t esize = int64_t(dtype_size(dt));
  // Symbolic sizes: no streamed chunks (the choice would depend on the size).
  if (!in_region && fixed && n * esize >= cpu::kStreamBytes) {
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
       << in2 << "alignas(64) " << storage_type(dt) << " buf[chunk];\n"
       << in2 << "const int64_t cn = n - i0 < chunk ? n - i0 : chunk;\n"
       << "#pragma omp simd\n"
       << in2 << "for (int64_t l = 0; l < cn; ++l) {\n"
       << in3 << "const int64_t i = i0 + l;\n";
    emit_pointwise_body(os, k, in3, flat_at, "buf[l]");
    os << in2 << "}\n"
       << in2 << "ember_stream(out + i0, buf, sizeof(" << storage_type(dt) << ") * cn);\n"
       << in1 << "}\n"
       << in1 << "ember_fence();\n"
       << ind << "}\n";
    return;
  }
  if (in_region)
    os << "#pragma omp for simd schedule(static) nowait\n";
  else if (!fixed)
    os << "#pragma omp parallel for simd if (n >= " << grain << ")\n";
  else
    os << (n >= cpu::kParallelGrain ? "#pragma omp parallel for simd\n" : "#pragma omp simd\n");
  os << ind << "for (int64_t i = 0; i < n; ++i) {\n";
  emit_pointwise_body(os, k, std::string(ind) + "  ", flat_at, "out[i]");
  os << ind << "}\n";
}

}  // namespace ember::compiler
