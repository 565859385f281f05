// store_only_changes (store_only_changes.h).
#include "compiler/store_only_changes.h"

#include <algorithm>
#include <optional>
#include <set>

namespace ember::compiler {

using kir::Stmt;

bool store_only_changes(kir::Kernel& k, int target) {
  if (k.rows || k.pattern || k.epilogue || k.body.empty()) return false;
  const auto stores = std::count_if(k.body.begin(), k.body.end(),
                                    [](const Stmt& s) { return s.kind == Stmt::Kind::Store; });
  Stmt& store = k.body.back();
  if (stores != 1 || store.kind != Stmt::Kind::Store || !store.store_if.empty()) return false;
  auto defining = [&](const std::string& v) -> const Stmt* {
    for (const Stmt& s : k.body)
      if (s.kind != Stmt::Kind::Store && s.out == v) return &s;
    return nullptr;
  };
  // The stored value through copies (clone), then the where.
  const Stmt* s = defining(store.args[0]);
  while (s && s->kind == Stmt::Kind::Call && s->functor == "Identity") s = defining(s->args[0]);
  if (!s || s->kind != Stmt::Kind::Call || s->functor != "Where" || s->args.size() != 3)
    return false;
  // The same element as the store's: offsets equal once coordinates over dims of size 1 (0
  // there, which one side may leave out) are set to 0.
  auto at = [&](const kir::Index& e) {
    return e.substitute([&](int id) -> std::optional<kir::Index> {
      const int d = id - kir::kCoord;
      if (d >= 0 && size_t(d) < k.domain.size() && k.domain[size_t(d)] == kir::Index(1))
        return kir::Index(0);
      return std::nullopt;
    });
  };
  const Stmt* kept = defining(s->args[2]);
  if (!kept || kept->kind != Stmt::Kind::Load || kept->buffer != target || !kept->when.empty() ||
      kept->iota || at(kept->index) != at(store.index) || kept->dtype != store.dtype)
    return false;
  store.store_if = s->args[0];
  store.args[0] = s->args[1];
  // Drop what the store no longer needs (the where, the copies, the input's load).
  std::set<std::string> needed{store.args[0], store.store_if};
  std::vector<Stmt> body;
  for (auto it = k.body.rbegin(); it != k.body.rend(); ++it) {
    if (it->kind != Stmt::Kind::Store && !needed.count(it->out)) continue;
    for (const std::string& a : it->args) needed.insert(a);
    body.push_back(*it);
  }
  k.body.assign(body.rbegin(), body.rend());
  return true;
}

}  // namespace ember::compiler
