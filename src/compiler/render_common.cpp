// Spelling shared by the C++ and CUDA renderers (render_common.h).
#include "compiler/render_common.h"

#include <algorithm>
#include <cstdio>

#include "compiler/codegen_util.h"
#include "compiler/render_cpp.h"
#include "core/philox.h"
#include "ember/error.h"

namespace ember::compiler {

using kir::Index;
using kir::Stmt;

Index::Substitution flat_coordinates(const std::vector<Index>& dims, int var) {
  std::vector<Index> c(dims.size());
  Index inner = 1;
  for (size_t d = dims.size(); d-- > 0;) {
    if (dims[d].is_constant() && dims[d].constant() <= 1) {  // always 0 (or no element at all)
      c[d] = 0;
      continue;
    }
    Index x = Index::symbol(var);
    if (!(inner.is_constant() && inner.constant() == 1)) x = floordiv(x, inner);
    if (d > 0) x = mod(x, dims[d]);
    c[d] = x;
    inner = inner * dims[d];
  }
  return [c](int id) -> std::optional<Index> {
    if (id >= kir::kCoord && size_t(id - kir::kCoord) < c.size()) return c[size_t(id - kir::kCoord)];
    return std::nullopt;
  };
}

std::string loop_names(int id) {
  if (id == kVarI) return "i";
  if (id == kVarR) return "r";
  if (id == kVarJ) return "j";
  return std::string("s").append(std::to_string(id));
}

std::string buffer_name(const kir::Kernel& k, int b) {
  return k.buffers[size_t(b)].output ? "out" : "in" + std::to_string(b);
}

std::string value_decl(const Stmt& s) {
  return std::string("const ") + compute_type(s.dtype) + " " + s.out + " = ";
}

std::string iota_value(const Stmt& s, const std::string& offset) {
  std::string v = "(" + offset + ")";
  if (s.iota_step != 1) v = std::to_string(s.iota_step) + "LL * " + v;
  if (s.iota_start != 0) v = std::to_string(s.iota_start) + "LL + " + v;
  return std::string(compute_type(s.dtype)) + "(int64_t(" + v + "))";
}

void emit_pointwise_body(std::ostringstream& os, const kir::Kernel& k, const std::string& in,
                         const std::function<std::string(const Stmt&)>& offset,
                         const std::string& store_to,
                         const std::function<std::string(const Stmt&)>& element,
                         const std::function<std::string(const Stmt&)>& draw) {
  DType dt = DType::Float32;  // the output's
  for (const kir::Buffer& b : k.buffers)
    if (b.output) dt = b.dtype;
  for (const Stmt& s : k.body) {
    switch (s.kind) {
      case Stmt::Kind::Load: {
        if (k.uniform(s)) break;
        if (s.iota) {  // an arange's value at this offset, computed instead of read
          os << in << value_decl(s) << iota_value(s, offset(s)) << ";\n";
          break;
        }
        // A value the renderer loaded already (a vector's element; masked ones read 0 outside
        // their conditions there too).
        if (std::string e = element ? element(s) : std::string(); !e.empty()) {
          os << in << value_decl(s) << load_value(s.dtype, e) << ";\n";
          break;
        }
        if (s.when.empty()) {
          os << in << value_decl(s)
             << load_value(s.dtype, buffer_name(k, s.buffer) + "[" + offset(s) + "]") << ";\n";
          break;
        }
        const char* T = compute_type(s.dtype);
        bool never = false;
        for (const sym::Rel& r : s.when) never |= r.decided() == std::optional<bool>(false);
        if (never) {
          os << in << value_decl(s) << T << "(0);\n";
          break;
        }
        // The offset is taken only where the conditions hold (0 elsewhere), so the load
        // always reads a valid element and the select discards it. The conditions are on the
        // last coordinate, the column j.
        const int last = int(k.domain.size()) - 1;
        std::string cond;
        for (const sym::Rel& r : s.when) {
          const sym::Rel at_j{r.op, r.diff.substitute([&](int id) -> std::optional<Index> {
                                if (id == kir::kCoord + last) return Index::symbol(kVarJ);
                                return std::nullopt;
                              })};
          cond += (cond.empty() ? "" : " && ") + at_j.str(loop_names);
        }
        os << in << "const bool " << s.out << "_in = " << cond << ";\n"
           << in << "const int64_t " << s.out << "_at = " << s.out << "_in ? " << offset(s)
           << " : 0;\n"
           << in << value_decl(s) << s.out << "_in ? "
           << load_value(s.dtype, buffer_name(k, s.buffer) + "[" + s.out + "_at]") << " : "
           << T << "(0);\n";
        break;
      }
      case Stmt::Kind::Cast:
        // As the eager cast: converted to the target's compute type, then (16-bit targets)
        // rounded to the target, which eager does by storing the result.
        os << in << value_decl(s)
           << load_value(s.dtype, store_value(s.dtype, std::string(compute_type(s.dtype)) + "(" +
                                                           s.args[0] + ")"))
           << ";\n";
        break;
      case Stmt::Kind::Call:
        os << in << value_decl(s) << "ember::fn::" << s.functor << "{}(";
        for (size_t a = 0; a < s.args.size(); ++a) os << (a ? ", " : "") << s.args[a];
        os << ");\n";
        break;
      case Stmt::Kind::Store:
        os << in << (s.store_if.empty() ? "" : "if (" + s.store_if + ") ") << store_to << " = "
           << store_value(dt, s.args[0]) << ";\n";
        break;
      case Stmt::Kind::Dropout: {
        // The prelude's ember_dropout (render_cuda.cpp): the CUDA renderer's alone.
        const double p = s.constant;
        char scale[40];
        std::snprintf(scale, sizeof scale, "%.17g", 1 / (1 - p));
        const char* C = compute_type(s.dtype);
        std::string at = draw ? draw(s) : std::string();
        if (at.empty()) {
          const std::string e = "uint64_t(" + offset(s) + ")";
          at = e + " >> 2, int(" + e + " & 3)";
        }
        os << in << value_decl(s) << "ember_dropout<" << C << ">(" << s.args[0] << ", "
           << buffer_name(k, s.buffer) << ", " << at << ", " << philox::bernoulli_threshold(1 - p)
           << "ull, " << C << "(" << scale << "));\n";
        break;
      }
      case Stmt::Kind::Const:
      case Stmt::Kind::Kept:
        EMBER_FAIL("compiler: ", k.name, ": a row statement in an elementwise kernel");
    }
  }
}

RowOffsets::RowOffsets(const kir::Kernel& k) : k_(k) {
  for (const std::vector<Stmt>* list : {&k.rows->pre, &k.rows->out})
    for (const Stmt& s : *list)
      if (s.kind == Stmt::Kind::Load && !k.uniform(s)) position(s);
}

size_t RowOffsets::position(const Stmt& load) {
  for (size_t p = 0; p < entries.size(); ++p)
    if (entries[p].index == load.index) return p;
  const CppRowOffset o = cpp_row_offset(k_, load.index);
  entries.push_back({load.index, o.row, o.col});
  return entries.size() - 1;
}

std::string RowOffsets::base(size_t p) const {
  return entries[p].row.empty() ? std::string("0") : std::string("b").append(std::to_string(p));
}

std::string RowOffsets::offset(const Stmt& load) {
  const size_t p = position(load);
  const std::string& col = entries[p].col;
  if (entries[p].row.empty()) return col.empty() ? std::string("0") : col;
  return col.empty() ? base(p) : base(p) + " + " + col;
}

void emit_uniform_row_loads(std::ostringstream& os, const kir::Kernel& k, const char* T) {
  std::vector<std::string> hoisted;
  for (const std::vector<Stmt>* list : {&k.rows->pre, &k.rows->out})
    for (const Stmt& s : *list)
      if (k.uniform(s) && std::find(hoisted.begin(), hoisted.end(), s.out) == hoisted.end()) {
        hoisted.push_back(s.out);
        os << "  const " << T << " " << s.out << " = in" << s.buffer << "[0];\n";
      }
}

bool reads_value(const std::vector<Stmt>& stmts, const std::string& value,
                 const std::string& name) {
  bool read = value == name;
  for (const Stmt& s : stmts) {
    if (s.kind != Stmt::Kind::Store && s.out == name) return false;
    read |= std::find(s.args.begin(), s.args.end(), name) != s.args.end();
  }
  return read;
}

void RowSpell::operator()(std::ostringstream& os, const std::vector<Stmt>& stmts,
                          const std::string& ind) const {
  for (const Stmt& s : stmts) {
    const char* T = compute_type(s.dtype);
    const std::string decl = std::string("const ") + T + " " + s.out + " = ";
    switch (s.kind) {
      case Stmt::Kind::Load:
        if (k.uniform(s)) break;  // loaded once, at the kernel's start
        if (std::string e = element ? element(s) : std::string(); !e.empty())
          os << ind << decl << e << ";\n";
        else
          os << ind << decl << "in" << s.buffer << "[" << offset(s) << "];\n";
        break;
      case Stmt::Kind::Call:
        os << ind << decl << "ember::fn::" << s.functor << "{}(";
        for (size_t a = 0; a < s.args.size(); ++a) os << (a ? ", " : "") << s.args[a];
        os << ");\n";
        break;
      case Stmt::Kind::Const: {
        char v[40];
        std::snprintf(v, sizeof v, "%.17g", s.constant);
        os << ind << decl << T << "(" << (s.size_valued ? s.index.str() : std::string(v))
           << ");\n";
        break;
      }
      case Stmt::Kind::Kept:
        os << ind << decl << kept_at << ";\n";
        break;
      case Stmt::Kind::Cast:  // as the elementwise kernels' (and eager's) cast
        os << ind << decl
           << load_value(s.dtype, store_value(s.dtype, std::string(T) + "(" + s.args[0] + ")"))
           << ";\n";
        break;
      case Stmt::Kind::Store:
        os << ind << store_to << " = " << store_value(s.dtype, s.args[0]) << ";\n";
        break;
      case Stmt::Kind::Dropout:
        EMBER_FAIL("compiler: ", k.name, ": dropout in a row kernel");
    }
  }
}

}  // namespace ember::compiler
