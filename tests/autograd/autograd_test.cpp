// Autograd: accumulation, graph shapes, retain_graph, grad mode, detach, and the rules for
// in-place ops (leaves, saved tensors, non-leaf updates, copy_).
#include <gtest/gtest.h>

#include <cmath>

#include "core/allocator.h"
#include "ember/ember.h"

namespace ember {
namespace {

std::vector<double> vals(const Tensor& t) {
  return t.to_vector<double>();
}

Tensor leaf(std::initializer_list<double> v) {
  return tensor(v, DType::Float64).requires_grad_();
}

void expect_near(const std::vector<double>& got, const std::vector<double>& want,
                 double tol = 1e-12) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], tol) << "element " << i;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// ---- accumulation and graph shapes ----

TEST(Autograd, BackwardAccumulatesIntoGradAcrossCalls) {
  Tensor x = leaf({1, -2, 3});
  (x * x).sum().backward();
  expect_near(vals(x.grad()), {2, -4, 6});
  (x * 3.0).sum().backward();  // a second, separate graph adds to .grad
  expect_near(vals(x.grad()), {5, -1, 9});
  x.set_grad(Tensor());  // clearing starts over
  (x * 3.0).sum().backward();
  expect_near(vals(x.grad()), {3, 3, 3});
  EXPECT_TRUE(x.is_leaf());
  EXPECT_EQ(x.grad().dtype(), DType::Float64);
  EXPECT_FALSE(x.grad().requires_grad());
}

// A leaf's first grad is taken without a copy when nothing else holds it; grads that other
// leaves, views or the caller share are copied, so no two .grad tensors alias each other or
// the caller's tensors.
TEST(Autograd, FirstGradsNeverAliasOtherTensors) {
  Tensor a = leaf({1, 2}), b = leaf({3, 4});
  (a + b).sum().backward();  // add hands one grad tensor to both leaves
  a.grad().add_(tensor({10.0, 10.0}, DType::Float64));
  expect_near(vals(b.grad()), {1, 1});
  expect_near(vals(a.grad()), {11, 11});

  Tensor x = leaf({1, 2, 3});
  Tensor seed = tensor({1.0, 2.0, 3.0}, DType::Float64);
  (x + 0.0).backward(seed);  // the seed passes through unchanged
  x.grad().mul_(tensor({2.0, 2.0, 2.0}, DType::Float64));
  expect_near(vals(seed), {1, 2, 3});
  expect_near(vals(x.grad()), {2, 4, 6});

  Tensor w = leaf({1, 2, 3, 4});
  Tensor big = leaf({5, 6});
  // w's grad is a fresh tensor nobody else holds: later accumulation still adds correctly.
  (w * 2.0).sum().backward();
  (w * 3.0).sum().backward();
  expect_near(vals(w.grad()), {5, 5, 5, 5});
  (big * big).sum().backward();
  expect_near(vals(big.grad()), {10, 12});
}

// A first grad that arrives as a view covering all of its memory (a reshape's grad, the
// reshaped result held by nothing else) is taken as it is, not copied: backward allocates the
// one grad, and the grad is right.
TEST(Autograd, AWholeViewGradIsTakenWithoutACopy) {
  const int64_t n = 1 << 20;
  Tensor w = randn({1024, 1024}, DType::Float32).requires_grad_();
  Tensor c = randn({n}, DType::Float32);
  Tensor loss = (w.reshape({n}) * c).sum();
  cpu_reset_peak();
  const size_t before = cpu_allocator_stats().allocated_bytes;
  loss.backward();
  const double peak = double(cpu_allocator_stats().peak_allocated_bytes - before);
  EXPECT_LT(peak, 1.5 * double(n) * 4) << "the grad was copied";
  EXPECT_EQ((w.grad().reshape({n}) - c).abs().amax().item(), 0.0);
  // It is the leaf's own: changing it leaves c alone.
  w.grad().mul_(2.0);
  EXPECT_EQ((w.grad().reshape({n}) - c * 2.0).abs().amax().item(), 0.0);
}

