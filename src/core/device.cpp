// Devices by name, as command lines and configs write them.
#include <charconv>

#include "ember/device.h"
#include "ember/error.h"

namespace ember {

Device parse_device(std::string_view text) {
  if (text == "cpu") return kCPU;
  if (text == "cuda") return Device{DeviceType::CUDA, 0};
  if (text.rfind("cuda:", 0) == 0) {
    std::string_view num = text.substr(5);
    int index = -1;
    auto [end, ec] = std::from_chars(num.data(), num.data() + num.size(), index);
    if (ec == std::errc() && end == num.data() + num.size() && !num.empty() && index >= 0)
      return Device{DeviceType::CUDA, index};
  }
  EMBER_FAIL("unknown device '", text, "'; expected cpu, cuda or cuda:N (N a device index)");
}

}  // namespace ember
