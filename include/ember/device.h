// Devices: where a tensor's storage lives.
#pragma once
#include <string>

namespace ember {

enum class DeviceType : uint8_t { CPU, CUDA };

struct Device {
  DeviceType type = DeviceType::CPU;
  int index = 0;
  bool operator==(const Device&) const = default;
  std::string str() const {
    return type == DeviceType::CPU ? "cpu" : "cuda:" + std::to_string(index);
  }
};

inline const Device kCPU{DeviceType::CPU, 0};

}  // namespace ember