TEST(Autograd, DiamondGraphSumsBothPaths) {
  Tensor x = leaf({0.5, -1});
  Tensor y = x * 2.0;  // shared by both branches
  Tensor a = y * 3.0;
  Tensor b = y.exp();
  (a + b).sum().backward();  // d/dx = 2 * (3 + exp(2x))
  std::vector<double> xs = vals(x.detach());
  expect_near(vals(x.grad()), {2 * (3 + std::exp(2 * xs[0])), 2 * (3 + std::exp(2 * xs[1]))});
  // The same tensor used twice by one op.
  Tensor z = leaf({3});
  (z * z * z).sum().backward();  // 3 z^2
  expect_near(vals(z.grad()), {27});
}

TEST(Autograd, GradientsOfSeveralOutputsAndExplicitSeeds) {
  Tensor x = leaf({1, 2});
  Tensor y = x * 3.0, z = x * x;
  backward({y, z}, {tensor({1, 10}, DType::Float64), tensor({100, 1000}, DType::Float64)});
  expect_near(vals(x.grad()), {3 + 200, 30 + 4000});
  // One output computed from the other: its gradient arrives before the other's node runs.
  Tensor a = leaf({2});
  Tensor b = a * a;
  Tensor c = b * 3.0;
  backward({b, c});  // d(b + c)/da = 2a + 6a
  expect_near(vals(a.grad()), {16});
  // The same output twice counts twice; a leaf as the output gets the seed itself.
  Tensor d = leaf({1, 1});
  backward({d, d}, {tensor({1, 2}, DType::Float64), tensor({10, 20}, DType::Float64)});
  expect_near(vals(d.grad()), {11, 22});
  // A non-scalar output needs its gradient passed explicitly.
  Tensor w = leaf({1, 2, 3});
  (w * 2.0).backward(tensor({1, 0, -1}, DType::Float64));
  expect_near(vals(w.grad()), {2, 0, -2});
}

TEST(Autograd, RetainGraphAllowsASecondBackward) {
  Tensor x = leaf({2, 3});
  Tensor loss = (x * x).sum();
  loss.backward(Tensor(), /*retain_graph=*/true);
  loss.backward(Tensor(), /*retain_graph=*/false);
  expect_near(vals(x.grad()), {8, 12});
  std::string err = error_of([&] { loss.backward(); });
  EXPECT_NE(err.find("second time"), std::string::npos) << err;
  EXPECT_NE(err.find("retain_graph"), std::string::npos) << err;
  expect_near(vals(x.grad()), {8, 12});  // the failed call added nothing
}

TEST(Autograd, SecondBackwardWithoutRetainGraphRaises) {
  Tensor x = leaf({1});
  Tensor loss = (x.exp() + x).sum();
  loss.backward();
  std::string err = error_of([&] { loss.backward(); });
  EXPECT_NE(err.find("backward of"), std::string::npos) << err;
  EXPECT_NE(err.find("retain_graph=true"), std::string::npos) << err;
}

TEST(Autograd, NonScalarWithoutGradientRaises) {
  Tensor x = leaf({1, 2});
  std::string err = error_of([&] { (x * 2.0).backward(); });
  EXPECT_NE(err.find("shape [2]"), std::string::npos) << err;
  EXPECT_NE(err.find("pass the gradient explicitly"), std::string::npos) << err;
  err = error_of([&] { (x * 2.0).backward(tensor({1, 2, 3}, DType::Float64)); });
  EXPECT_NE(err.find("does not match output shape"), std::string::npos) << err;
  err = error_of([&] { tensor({1.0}).backward(); });
  EXPECT_NE(err.find("does not require grad"), std::string::npos) << err;
}

// ---- stopping gradients ----

TEST(Autograd, DetachStopsGradients) {
  Tensor x = leaf({1, 2});
  Tensor d = x.detach();
  EXPECT_FALSE(d.requires_grad());
  EXPECT_TRUE(d.is_leaf());
  EXPECT_FALSE((d * 2.0).requires_grad());
  (x * 2.0 + x.detach() * x.detach() * 5.0).sum().backward();
  expect_near(vals(x.grad()), {2, 2});
}

TEST(Autograd, NoGradGuardRecordsNothing) {
  Tensor x = leaf({1, 2});
  EXPECT_TRUE(is_grad_enabled());
  {
    NoGradGuard g;
    EXPECT_FALSE(is_grad_enabled());
    Tensor y = x * 2.0;
    EXPECT_FALSE(y.requires_grad());
    EXPECT_EQ(y.grad_fn(), nullptr);
    {
      EnableGradGuard on;
      EXPECT_TRUE((x * 2.0).requires_grad());
      NoGradGuard nested;
      EXPECT_FALSE((x * 2.0).requires_grad());
    }
    EXPECT_FALSE(is_grad_enabled());
  }
  EXPECT_TRUE(is_grad_enabled());
  EXPECT_TRUE((x * 2.0).requires_grad());
  // Backward itself records no history for the gradients it computes.
  Tensor y = (x * x).sum();
  y.backward();
  EXPECT_FALSE(x.grad().requires_grad());
  EXPECT_EQ(x.grad().grad_fn(), nullptr);
}

