// Integer expressions over size symbols, for shapes that are not known until run time: a dim
// may be a symbol s0, s1 ... instead of a number, and shape rules and index math compute with
// expressions of them. An expression is kept in one normal form, a polynomial with integer
// coefficients whose atoms are symbols and the operations a polynomial cannot express
// (floor division, modulo, min, max, themselves normalized), so equal expressions compare and
// hash equal and simplification happens as expressions are built:
//   (s0 + 1) * (s0 - 1)      ->  s0*s0 - 1
//   floordiv(4*s0 + 7, 2)    ->  2*s0 + 3
//   mod(4*s0 + 7, 2)         ->  1
//   min(s0 + 2, s0 + 5)      ->  s0 + 2
// Division and modulo round toward negative infinity (floor), which equals C++'s / and % for
// the non-negative values sizes and indices take; str() prints C++ (generated code declares
// each symbol as an int64_t named s<i>). Arithmetic that overflows int64 is an Error.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace ember::sym {

struct Node;

class Expr {
 public:
  Expr(int64_t constant = 0);  // NOLINT: constants convert implicitly, as in `s0 + 1`
  static Expr symbol(int id);  // s<id>, id >= 0

  bool is_constant() const;
  // The value of a constant expression (an Error otherwise).
  int64_t constant() const;
  // The symbol's id when the expression is exactly one symbol.
  std::optional<int> as_symbol() const;
  // Every symbol the expression reads, ascending.
  std::vector<int> symbols() const;

  // The value with symbol i bound to values[i] (an Error when a symbol has no value, when
  // dividing by zero, or on overflow).
  int64_t eval(std::span<const int64_t> values) const;
  // C++ text: "2*s0*s1 + s0 - 3", "(s0 + 1)/2", "std::min<int64_t>(s0, s1 + 4)".
  std::string str() const;
  // The same with symbol i spelled name(i) (a renderer's loop variables and size arguments).
  using Names = std::function<std::string(int)>;
  std::string str(const Names& name) const;
  // The expression with each symbol i for which `by(i)` gives an expression replaced by it,
  // and simplified again.
  using Substitution = std::function<std::optional<Expr>(int)>;
  Expr substitute(const Substitution& by) const;

  // The expression's integers (each term's coefficient, and recursively those inside floor
  // divisions, moduli, minima and maxima) in a fixed order, and its form with them left out:
  // expressions of one form differ only in those integers. with_integers rebuilds the
  // expression with each integer replaced by an expression (as many as integers() has), so a
  // form fitted over several samples becomes an expression of symbols.
  std::string form() const;
  std::vector<int64_t> integers() const;
  Expr with_integers(std::span<const Expr> values) const;

  bool operator==(const Expr& o) const;
  bool operator!=(const Expr& o) const { return !(*this == o); }
  size_t hash() const;
  // A total order on normal forms (for sorting and canonical printing).
  static int compare(const Expr& a, const Expr& b);

  friend Expr operator+(const Expr& a, const Expr& b);
  friend Expr operator-(const Expr& a, const Expr& b);
  friend Expr operator-(const Expr& a);
  friend Expr operator*(const Expr& a, const Expr& b);
  friend Expr floordiv(const Expr& a, const Expr& b);
  friend Expr mod(const Expr& a, const Expr& b);
  friend Expr min(const Expr& a, const Expr& b);
  friend Expr max(const Expr& a, const Expr& b);

  const Node& node() const { return *node_; }

 private:
  explicit Expr(std::shared_ptr<const Node> n) : node_(std::move(n)) {}
  std::shared_ptr<const Node> node_;
  friend struct Builder;
};

Expr floordiv(const Expr& a, const Expr& b);
Expr mod(const Expr& a, const Expr& b);
Expr min(const Expr& a, const Expr& b);
Expr max(const Expr& a, const Expr& b);

// A comparison of two expressions: what a guard checks at run time. Normalized to
// (lhs - rhs) op 0, so a relation that simplification decides is a constant.
struct Rel {
  enum class Op { Eq, Ne, Lt, Le, Gt, Ge };
  Op op;
  Expr diff;  // lhs - rhs

  static Rel make(const Expr& lhs, Op op, const Expr& rhs);
  // true or false when the relation holds or fails for every value of its symbols that the
  // normal form can tell (e.g. s0 + 1 > s0); nullopt when it depends on them.
  std::optional<bool> decided() const;
  bool eval(std::span<const int64_t> values) const;
  std::string str() const;  // "s0 - s1 == 0" style is avoided: "s0 == s1", "s0 >= 2"
  std::string str(const Expr::Names& name) const;
};

}  // namespace ember::sym
