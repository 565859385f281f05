// An MLP learns which points of the plane lie inside the unit circle: 150 AdamW steps run
// eagerly, then the same training continues with the loss compiled by ember::compile (its
// forward and backward run as generated C++ kernels).
#include <chrono>
#include <cstdio>
#include <memory>

#include "ember/compile.h"
#include "ember/ember.h"
#include "ember/nn.h"
#include "ember/optim.h"

using namespace ember;

// Two hidden layers of GELU units, two logits.
class Classifier : public nn::Module {
 public:
  Classifier() : nn::Module("Classifier") {
    fc1 = register_module("fc1", std::make_shared<nn::Linear>(2, 64));
    fc2 = register_module("fc2", std::make_shared<nn::Linear>(64, 64));
    out = register_module("out", std::make_shared<nn::Linear>(64, 2));
  }
  Tensor forward(const Tensor& x) const {
    return out->forward(fc2->forward(fc1->forward(x).gelu()).gelu());
  }
  std::shared_ptr<nn::Linear> fc1, fc2, out;
};

// Points in [-2, 2]^2, labelled 1 inside the unit circle.
std::pair<Tensor, Tensor> make_batch(int64_t n) {
  Tensor x = rand({n, 2}) * 4.0 - 2.0;
  Tensor y = (x * x).sum({1}).lt(1.0).to(DType::Int64);
  return {x, y};
}

double accuracy(const Classifier& model, const Tensor& x, const Tensor& y) {
  NoGradGuard no_grad;
  return model.forward(x).argmax(1).eq(y).to(DType::Float32).mean().item();
}

int main() {
  manual_seed(0);
  auto model = std::make_shared<Classifier>();
  optim::AdamW opt(optim::decay_groups(*model, 0.0), 1e-2);
  auto loss_of = [&](const Tensor& x, const Tensor& y) {
    return cross_entropy(model->forward(x), y);
  };
  auto compiled_loss = compile(loss_of);
  auto [x_test, y_test] = make_batch(2000);

  for (bool compiled : {false, true}) {
    auto start = std::chrono::steady_clock::now();
    double last = 0;
    for (int step = 0; step < 150; ++step) {
      auto [x, y] = make_batch(256);
      opt.zero_grad();
      Tensor loss = compiled ? compiled_loss(x, y) : loss_of(x, y);
      loss.backward();
      opt.step();
      last = loss.item();
    }
    auto elapsed = std::chrono::steady_clock::now() - start;
    double ms = std::chrono::duration<double, std::milli>(elapsed).count();
    std::printf("%-8s 150 steps in %6.0f ms%s, loss %.4f, test accuracy %.3f\n",
                compiled ? "compiled" : "eager", ms, compiled ? " (compiling included)" : "",
                last, accuracy(*model, x_test, y_test));
  }
  CompileStats st = compiled_loss.stats();
  std::printf("compiled loss: %lld trace, %lld graph break(s), %lld cached call(s)\n",
              (long long)st.traces, (long long)st.breaks, (long long)st.cache_hits);
  return accuracy(*model, x_test, y_test) > 0.9 ? 0 : 1;
}
