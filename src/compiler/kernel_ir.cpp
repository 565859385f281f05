// The kernel IR's helpers and its printed form (kernel_ir.h).
#include "compiler/kernel_ir.h"

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "ember/error.h"

namespace ember::compiler::kir {

Index coord(int d) { return Index::symbol(kCoord + d); }

bool reads_coord(const Index& e, int d) {
  for (int s : e.symbols())
    if (s == kCoord + d) return true;
  return false;
}

bool reads_any_coord(const Index& e) {
  for (int s : e.symbols())
    if (s >= kCoord) return true;
  return false;
}

Index Kernel::numel() const {
  Index n = 1;
  for (const Index& s : domain) n = n * s;
  return n;
}

Index Kernel::contiguous_index() const {
  Index idx = 0, inner = 1;
  for (size_t d = domain.size(); d-- > 0;) {
    idx = idx + coord(int(d)) * inner;
    inner = inner * domain[d];
  }
  return idx;
}

std::vector<int> Kernel::size_symbols() const {
  std::vector<int> out;
  auto add = [&](const Index& e) {
    for (int s : e.symbols())
      if (s < kCoord && std::find(out.begin(), out.end(), s) == out.end()) out.push_back(s);
  };
  auto add_stmts = [&](const std::vector<Stmt>& stmts) {
    for (const Stmt& s : stmts) {
      add(s.index);
      for (const sym::Rel& r : s.when) add(r.diff);
    }
  };
  for (const Index& d : domain) add(d);
  for (const Buffer& b : buffers) add(b.numel);
  if (pattern)
    for (const Index& e : pattern->ints) add(e);
  add_stmts(body);
  if (rows) {
    add_stmts(rows->pre);
    add_stmts(rows->out);
    for (const RowStep& st : rows->steps) add_stmts(st.body);
  }
  std::sort(out.begin(), out.end());
  return out;
}

bool Kernel::uniform(const Stmt& s) const {
  if (s.kind != Stmt::Kind::Load || !s.when.empty() || reads_any_coord(s.index)) return false;
  const Index& n = buffers[size_t(s.buffer)].numel;
  return n.is_constant() && n.constant() == 1;
}

namespace {
std::string names(int id) {
  return std::string(id >= kCoord ? "c" : "s").append(std::to_string(id >= kCoord ? id - kCoord : id));
}
}  // namespace

std::string print(const Kernel& k) {
  std::ostringstream os;
  os << "kernel " << k.name << (k.epilogue ? " (gemm epilogue)" : "") << " over [";
  for (size_t d = 0; d < k.domain.size(); ++d) os << (d ? ", " : "") << k.domain[d].str(names);
  os << "]\n";
  for (const std::string& line : k.comment) os << "  # " << line << "\n";
  for (size_t b = 0; b < k.buffers.size(); ++b)
    os << "  " << (k.buffers[b].output ? "out" : "in") << " #" << b << " " << dtype_name(k.buffers[b].dtype)
       << "[" << k.buffers[b].numel.str(names) << "]  " << k.buffers[b].about << "\n";
  auto stmt = [&](const Stmt& s, const std::string& ind) {
    os << ind;
    switch (s.kind) {
      case Stmt::Kind::Load:
        os << s.out << " = load #" << s.buffer << "[" << s.index.str(names) << "]";
        for (size_t c = 0; c < s.when.size(); ++c)
          os << (c ? " and " : " where ") << s.when[c].str(names);
        if (k.uniform(s)) os << " (uniform)";
        if (s.iota) os << " (iota " << s.iota_start << " + " << s.iota_step << " * offset)";
        break;
      case Stmt::Kind::Call:
        os << s.out << " = " << s.functor << "(";
        for (size_t a = 0; a < s.args.size(); ++a) os << (a ? ", " : "") << s.args[a];
        os << ")";
        break;
      case Stmt::Kind::Cast:
        os << s.out << " = cast<" << dtype_name(s.dtype) << ">(" << s.args[0] << ")";
        break;
      case Stmt::Kind::Store:
        os << "store #" << s.buffer << "[" << s.index.str(names) << "] = " << s.args[0];
        if (!s.store_if.empty()) os << " where " << s.store_if;
        break;
      case Stmt::Kind::Const:
        if (s.size_valued)
          os << s.out << " = " << s.index.str(names);
        else
          os << s.out << " = " << s.constant;
        break;
      case Stmt::Kind::Kept:
        os << s.out << " = kept";
        break;
      case Stmt::Kind::Dropout:
        os << s.out << " = dropout(" << s.args[0] << ", p " << s.constant << ") drawing #"
           << s.buffer << " at [" << s.index.str(names) << "]";
        break;
    }
    os << "\n";
  };
  if (k.pattern) {
    os << "  pattern kernel over " << k.pattern->ints.size() << " sized integers:";
    for (size_t i = 0; i < k.pattern->ints.size(); ++i)
      os << " @" << i << "@=" << k.pattern->ints[i].str(names);
    os << "\n";
  }
  for (const Stmt& s : k.body) stmt(s, "  ");
  if (!k.rows) return os.str();
  const RowProgram& rp = *k.rows;
  os << "  rows: the row op reads " << rp.input << "\n";
  for (const Stmt& s : rp.pre) stmt(s, "    ");
  for (const RowStep& st : rp.steps) {
    static const char* const kind[] = {"max", "sum", "let"};
    os << "  " << st.name << " = " << kind[int(st.kind)]
       << (st.kind == RowStep::Kind::Let ? "" : " over the row") << " of " << st.value
       << (st.keep ? " (kept)" : "") << "\n";
    for (const Stmt& s : st.body) stmt(s, "    ");
  }
  os << "  " << (rp.row_output ? "each column" : "each row") << ":\n";
  for (const Stmt& s : rp.out) stmt(s, "    ");
  for (const auto& [buffer, name] : rp.stats) os << "  store #" << buffer << "[row] = " << name << "\n";
  return os.str();
}

namespace {

// Calls f on every size expression of k, in one fixed order.
template <class K, class F>
void each_expr(K& k, F&& f) {
  auto stmts = [&](auto& list) {
    for (auto& s : list) {
      f(s.index);
      for (auto& r : s.when) f(r.diff);
    }
  };
  for (auto& d : k.domain) f(d);
  for (auto& b : k.buffers) f(b.numel);
  if (k.pattern)
    for (auto& e : k.pattern->ints) f(e);
  stmts(k.body);
  if (k.rows) {
    stmts(k.rows->pre);
    for (auto& st : k.rows->steps) stmts(st.body);
    stmts(k.rows->out);
  }
}

void stmt_form(const Stmt& s, std::string& out) {
  out += std::to_string(int(s.kind)) + ' ' + s.out + ' ' + std::string(dtype_name(s.dtype)) + ' ' +
         std::to_string(s.buffer) + ' ' + s.functor + '(';
  for (const std::string& a : s.args) out += a + ',';
  out += ')';
  for (const sym::Rel& r : s.when) out += " when" + std::to_string(int(r.op));
  if ((s.kind == Stmt::Kind::Const && !s.size_valued) || s.kind == Stmt::Kind::Dropout) {
    char v[40];
    std::snprintf(v, sizeof v, " %.17g", s.constant);
    out += v;
  }
  if (s.iota) out += " iota" + std::to_string(s.iota_start) + ',' + std::to_string(s.iota_step);
  if (!s.store_if.empty()) out += " if " + s.store_if;
  out += s.size_valued ? " sized;" : ";";
}

}  // namespace

std::string strip_comments(const std::string& code) {
  std::string out;
  out.reserve(code.size());
  for (size_t i = 0; i < code.size();) {
    if (code.compare(i, 2, "//") == 0) {
      const size_t eol = code.find('\n', i);
      // A line that was only a comment goes entirely; a trailing comment leaves its line.
      while (!out.empty() && out.back() == ' ') out.pop_back();
      if (eol == std::string::npos) break;
      i = (out.empty() || out.back() == '\n') ? eol + 1 : eol;
      continue;
    }
    out += code[i++];
  }
  return out;
}

std::string form(const Kernel& k) {
  std::string out = std::string(k.epilogue ? "epilogue " : "") + std::to_string(k.domain.size()) +
                    " dims; buffers";
  for (const Buffer& b : k.buffers) {
    out += ' ';
    out.append(dtype_name(b.dtype));
    out += b.output ? "out" : "in";
  }
  out += "; ";
  for (const Stmt& s : k.body) stmt_form(s, out);
  if (k.rows) {
    out.append(" rows ").append(k.rows->input).append(k.rows->row_output ? " row: " : " scalar: ");
    for (const Stmt& s : k.rows->pre) stmt_form(s, out);
    for (const RowStep& st : k.rows->steps) {
      out += " step " + std::to_string(int(st.kind)) + st.name + '=' + st.value +
             (st.keep ? " kept: " : ": ");
      for (const Stmt& s : st.body) stmt_form(s, out);
    }
    out += " out: ";
    for (const Stmt& s : k.rows->out) stmt_form(s, out);
    for (const auto& [b, name] : k.rows->stats) out += " stat" + std::to_string(b) + '=' + name;
  }
  if (k.pattern)
    out.append(" pattern ").append(strip_comments(k.pattern->shared)).append(" | ")
        .append(strip_comments(k.pattern->text));
  out += " | ";
  each_expr(k, [&](const Index& e) { out += e.form() + ' '; });
  return out;
}

std::vector<int64_t> integers(const Kernel& k) {
  std::vector<int64_t> ints;
  each_expr(k, [&](const Index& e) {
    for (int64_t v : e.integers()) ints.push_back(v);
  });
  return ints;
}

Kernel with_integers(const Kernel& k, std::span<const Index> values) {
  Kernel out = k;
  size_t at = 0;
  each_expr(out, [&](Index& e) {
    const size_t n = e.integers().size();
    EMBER_CHECK(at + n <= values.size(), "kernel IR: with_integers got ", values.size(),
                " integers, ", k.name, " has more");
    e = e.with_integers(values.subspan(at, n));
    at += n;
  });
  EMBER_CHECK(at == values.size(), "kernel IR: with_integers got ", values.size(),
              " integers for ", k.name, "'s ", at);
  return out;
}

Kernel substitute_symbols(const Kernel& k, const Index::Substitution& by) {
  Kernel out = k;
  each_expr(out, [&](Index& e) {
    e = e.substitute([&](int id) -> std::optional<Index> {
      if (id >= kCoord) return std::nullopt;
      return by(id);
    });
  });
  return out;
}

Kernel bind(const Kernel& k, std::span<const int64_t> values) {
  return substitute_symbols(k, [&](int id) -> std::optional<Index> {
    if (size_t(id) < values.size()) return Index(values[size_t(id)]);
    return std::nullopt;
  });
}

}  // namespace ember::compiler::kir
