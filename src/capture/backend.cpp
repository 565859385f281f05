// Capture backends: the registry and the "eager" backend, which interprets a captured graph
// through the dispatcher (so eager kernels run and autograd records as in eager mode).
#include <mutex>

#include "capture/capture.h"
#include "compiler/compiled_graph.h"

namespace ember::capture {

namespace {

class EagerRunnable : public Runnable {
 public:
  explicit EagerRunnable(std::shared_ptr<const graph::Graph> g) : g_(std::move(g)) {}
  std::vector<Tensor> run(const std::vector<Tensor>& inputs) const override {
    return g_->interpret(inputs);
  }

 private:
  std::shared_ptr<const graph::Graph> g_;
};

class EagerBackend : public Backend {
 public:
  std::string name() const override { return "eager"; }
  bool bitwise_eager() const override { return true; }
  std::shared_ptr<const Runnable> compile(std::shared_ptr<const graph::Graph> g) override {
    return std::make_shared<EagerRunnable>(std::move(g));
  }
};

struct Registry {
  std::mutex mu;
  std::vector<std::unique_ptr<Backend>> backends;
  Registry() {
    backends.push_back(std::make_unique<EagerBackend>());
    backends.push_back(compiler::make_compiler_backend());  // generated C++ (src/compiler/)
    backends.push_back(compiler::make_compiler_backend(/*reduce_overhead=*/true));
  }
};
Registry& registry() {
  static Registry r;
  return r;
}

}  // namespace

Backend& backend(const std::string& name) {
  Registry& r = registry();
  std::lock_guard<std::mutex> g(r.mu);
  std::string known;
  for (auto& b : r.backends) {
    if (b->name() == name) return *b;
    known += (known.empty() ? "" : ", ") + b->name();
  }
  EMBER_FAIL("compile: unknown backend \"", name, "\"; available: ", known);
}

void register_backend(std::unique_ptr<Backend> b) {
  Registry& r = registry();
  std::lock_guard<std::mutex> g(r.mu);
  for (auto& old : r.backends) {
    if (old->name() == b->name()) {
      old = std::move(b);
      return;
    }
  }
  r.backends.push_back(std::move(b));
}

}  // namespace ember::capture
