// The row decompositions (see decompositions.h). Max-subtracted softmaxes (no overflow), and
// layer_norm's variance around the mean in a second pass (no cancellation), as the eager
// kernels compute them.
#include "compiler/decompositions.h"

#include "compiler/codegen_util.h"

namespace ember::compiler {

namespace {

using kir::RowStep;
using kir::Stmt;

// Appends statements to `into`, naming each value `prefix`_<k> unless given a name.
struct Emit {
  std::vector<Stmt>& into;
  DType t;
  std::string prefix;
  int count = 0;

  std::string add(Stmt s, const std::string& name) {
    s.out = name.empty() ? prefix + "_" + std::to_string(count++) : name;
    s.dtype = t;
    into.push_back(std::move(s));
    return into.back().out;
  }
  std::string call(const char* functor, std::vector<std::string> args,
                   const std::string& name = "") {
    Stmt s;
    s.kind = Stmt::Kind::Call;
    s.functor = functor;
    s.args = std::move(args);
    return add(std::move(s), name);
  }
  std::string constant(double v) {
    Stmt s;
    s.kind = Stmt::Kind::Const;
    s.constant = v;
    return add(std::move(s), "");
  }
  std::string size(const kir::Index& v) {  // a size, as a value of the element type
    Stmt s;
    s.kind = Stmt::Kind::Const;
    s.size_valued = true;
    s.index = v;
    return add(std::move(s), "");
  }
  std::string kept() {
    Stmt s;
    s.kind = Stmt::Kind::Kept;
    return add(std::move(s), "");
  }
  std::string load_column(int buffer, int last) {
    Stmt s;
    s.kind = Stmt::Kind::Load;
    s.buffer = buffer;
    s.index = kir::coord(last);
    return add(std::move(s), "");
  }
};

RowStep step(RowStep::Kind kind, const std::string& name) {
  RowStep s;
  s.kind = kind;
  s.name = name;
  return s;
}

}  // namespace

bool has_row_decomposition(const graph::Node& n) {
  switch (n.op) {
    case OpId::softmax:
    case OpId::log_softmax:
    case OpId::layer_norm:
    case OpId::sum:
    case OpId::mean:
      return true;
    default:
      return false;
  }
}

std::optional<RowDecomposition> row_decomposition(
    const graph::Node& n, const std::string& x,
    const std::function<int(size_t input)>& buffer_of_input) {
  if (!has_row_decomposition(n)) return std::nullopt;
  using K = RowStep::Kind;
  const DType t = n.outputs[0]->meta.dtype;
  const std::string y = var(n.outputs[0]);
  const int last = int(n.inputs[0]->meta.sizes.size()) - 1;
  const kir::Index cols = n.inputs[0]->meta.sizes.back();
  RowDecomposition d;
  Emit out{d.out, t, "y"};
  switch (n.op) {
    case OpId::softmax: {
      // The exponentials are kept in the row: the last pass only scales them.
      RowStep mx = step(K::Max, "mx"), sum = step(K::Sum, "sum"), inv = step(K::Let, "inv");
      mx.value = x;
      Emit e{sum.body, t, "sum"};
      sum.value = e.call("ExpFtz", {e.call("Sub", {x, "mx"})});
      sum.keep = true;
      Emit i{inv.body, t, "inv"};
      inv.value = i.call("Div", {i.constant(1), "sum"});
      d.steps = {mx, sum, inv};
      out.call("Mul", {out.kept(), "inv"}, y);
      return d;
    }
    case OpId::log_softmax: {
      // (x - max) - log(sum), not x - (max + log(sum)), which loses small results.
      RowStep mx = step(K::Max, "mx"), sum = step(K::Sum, "sum"), lse = step(K::Let, "lse");
      mx.value = x;
      Emit e{sum.body, t, "sum"};
      sum.value = e.call("ExpFtz", {e.call("Sub", {x, "mx"})});
      Emit l{lse.body, t, "lse"};
      lse.value = l.call("Log", {"sum"});
      d.steps = {mx, sum, lse};
      out.call("Sub", {out.call("Sub", {x, "mx"}), "lse"}, y);
      return d;
    }
    case OpId::layer_norm: {
      RowStep sx = step(K::Sum, "sx"), mu = step(K::Let, "mu"), sq = step(K::Sum, "sq"),
              rs = step(K::Let, "rs");
      sx.value = x;
      Emit m{mu.body, t, "mu"};
      mu.value = m.call("Div", {"sx", m.size(cols)});
      Emit q{sq.body, t, "sq"};
      const std::string c = q.call("Sub", {x, "mu"});
      sq.value = q.call("Mul", {c, c});
      Emit r{rs.body, t, "rs"};
      const std::string var_eps =
          r.call("Add", {r.call("Div", {"sq", r.size(cols)}), r.constant(n.attrs.value)});
      rs.value = r.call("Div", {r.constant(1), r.call("Sqrt", {var_eps})});
      d.steps = {sx, mu, sq, rs};
      const bool w = n.inputs.size() > 1, b = n.inputs.size() > 2;
      std::string v = out.call("Mul", {out.call("Sub", {x, "mu"}), "rs"}, w ? "" : y);
      if (w) v = out.call("Mul", {v, out.load_column(buffer_of_input(1), last)}, b ? "" : y);
      if (b) out.call("Add", {v, out.load_column(buffer_of_input(2), last)}, y);
      d.stat_outputs = {{1, "mu"}, {2, "rs"}};
      return d;
    }
    case OpId::sum: {  // over the last dim (can_fuse_row checks): one value per row
      RowStep s = step(K::Sum, "s");
      s.value = x;
      d.steps = {s};
      out.call("Identity", {"s"}, y);
      return d;
    }
    case OpId::mean: {
      RowStep s = step(K::Sum, "s"), m = step(K::Let, "m");
      s.value = x;
      Emit e{m.body, t, "m"};
      m.value = e.call("Div", {"s", e.size(cols)});
      d.steps = {s, m};
      out.call("Identity", {"m"}, y);
      return d;
    }
    default:
      return std::nullopt;
  }
}

}  // namespace ember::compiler
