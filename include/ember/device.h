// Devices: where a tensor's storage lives.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

namespace ember {

enum class DeviceType : uint8_t { CPU, CUDA };

struct Device {
  DeviceType type = DeviceType::CPU;
  int index = 0;
  bool operator==(const Device&) const = default;
  // "cpu" or "cuda:N".
  std::string str() const {
    return type == DeviceType::CPU ? "cpu" : "cuda:" + std::to_string(index);
  }
};

inline const Device kCPU{DeviceType::CPU, 0};

// "cpu", "cuda" (cuda:0) or "cuda:N"; anything else is an Error saying what is accepted.
Device parse_device(std::string_view text);

}  // namespace ember
