// Size expressions: the normal form's simplifications, printing, relations, and random
// expression trees evaluated both through the normal form and directly.
#include "core/sym_expr.h"

#include <gtest/gtest.h>

#include <functional>
#include <random>

#include "support/expect_error.h"

namespace ember::sym {
namespace {

using test::expect_error;

const Expr s0 = Expr::symbol(0), s1 = Expr::symbol(1), s2 = Expr::symbol(2);

TEST(SymExpr, PolynomialsHaveOneNormalForm) {
  EXPECT_EQ((s0 + 1) * (s0 - 1), s0 * s0 - 1);
  EXPECT_EQ(s0 + s1, s1 + s0);
  EXPECT_EQ(s0 * s1 * 2, s1 * (s0 + s0));
  EXPECT_EQ(s0 - s0, Expr(0));
  EXPECT_TRUE((s0 - s0).is_constant());
  EXPECT_EQ((s0 * 3 - s0 * 3 + 7).constant(), 7);
  EXPECT_NE(s0 + 1, s0 + 2);
  EXPECT_EQ((s0 + 1).hash(), (1 + s0).hash());
  EXPECT_EQ(s1.as_symbol(), 1);
  EXPECT_FALSE((s1 + 1).as_symbol().has_value());
  EXPECT_EQ((s2 * s0 + s0).symbols(), (std::vector<int>{0, 2}));
}

TEST(SymExpr, DivisionModuloAndExtremesSimplify) {
  EXPECT_EQ(floordiv(4 * s0 + 6, 2), 2 * s0 + 3);
  EXPECT_EQ(floordiv(4 * s0 + 7, 2), 2 * s0 + 3);
  EXPECT_EQ(mod(4 * s0 + 7, 2), Expr(1));
  EXPECT_EQ(mod(6 * s0 * s1, 3), Expr(0));
  EXPECT_EQ(floordiv(s0, 1), s0);
  EXPECT_EQ(floordiv(s0 + s1, s0 + s1), Expr(1));
  EXPECT_EQ(floordiv(floordiv(s0, 4), 8), floordiv(s0, 32));
  EXPECT_EQ(mod(mod(s0, 16), 16), mod(s0, 16));
  EXPECT_EQ(floordiv(Expr(-7), Expr(2)).constant(), -4);  // floor
  EXPECT_EQ(mod(Expr(-7), Expr(2)).constant(), 1);
  EXPECT_EQ(min(s0 + 2, s0 + 5), s0 + 2);
  EXPECT_EQ(max(s0 + 2, s0 + 5), s0 + 5);
  EXPECT_EQ(min(s0, s1), min(s1, s0));
  EXPECT_EQ(floordiv(2 * s0 + 1, 2), s0);  // 2*s0 + floor(1/2)
  expect_error([] { floordiv(s0, Expr(0)); }, "divided by zero");
}

TEST(SymExpr, PrintsCppAndEvaluates) {
  EXPECT_EQ((s0 * s1 * 2 + s0 - 3).str(), "2*s0*s1 + s0 - 3");
  EXPECT_EQ(floordiv(s0 + 1, 2).str(), "((s0 + 1)/2)");
  EXPECT_EQ((3 * mod(s1, 8)).str(), "3*(s1%8)");
  EXPECT_EQ(min(s0, s1 + 4).str(), "std::min<int64_t>(s0, s1 + 4)");
  EXPECT_EQ((-s0).str(), "-s0");
  EXPECT_EQ(Expr(0).str(), "0");
  const int64_t v[] = {5, 7};
  EXPECT_EQ((s0 * s1 * 2 + s0 - 3).eval(v), 72);
  EXPECT_EQ(floordiv(s0 + 1, 2).eval(v), 3);
  expect_error([] { s2.eval(std::vector<int64_t>{1, 2}); }, "s2 has no value");
  const int64_t big[] = {int64_t(1) << 62};
  expect_error([&] { (s0 * 4).eval(big); }, "overflows int64");
}

TEST(SymExpr, SubstitutesAndPrintsWithRendererNames) {
  // Coordinates of a flat element i of a [s1, 8] domain: i / 8 and i % 8.
  const Expr e = s0 * 8 + s2;  // row s0, column s2
  const Expr i = Expr::symbol(7);
  const Expr flat = e.substitute([&](int id) -> std::optional<Expr> {
    if (id == 0) return floordiv(i, 8);
    if (id == 2) return mod(i, 8);
    return std::nullopt;
  });
  auto names = [](int id) { return id == 7 ? std::string("i") : std::string("n").append(std::to_string(id)); };
  EXPECT_EQ(flat.str(names), "8*(i/8) + (i%8)");
  for (int64_t v : {0, 5, 8, 63}) {
    std::vector<int64_t> at(8, 0);
    at[7] = v;
    EXPECT_EQ(flat.eval(at), v);
  }
  // Substitution simplifies again; unreplaced symbols stay.
  EXPECT_EQ((s0 * 2 + s1).substitute([&](int id) -> std::optional<Expr> {
    if (id == 0) return s1 - 1;
    return std::nullopt;
  }), s1 * 3 - 2);
  EXPECT_EQ(Rel::make(s1, Rel::Op::Ge, 3).str(names), "n1 >= 3");
  EXPECT_EQ(min(s0, s1 + 4).str(names), "std::min<int64_t>(n0, n1 + 4)");
}

TEST(SymExpr, RelationsDecideWhatTheNormalFormTells) {
  EXPECT_EQ(Rel::make(s0 + 1, Rel::Op::Gt, s0).decided(), true);
  EXPECT_EQ(Rel::make(s0 * 2, Rel::Op::Eq, s0 + s0).decided(), true);
  EXPECT_FALSE(Rel::make(s0, Rel::Op::Eq, s1).decided().has_value());
  EXPECT_EQ(Rel::make(s0, Rel::Op::Eq, s1).str(), "s0 == s1");
  EXPECT_EQ(Rel::make(s0, Rel::Op::Ge, Expr(2)).str(), "s0 >= 2");
  EXPECT_EQ(Rel::make(mod(s0, 16), Rel::Op::Eq, Expr(0)).str(), "(s0%16) == 0");
  const int64_t v[] = {32, 3};
  EXPECT_TRUE(Rel::make(mod(s0, 16), Rel::Op::Eq, Expr(0)).eval(v));
  EXPECT_FALSE(Rel::make(s0, Rel::Op::Lt, s1).eval(v));
}

// A random tree, its value computed directly (floor division, as the normal form's), and the
// same tree built as an Expr.
struct Tree {
  std::function<int64_t(const std::vector<int64_t>&)> value;
  Expr expr;
};

Tree random_tree(std::mt19937& rng, int depth) {
  std::uniform_int_distribution<int> pick(0, depth <= 0 ? 1 : 8);
  const int kind = pick(rng);
  if (kind == 0) {
    const int64_t c = std::uniform_int_distribution<int64_t>(-5, 9)(rng);
    return {[c](const std::vector<int64_t>&) { return c; }, Expr(c)};
  }
  if (kind == 1) {
    const int id = std::uniform_int_distribution<int>(0, 2)(rng);
    return {[id](const std::vector<int64_t>& v) { return v[size_t(id)]; }, Expr::symbol(id)};
  }
  Tree a = random_tree(rng, depth - 1), b = random_tree(rng, depth - 1);
  auto fdiv = [](int64_t x, int64_t y) {
    int64_t q = x / y;
    if (x % y != 0 && ((x < 0) != (y < 0))) --q;
    return q;
  };
  switch (kind) {
    case 2: return {[a, b](auto& v) { return a.value(v) + b.value(v); }, a.expr + b.expr};
    case 3: return {[a, b](auto& v) { return a.value(v) - b.value(v); }, a.expr - b.expr};
    case 4: return {[a, b](auto& v) { return a.value(v) * b.value(v); }, a.expr * b.expr};
    case 5: {  // divide by a positive constant or a symbol plus one (never zero here)
      const int64_t c = std::uniform_int_distribution<int64_t>(1, 6)(rng);
      const bool by_symbol = std::uniform_int_distribution<int>(0, 2)(rng) == 0;
      Expr d = by_symbol ? Expr::symbol(0) + 1 : Expr(c);
      return {[a, c, by_symbol, fdiv](auto& v) { return fdiv(a.value(v), by_symbol ? v[0] + 1 : c); },
              floordiv(a.expr, d)};
    }
    case 6: {
      const int64_t c = std::uniform_int_distribution<int64_t>(1, 6)(rng);
      return {[a, c, fdiv](auto& v) { const int64_t x = a.value(v); return x - fdiv(x, c) * c; },
              mod(a.expr, Expr(c))};
    }
    case 7: return {[a, b](auto& v) { return std::min(a.value(v), b.value(v)); }, min(a.expr, b.expr)};
    default: return {[a, b](auto& v) { return std::max(a.value(v), b.value(v)); }, max(a.expr, b.expr)};
  }
}

TEST(SymExpr, RandomTreesEvaluateAsTheirNormalForm) {
  std::mt19937 rng(2026);
  int checked = 0;
  for (int n = 0; n < 3000; ++n) {
    const Tree t = random_tree(rng, 4);
    for (int k = 0; k < 5; ++k) {
      std::vector<int64_t> v(3);
      for (int64_t& x : v) x = std::uniform_int_distribution<int64_t>(0, 40)(rng);
      ASSERT_EQ(t.expr.eval(v), t.value(v)) << t.expr.str() << " at s = " << v[0] << ", " << v[1]
                                            << ", " << v[2];
      ++checked;
    }
    // The normal form is a fixed point: rebuilding it from its own parts changes nothing.
    EXPECT_EQ(t.expr + 0, t.expr);
    EXPECT_EQ(t.expr * 1, t.expr);
  }
  EXPECT_EQ(checked, 15000);
}

}  // namespace
}  // namespace ember::sym
