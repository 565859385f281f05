#include <iostream>
#include "ember/ember.h"
int main() {
  using namespace ember;
  Tensor a = tensor({1, 2, 3}).requires_grad_();
  Tensor b = tensor({4, 5, 6});
  Tensor c = (a * b + 1.0).sum();
  c.backward();
  std::cout << c << "\n" << a.grad() << "\n";
}