// ---- in-place ops ----

TEST(AutogradInplace, LeafRequiringGradCannotBeModified) {
  Tensor x = leaf({1, 2});
  for (auto& f : std::vector<std::function<void()>>{[&] {
                                                      x.add_(tensor({1, 1}, DType::Float64));
                                                    },
                                                    [&] { x.mul_(2.0); },
                                                    [&] {
                                                      x.copy_(tensor({5, 5}, DType::Float64));
                                                    },
                                                    [&] { x.fill_(0); }, [&] { x.zero_(); }}) {
    std::string err = error_of(f);
    EXPECT_NE(err.find("leaf"), std::string::npos) << err;
    EXPECT_NE(err.find("NoGradGuard"), std::string::npos) << err;
  }
  expect_near(vals(x.detach()), {1, 2});
  // Under NoGradGuard the update is allowed (an optimizer step) and bumps the version.
  uint32_t v = x.version();
  {
    NoGradGuard g;
    x.mul_(3.0);
    x.add_(1.0);
  }
  EXPECT_EQ(x.version(), v + 2);
  expect_near(vals(x.detach()), {4, 7});
  EXPECT_TRUE(x.requires_grad());
  EXPECT_TRUE(x.is_leaf());
}

TEST(AutogradInplace, ModifyingASavedTensorMakesBackwardRaise) {
  Tensor x = leaf({1, 2});
  Tensor a = x * 2.0;
  Tensor b = a * a;  // mul saves both inputs: a, at version 0
  a.add_(1.0);
  std::string err = error_of([&] { b.sum().backward(); });
  EXPECT_NE(err.find("backward of mul"), std::string::npos) << err;
  EXPECT_NE(err.find("version 0"), std::string::npos) << err;
  EXPECT_NE(err.find("now version 1"), std::string::npos) << err;

  // exp saves its output; writing into the output through a view is caught the same way.
  Tensor y = leaf({0.5});
  Tensor e = y.exp();
  {
    NoGradGuard g;
    e.view({1}).mul_(2.0);
  }
  err = error_of([&] { e.sum().backward(); });
  EXPECT_NE(err.find("backward of exp"), std::string::npos) << err;
  EXPECT_NE(err.find("output 0"), std::string::npos) << err;

  // A saved leaf modified under NoGradGuard.
  Tensor w = leaf({3});
  Tensor p = w * w;
  {
    NoGradGuard g;
    w.add_(1.0);
  }
  err = error_of([&] { p.sum().backward(); });
  EXPECT_NE(err.find("modified by an in-place op"), std::string::npos) << err;
}

TEST(AutogradInplace, UpdatesOfNonLeafTensorsGetCorrectGradients) {
  Tensor x = leaf({1, 2, 3});
  Tensor x2 = leaf({-1, 0.5, 2});
  Tensor y = x * 2.0;
  y.add_(1.0);  // y = 2x + 1
  Tensor y2 = x2 * 3.0;
  y.mul_(y2);  // y = (2x + 1) * 3 x2
  EXPECT_FALSE(y.is_leaf());
  EXPECT_NE(y.grad_fn(), nullptr);
  expect_near(vals(y.detach()), {-9, 7.5, 42});
  y.sum().backward();
  expect_near(vals(x.grad()), {2 * 3 * -1.0, 2 * 3 * 0.5, 2 * 3 * 2.0});
  expect_near(vals(x2.grad()), {3 * 3.0, 3 * 5.0, 3 * 7.0});

  // Squaring in place (the input aliases the tensor written): d/dz (2z)^2 = 8z.
  Tensor z = leaf({1, -2});
  Tensor s = z * 2.0;
  s.mul_(s);
  s.sum().backward();
  expect_near(vals(z.grad()), {8, -16});

  // Chains of in-place updates keep all earlier steps: ((u + 1) * 3 - u) / 2.
  Tensor u = leaf({2});
  Tensor t = u * 1.0;
  t.add_(1.0);
  t.mul_(3.0);
  t.sub_(u);
  t.div_(tensor({2}, DType::Float64));
  t.sum().backward();
  expect_near(vals(u.grad()), {1});
}

