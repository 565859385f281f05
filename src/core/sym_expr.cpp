// Size expressions in normal form (sym_expr.h). Every Expr holds a polynomial node: a sorted
// list of terms, each a coefficient times a monomial (sorted atoms with powers); atoms are
// symbols and the non-polynomial operations, whose operands are themselves normalized.
#include "core/sym_expr.h"

#include <algorithm>
#include <map>

#include "ember/error.h"

namespace ember::sym {

namespace {
using NodePtr = std::shared_ptr<const Node>;
}  // namespace

struct Factor {
  NodePtr atom;
  int power;
};
struct Term {
  std::vector<Factor> mono;  // sorted by atom; empty for the constant term
  int64_t coeff;
};

struct Node {
  enum class Kind : uint8_t { Poly, Symbol, FloorDiv, Mod, Min, Max };
  Kind kind = Kind::Poly;
  int id = -1;                 // Symbol
  std::optional<Expr> a, b;    // FloorDiv, Mod, Min, Max (Min/Max: a <= b in Expr::compare)
  std::vector<Term> terms;     // Poly: sorted (Builder::mono_before), no zero coefficients
  size_t hash = 0;
};

namespace {

size_t mix(size_t h, size_t v) { return h ^ (v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2)); }

int64_t checked_add(int64_t a, int64_t b) {
  int64_t r;
  EMBER_CHECK(!__builtin_add_overflow(a, b, &r), "size expression: ", a, " + ", b,
              " overflows int64");
  return r;
}
int64_t checked_mul(int64_t a, int64_t b) {
  int64_t r;
  EMBER_CHECK(!__builtin_mul_overflow(a, b, &r), "size expression: ", a, " * ", b,
              " overflows int64");
  return r;
}
int64_t floor_div(int64_t a, int64_t b) {
  EMBER_CHECK(b != 0, "size expression: division by zero");
  EMBER_CHECK(!(a == INT64_MIN && b == -1), "size expression: ", a, " / -1 overflows int64");
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}
int64_t floor_mod(int64_t a, int64_t b) { return a - checked_mul(floor_div(a, b), b); }

int cmp_atom(const Node& x, const Node& y);

int cmp_mono(const std::vector<Factor>& x, const std::vector<Factor>& y) {
  // Higher total degree first, then atom by atom.
  int dx = 0, dy = 0;
  for (const Factor& f : x) dx += f.power;
  for (const Factor& f : y) dy += f.power;
  if (dx != dy) return dx > dy ? -1 : 1;
  for (size_t i = 0; i < std::min(x.size(), y.size()); ++i) {
    if (int c = cmp_atom(*x[i].atom, *y[i].atom)) return c;
    if (x[i].power != y[i].power) return x[i].power > y[i].power ? -1 : 1;
  }
  return x.size() == y.size() ? 0 : (x.size() < y.size() ? -1 : 1);
}

int cmp_poly(const Node& x, const Node& y) {
  for (size_t i = 0; i < std::min(x.terms.size(), y.terms.size()); ++i) {
    if (int c = cmp_mono(x.terms[i].mono, y.terms[i].mono)) return c;
    if (x.terms[i].coeff != y.terms[i].coeff) return x.terms[i].coeff < y.terms[i].coeff ? -1 : 1;
  }
  return x.terms.size() == y.terms.size() ? 0 : (x.terms.size() < y.terms.size() ? -1 : 1);
}

int cmp_atom(const Node& x, const Node& y) {
  if (&x == &y) return 0;
  if (x.kind != y.kind) return x.kind < y.kind ? -1 : 1;
  if (x.kind == Node::Kind::Symbol) return x.id == y.id ? 0 : (x.id < y.id ? -1 : 1);
  if (int c = Expr::compare(*x.a, *y.a)) return c;
  return Expr::compare(*x.b, *y.b);
}

struct MonoLess {
  bool operator()(const std::vector<Factor>& x, const std::vector<Factor>& y) const {
    return cmp_mono(x, y) < 0;
  }
};
using TermMap = std::map<std::vector<Factor>, int64_t, MonoLess>;

size_t hash_atom(const Node& n) {
  size_t h = mix(0, size_t(n.kind));
  if (n.kind == Node::Kind::Symbol) return mix(h, size_t(n.id));
  return mix(mix(h, n.a->hash()), n.b->hash());
}

}  // namespace

