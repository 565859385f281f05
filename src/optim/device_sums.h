// Adding up one 0-dim tensor per parameter, read on the host once per device instead of once a
// parameter (a read of a GPU value waits for the device): gradient clipping's squared norms,
// the loss scaler's inf/NaN probes.
#pragma once
#include <vector>

#include "ember/tensor.h"

namespace ember::optim {

class DeviceSums {
 public:
  // Adds a 0-dim float64 tensor to its device's running sum (in the order given).
  void add(const Tensor& value);
  // The sums of every device, added on the host.
  double total() const;

 private:
  std::vector<Tensor> sums_;  // one per device
};

}  // namespace ember::optim