TEST(AutogradInplace, CopyIntoATensorCutsItsHistory) {
  Tensor x = leaf({1, 2});
  Tensor y = x * 5.0;
  y.copy_(tensor({7, 8}, DType::Float64));  // constant values now
  EXPECT_FALSE(y.requires_grad());
  EXPECT_EQ(y.grad_fn(), nullptr);
  (y * x).sum().backward();  // only the direct use of x counts
  expect_near(vals(x.grad()), {7, 8});

  // Copying values that require grad: the gradient goes to the source, not the old history.
  Tensor a = leaf({1, 2});
  Tensor b = leaf({3, 4});
  Tensor c = a * 2.0;
  c.copy_(b * b);
  c.sum().backward();
  EXPECT_FALSE(a.grad().defined());
  expect_near(vals(b.grad()), {6, 8});

  // fill_ makes a non-leaf a constant as well.
  Tensor d = a * 3.0;
  d.fill_(1);
  EXPECT_FALSE(d.requires_grad());
}

TEST(AutogradInplace, ViewsOfTensorsWithHistoryAreNotUpdatedInPlace) {
  Tensor x = leaf({1, 2, 3});
  Tensor y = x * 2.0;
  std::string err = error_of([&] { y.slice(0, 0, 2).add_(1.0); });
  EXPECT_NE(err.find("view"), std::string::npos) << err;
  EXPECT_NE(err.find("add_"), std::string::npos) << err;
  err = error_of([&] { y.slice(0, 0, 2).fill_(0); });
  EXPECT_NE(err.find("fill_: in-place update of a view"), std::string::npos) << err;
  // Without grad mode, or for views of tensors without history, it is an ordinary write.
  {
    NoGradGuard g;
    y.slice(0, 0, 1).fill_(0);
  }
  Tensor plain = zeros({3});
  plain.slice(0, 1, 3).fill_(4);
  expect_near(vals(plain), {0, 4, 4});
}

TEST(AutogradInplace, ViewsTakenBeforeTheirBaseChangedAreRejected) {
  Tensor x = leaf({1, 2});
  Tensor base = x * 2.0;
  Tensor v = base.select(0, 0);
  Tensor vv = base.view({2}).slice(0, 0, 1);  // a view of a view
  Tensor early = v + 5.0;                     // used before the update: still right
  base.mul_(3.0);                             // v now holds 6 x0, but its history says 2 x0
  std::string err = error_of([&] { (v * 1.0).sum(); });
  EXPECT_NE(err.find("mul: input 0"), std::string::npos) << err;
  EXPECT_NE(err.find("take the view again"), std::string::npos) << err;
  err = error_of([&] { vv.sum(); });
  EXPECT_NE(err.find("out of date"), std::string::npos) << err;
  // Views taken after the update, and results computed before it, are fine.
  Tensor fresh = base.select(0, 0);
  (fresh * 1.0 + early).sum().backward();
  expect_near(vals(x.grad()), {6 + 2, 0});
  // copy_ replaces the base's history too.
  Tensor b2 = x * 1.0;
  Tensor w = b2.slice(0, 1, 2);
  b2.copy_(tensor({4, 4}, DType::Float64));
  EXPECT_THROW(w * 2.0, Error);
  // Views of leaves stay valid after updates under NoGradGuard (an optimizer step).
  Tensor p = leaf({1, 2});
  Tensor pv = p.select(0, 1);
  {
    NoGradGuard g;
    p.mul_(2.0);
  }
  (pv * 3.0).sum().backward();
  expect_near(vals(p.grad()), {0, 3});
}

TEST(Autograd, IntegerOutputsAndGradDtypes) {
  Tensor x = tensor({1.5, 2.5}).requires_grad_();  // float32 leaf
  Tensor loss = (x.to(DType::Float64) * 2.0).sum();
  EXPECT_EQ(loss.dtype(), DType::Float64);
  loss.backward();
  EXPECT_EQ(x.grad().dtype(), DType::Float32);  // grads come back in the leaf's dtype
  expect_near(vals(x.grad()), {2, 2});
  EXPECT_FALSE(x.to(DType::Int64).requires_grad());  // integers carry no gradient
}

}  // namespace
}  // namespace ember