struct Builder {
  static Expr poly(TermMap terms) {
    auto n = std::make_shared<Node>();
    size_t h = 17;
    for (auto& [mono, coeff] : terms) {
      if (coeff == 0) continue;
      h = mix(h, size_t(coeff));
      for (const Factor& f : mono) h = mix(mix(h, f.atom->hash), size_t(f.power));
      n->terms.push_back({mono, coeff});
    }
    n->hash = h;
    return Expr(NodePtr(std::move(n)));
  }
  static Expr constant(int64_t c) {
    TermMap t;
    t[{}] = c;
    return poly(std::move(t));
  }
  static Expr of_atom(NodePtr atom) {
    TermMap t;
    t[{Factor{std::move(atom), 1}}] = 1;
    return poly(std::move(t));
  }
  static NodePtr atom(Node::Kind kind, const Expr& a, const Expr& b) {
    auto n = std::make_shared<Node>();
    n->kind = kind;
    n->a = a;
    n->b = b;
    n->hash = hash_atom(*n);
    return n;
  }
  static TermMap terms_of(const Expr& e) {
    TermMap t;
    for (const Term& term : e.node_->terms) t[term.mono] = term.coeff;
    return t;
  }
  // The atom when e is exactly one atom to the first power with coefficient 1.
  static const Node* single_atom(const Expr& e) {
    const auto& ts = e.node_->terms;
    if (ts.size() != 1 || ts[0].coeff != 1 || ts[0].mono.size() != 1 || ts[0].mono[0].power != 1)
      return nullptr;
    return ts[0].mono[0].atom.get();
  }
  static void mul_mono(const std::vector<Factor>& x, const std::vector<Factor>& y, int64_t c,
                       TermMap& into) {
    std::vector<Factor> m;
    size_t i = 0, j = 0;
    while (i < x.size() || j < y.size()) {
      if (j == y.size() || (i < x.size() && cmp_atom(*x[i].atom, *y[j].atom) < 0)) {
        m.push_back(x[i++]);
      } else if (i == x.size() || cmp_atom(*x[i].atom, *y[j].atom) > 0) {
        m.push_back(y[j++]);
      } else {
        m.push_back({x[i].atom, x[i].power + y[j].power});
        ++i;
        ++j;
      }
    }
    int64_t& slot = into[m];
    slot = checked_add(slot, c);
  }
  // a = c * q + r with every coefficient of r in [0, c) (c > 0).
  static std::pair<Expr, Expr> split(const Expr& a, int64_t c) {
    TermMap q, r;
    for (const Term& t : a.node_->terms) {
      const int64_t qk = floor_div(t.coeff, c);
      q[t.mono] = qk;
      r[t.mono] = t.coeff - checked_mul(qk, c);
    }
    return {poly(std::move(q)), poly(std::move(r))};
  }
};

Expr::Expr(int64_t constant) : Expr(Builder::constant(constant)) {}

Expr Expr::symbol(int id) {
  EMBER_CHECK(id >= 0, "size symbol ids are non-negative, got ", id);
  auto n = std::make_shared<Node>();
  n->kind = Node::Kind::Symbol;
  n->id = id;
  n->hash = hash_atom(*n);
  return Builder::of_atom(std::move(n));
}

bool Expr::is_constant() const {
  return node_->terms.empty() || (node_->terms.size() == 1 && node_->terms[0].mono.empty());
}

int64_t Expr::constant() const {
  EMBER_CHECK(is_constant(), "size expression ", str(), " is not a constant");
  return node_->terms.empty() ? 0 : node_->terms[0].coeff;
}

std::optional<int> Expr::as_symbol() const {
  const Node* a = Builder::single_atom(*this);
  if (a && a->kind == Node::Kind::Symbol) return a->id;
  return std::nullopt;
}

