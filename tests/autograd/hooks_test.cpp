// Autograd's hooks: post-accumulate-grad hooks on leaves (run once per backward, after the sum,
// in registration order, removable) and callbacks queued during a backward (run after its last
// node, in order, queuing more allowed).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "ember/ember.h"
#include "support/expect_error.h"

namespace ember {
namespace {

TEST(AutogradHooks, PostAccumulateHookSeesTheSummedGrad) {
  Tensor w = tensor({1, 2}, DType::Float64).requires_grad_();
  std::vector<std::vector<double>> seen;
  register_post_accumulate_grad_hook(w, [&](const Tensor& leaf) {
    seen.push_back(leaf.grad().to_vector<double>());
  });
  // w is used twice: its AccumulateGrad runs once, with the sum of both uses.
  ((w * 3.0).sum() + (w * w).sum()).backward();
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0], (std::vector<double>{5, 7}));
  (w * 1.0).sum().backward();  // accumulates into .grad: the hook sees the new total
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[1], (std::vector<double>{6, 8}));
}

TEST(AutogradHooks, HooksRunInOrderAndCanBeRemoved) {
  Tensor w = tensor({1}, DType::Float32).requires_grad_();
  std::string order;
  const uint64_t a = register_post_accumulate_grad_hook(w, [&](const Tensor&) { order += "a"; });
  register_post_accumulate_grad_hook(w, [&](const Tensor&) { order += "b"; });
  (w * 2.0).sum().backward();
  EXPECT_EQ(order, "ab");
  remove_post_accumulate_grad_hook(w, a);
  remove_post_accumulate_grad_hook(w, a);  // already gone: nothing happens
  (w * 2.0).sum().backward();
  EXPECT_EQ(order, "abb");
}

TEST(AutogradHooks, OnlyLeavesThatRequireGradTakeHooks) {
  Tensor plain = tensor({1});
  test::expect_error([&] { register_post_accumulate_grad_hook(plain, [](const Tensor&) {}); },
                     {"register_post_accumulate_grad_hook", "must be a leaf that requires grad"});
  Tensor w = tensor({1}).requires_grad_();
  Tensor y = w * 2.0;
  test::expect_error([&] { register_post_accumulate_grad_hook(y, [](const Tensor&) {}); },
                     "must be a leaf");
}

TEST(AutogradHooks, CallbacksRunAfterTheLastNode) {
  Tensor a = tensor({1}).requires_grad_(), b = tensor({2}).requires_grad_();
  std::vector<std::string> log;
  auto note = [&](const std::string& name) {
    return [&log, name](const Tensor&) {
      log.push_back(name);
      if (log.size() == 1)  // from the first hook: runs after both leaves got their grads
        queue_backward_callback([&log] {
          log.push_back("end");
          queue_backward_callback([&log] { log.push_back("after end"); });
        });
    };
  };
  register_post_accumulate_grad_hook(a, note("a"));
  register_post_accumulate_grad_hook(b, note("b"));
  (a * b).sum().backward();
  ASSERT_EQ(log.size(), 4u);
  EXPECT_EQ(log[2], "end");
  EXPECT_EQ(log[3], "after end");
}

TEST(AutogradHooks, QueueingOutsideABackwardIsAnError) {
  test::expect_error([] { queue_backward_callback([] {}); },
                     {"queue_backward_callback", "no backward is running"});
}

}  // namespace
}  // namespace ember
