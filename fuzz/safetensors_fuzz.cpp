// libFuzzer target for the safetensors reader: any input must either parse or raise
// ember::Error (any other exception, crash or sanitizer report is a bug), and whatever
// parses must survive a write/read round trip unchanged.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <span>

#include "ember/io.h"

namespace {

std::vector<std::byte> tensor_bytes(const ember::Tensor& t) {
  std::vector<std::byte> out(size_t(t.numel()) * ember::dtype_size(t.dtype()));
  if (!out.empty()) std::memcpy(out.data(), t.data_ptr(), out.size());
  return out;
}

void check_round_trip(const ember::io::TensorFile& f) {
  std::vector<std::byte> again = ember::io::serialize_safetensors(f.tensors, f.metadata);
  ember::io::TensorFile g = ember::io::parse_safetensors(again, "round trip");
  if (g.metadata != f.metadata || g.tensors.size() != f.tensors.size()) std::abort();
  for (size_t i = 0; i < f.tensors.size(); ++i) {
    const auto& [name, t] = f.tensors[i];
    const auto& [name2, t2] = g.tensors[i];
    if (name != name2 || t.dtype() != t2.dtype() || t.sizes() != t2.sizes()) std::abort();
    if (tensor_bytes(t) != tensor_bytes(t2)) std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  ember::io::TensorFile f;
  try {
    f = ember::io::parse_safetensors(bytes, "fuzz input");
  } catch (const ember::Error&) {
    return 0;
  }
  check_round_trip(f);
  return 0;
}