namespace {
void collect_symbols(const Node& n, std::vector<int>& out) {
  if (n.kind == Node::Kind::Symbol) {
    out.push_back(n.id);
    return;
  }
  if (n.kind != Node::Kind::Poly) {
    collect_symbols(n.a->node(), out);
    collect_symbols(n.b->node(), out);
    return;
  }
  for (const Term& t : n.terms)
    for (const Factor& f : t.mono) collect_symbols(*f.atom, out);
}

int64_t eval_node(const Node& n, std::span<const int64_t> v) {
  switch (n.kind) {
    case Node::Kind::Symbol:
      EMBER_CHECK(n.id < int64_t(v.size()), "size expression: symbol s", n.id, " has no value (",
                  v.size(), " given)");
      return v[size_t(n.id)];
    case Node::Kind::FloorDiv: return floor_div(n.a->eval(v), n.b->eval(v));
    case Node::Kind::Mod: return floor_mod(n.a->eval(v), n.b->eval(v));
    case Node::Kind::Min: return std::min(n.a->eval(v), n.b->eval(v));
    case Node::Kind::Max: return std::max(n.a->eval(v), n.b->eval(v));
    case Node::Kind::Poly: break;
  }
  int64_t total = 0;
  for (const Term& t : n.terms) {
    int64_t p = t.coeff;
    for (const Factor& f : t.mono) {
      const int64_t x = eval_node(*f.atom, v);
      for (int k = 0; k < f.power; ++k) p = checked_mul(p, x);
    }
    total = checked_add(total, p);
  }
  return total;
}

std::string atom_str(const Node& n, const Expr::Names& name);

// e as an operand: bare when it is one atom or a non-negative constant.
std::string operand(const Expr& e, const Expr::Names& name) {
  if (e.is_constant() && e.constant() >= 0) return e.str(name);
  const auto& ts = e.node().terms;
  if (ts.size() == 1 && ts[0].coeff == 1 && ts[0].mono.size() == 1 && ts[0].mono[0].power == 1)
    return e.str(name);
  return std::string("(").append(e.str(name)).append(")");
}

std::string atom_str(const Node& n, const Expr::Names& name) {
  switch (n.kind) {
    case Node::Kind::Symbol: return name ? name(n.id) : std::string("s").append(std::to_string(n.id));
    case Node::Kind::FloorDiv:
      return std::string("(").append(operand(*n.a, name)).append("/").append(
          operand(*n.b, name)).append(")");
    case Node::Kind::Mod:
      return std::string("(").append(operand(*n.a, name)).append("%").append(
          operand(*n.b, name)).append(")");
    case Node::Kind::Min:
      return "std::min<int64_t>(" + n.a->str(name) + ", " + n.b->str(name) + ")";
    case Node::Kind::Max:
      return "std::max<int64_t>(" + n.a->str(name) + ", " + n.b->str(name) + ")";
    case Node::Kind::Poly: break;
  }
  return "?";
}

std::string mono_str(const std::vector<Factor>& m, const Expr::Names& name) {
  std::string s;
  for (const Factor& f : m)
    for (int k = 0; k < f.power; ++k) {
      if (!s.empty()) s += '*';
      s += atom_str(*f.atom, name);
    }
  return s;
}

std::string terms_str(const std::vector<Term>& terms, const Expr::Names& name = {}) {
  if (terms.empty()) return "0";
  std::string s;
  for (size_t i = 0; i < terms.size(); ++i) {
    const Term& t = terms[i];
    const bool neg = t.coeff < 0;
    // |coeff| without overflow for INT64_MIN.
    const uint64_t mag = neg ? uint64_t(0) - uint64_t(t.coeff) : uint64_t(t.coeff);
    std::string body;
    if (t.mono.empty()) body = std::to_string(mag);
    else
      body = mag == 1 ? mono_str(t.mono, name) : std::to_string(mag) + "*" + mono_str(t.mono, name);
    if (i == 0) {
      if (neg) s += '-';
    } else {
      s += neg ? " - " : " + ";
    }
    s += body;
  }
  return s;
}
}  // namespace

std::vector<int> Expr::symbols() const {
  std::vector<int> out;
  collect_symbols(*node_, out);
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

int64_t Expr::eval(std::span<const int64_t> values) const { return eval_node(*node_, values); }

std::string Expr::str() const { return terms_str(node_->terms); }

std::string Expr::str(const Names& name) const { return terms_str(node_->terms, name); }

namespace {
Expr substitute_node(const Node& n, const Expr::Substitution& by) {
  switch (n.kind) {
    case Node::Kind::Symbol: {
      if (std::optional<Expr> e = by(n.id)) return *e;
      return Expr::symbol(n.id);
    }
    case Node::Kind::FloorDiv: return floordiv(n.a->substitute(by), n.b->substitute(by));
    case Node::Kind::Mod: return mod(n.a->substitute(by), n.b->substitute(by));
    case Node::Kind::Min: return min(n.a->substitute(by), n.b->substitute(by));
    case Node::Kind::Max: return max(n.a->substitute(by), n.b->substitute(by));
    case Node::Kind::Poly: break;
  }
  Expr total = 0;
  for (const Term& t : n.terms) {
    Expr p = t.coeff;
    for (const Factor& f : t.mono) {
      const Expr x = substitute_node(*f.atom, by);
      for (int k = 0; k < f.power; ++k) p = p * x;
    }
    total = total + p;
  }
  return total;
}
}  // namespace

Expr Expr::substitute(const Substitution& by) const { return substitute_node(*node_, by); }

namespace {
void form_of(const Node& n, std::string& out, std::vector<int64_t>* ints);

void atom_form(const Node& n, std::string& out, std::vector<int64_t>* ints) {
  static const char* const kNames[] = {"poly", "s", "floordiv", "mod", "min", "max"};
  out += kNames[int(n.kind)];
  if (n.kind == Node::Kind::Symbol) {
    out += std::to_string(n.id);
    return;
  }
  out += '(';
  form_of(n.a->node(), out, ints);
  out += ',';
  form_of(n.b->node(), out, ints);
  out += ')';
}

void form_of(const Node& n, std::string& out, std::vector<int64_t>* ints) {
  out += '[';
  for (const Term& t : n.terms) {
    out += '#';
    if (ints) ints->push_back(t.coeff);
    for (const Factor& f : t.mono) {
      out += '*';
      atom_form(*f.atom, out, ints);
      if (f.power > 1) out += '^' + std::to_string(f.power);
    }
    out += ';';
  }
  out += ']';
}

Expr rebuild(const Node& n, std::span<const Expr> values, size_t& at);

Expr rebuild_atom(const Node& n, std::span<const Expr> values, size_t& at) {
  if (n.kind == Node::Kind::Symbol) return Expr::symbol(n.id);
  const Expr a = rebuild(n.a->node(), values, at);
  const Expr b = rebuild(n.b->node(), values, at);
  switch (n.kind) {
    case Node::Kind::FloorDiv: return floordiv(a, b);
    case Node::Kind::Mod: return mod(a, b);
    case Node::Kind::Min: return min(a, b);
    default: return max(a, b);
  }
}

Expr rebuild(const Node& n, std::span<const Expr> values, size_t& at) {
  Expr total = 0;
  for (const Term& t : n.terms) {
    EMBER_CHECK(at < values.size(), "size expression: with_integers got ", values.size(),
                " integers, the expression has more");
    Expr p = values[at++];
    for (const Factor& f : t.mono) {
      const Expr x = rebuild_atom(*f.atom, values, at);
      for (int k = 0; k < f.power; ++k) p = p * x;
    }
    total = total + p;
  }
  return total;
}
}  // namespace

std::string Expr::form() const {
  std::string out;
  form_of(*node_, out, nullptr);
  return out;
}

std::vector<int64_t> Expr::integers() const {
  std::string unused;
  std::vector<int64_t> ints;
  form_of(*node_, unused, &ints);
  return ints;
}

Expr Expr::with_integers(std::span<const Expr> values) const {
  size_t at = 0;
  Expr e = rebuild(*node_, values, at);
  EMBER_CHECK(at == values.size(), "size expression: with_integers got ", values.size(),
              " integers for an expression of ", at);
  return e;
}

bool Expr::operator==(const Expr& o) const {
  return node_ == o.node_ || (node_->hash == o.node_->hash && cmp_poly(*node_, *o.node_) == 0);
}

size_t Expr::hash() const { return node_->hash; }

int Expr::compare(const Expr& a, const Expr& b) { return cmp_poly(*a.node_, *b.node_); }

Expr operator+(const Expr& a, const Expr& b) {
  TermMap t = Builder::terms_of(a);
  for (const Term& term : b.node().terms) {
    int64_t& slot = t[term.mono];
    slot = checked_add(slot, term.coeff);
  }
  return Builder::poly(std::move(t));
}

Expr operator-(const Expr& a) {
  TermMap t;
  for (const Term& term : a.node().terms) t[term.mono] = checked_mul(term.coeff, -1);
  return Builder::poly(std::move(t));
}

Expr operator-(const Expr& a, const Expr& b) { return a + (-b); }

Expr operator*(const Expr& a, const Expr& b) {
  TermMap t;
  for (const Term& x : a.node().terms)
    for (const Term& y : b.node().terms)
      Builder::mul_mono(x.mono, y.mono, checked_mul(x.coeff, y.coeff), t);
  return Builder::poly(std::move(t));
}

Expr floordiv(const Expr& a, const Expr& b) {
  EMBER_CHECK(!(b.is_constant() && b.constant() == 0), "size expression: ", a.str(),
              " divided by zero");
  if (a.is_constant() && b.is_constant()) return floor_div(a.constant(), b.constant());
  if (a.is_constant() && a.constant() == 0) return 0;
  if (a == b) return 1;
  if (b.is_constant()) {
    const int64_t c = b.constant();
    if (c == 1) return a;
    if (c < 0) return floordiv(-a, -b);
    auto [q, r] = Builder::split(a, c);
    if (r.is_constant()) return q;  // 0 <= r < c
    // floordiv(floordiv(x, c1), c2) = floordiv(x, c1 * c2) for positive constants.
    if (const Node* inner = Builder::single_atom(r);
        inner && inner->kind == Node::Kind::FloorDiv && inner->b->is_constant() &&
        inner->b->constant() > 0 && q.is_constant() && q.constant() == 0)
      return floordiv(*inner->a, Expr(checked_mul(inner->b->constant(), c)));
    return q + Builder::of_atom(Builder::atom(Node::Kind::FloorDiv, r, b));
  }
  return Builder::of_atom(Builder::atom(Node::Kind::FloorDiv, a, b));
}

Expr mod(const Expr& a, const Expr& b) {
  EMBER_CHECK(!(b.is_constant() && b.constant() == 0), "size expression: ", a.str(),
              " modulo zero");
  if (a.is_constant() && b.is_constant()) return floor_mod(a.constant(), b.constant());
  if (a.is_constant() && a.constant() == 0) return 0;
  if (a == b) return 0;
  if (b.is_constant()) {
    const int64_t c = b.constant();
    if (c == 1 || c == -1) return 0;
    if (c > 0) {
      auto [q, r] = Builder::split(a, c);
      if (r.is_constant()) return r;  // 0 <= r < c
      if (const Node* inner = Builder::single_atom(r);
          inner && inner->kind == Node::Kind::Mod && *inner->b == b)
        return r;  // mod(mod(x, c), c)
      return Builder::of_atom(Builder::atom(Node::Kind::Mod, r, b));
    }
  }
  return Builder::of_atom(Builder::atom(Node::Kind::Mod, a, b));
}

namespace {
Expr extreme(const Expr& a, const Expr& b, bool is_max) {
  const Expr d = a - b;
  if (d.is_constant()) return (d.constant() >= 0) == is_max ? a : b;
  const bool ordered = Expr::compare(a, b) <= 0;
  return Builder::of_atom(Builder::atom(is_max ? Node::Kind::Max : Node::Kind::Min,
                                        ordered ? a : b, ordered ? b : a));
}
}  // namespace

Expr min(const Expr& a, const Expr& b) { return extreme(a, b, false); }
Expr max(const Expr& a, const Expr& b) { return extreme(a, b, true); }

// ---- relations ----

Rel Rel::make(const Expr& lhs, Op op, const Expr& rhs) { return Rel{op, lhs - rhs}; }

namespace {
bool holds(Rel::Op op, int64_t d) {
  switch (op) {
    case Rel::Op::Eq: return d == 0;
    case Rel::Op::Ne: return d != 0;
    case Rel::Op::Lt: return d < 0;
    case Rel::Op::Le: return d <= 0;
    case Rel::Op::Gt: return d > 0;
    case Rel::Op::Ge: return d >= 0;
  }
  return false;
}
const char* op_str(Rel::Op op) {
  switch (op) {
    case Rel::Op::Eq: return " == ";
    case Rel::Op::Ne: return " != ";
    case Rel::Op::Lt: return " < ";
    case Rel::Op::Le: return " <= ";
    case Rel::Op::Gt: return " > ";
    case Rel::Op::Ge: return " >= ";
  }
  return " ? ";
}
}  // namespace

std::optional<bool> Rel::decided() const {
  if (diff.is_constant()) return holds(op, diff.constant());
  return std::nullopt;
}

bool Rel::eval(std::span<const int64_t> values) const { return holds(op, diff.eval(values)); }

std::string Rel::str() const { return str(Expr::Names{}); }

std::string Rel::str(const Expr::Names& name) const {
  // diff = P - N: terms with positive coefficients on the left, the others negated on the right.
  std::vector<Term> left, right;
  for (const Term& t : diff.node().terms) {
    if (t.coeff > 0) left.push_back(t);
    else right.push_back({t.mono, checked_mul(t.coeff, -1)});
  }
  return terms_str(left, name) + op_str(op) + terms_str(right, name);
}

}  // namespace ember::sym
