// safetensors internals shared by the file and memory readers, the writer and the tests:
// dtype names, the validated header, and the checks every reader runs.
#pragma once
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ember/io.h"

namespace ember::io {

// Limits of what a reader accepts. The header cap is the reference implementation's.
inline constexpr uint64_t kMaxHeaderBytes = 100'000'000;
inline constexpr size_t kMaxTensorRank = 64;
inline constexpr int kMaxJsonDepth = 8;

std::string_view safetensors_dtype_name(DType t);  // "F32", "BF16", "BOOL", ...
// ember's dtype for a safetensors dtype name; nullopt for names ember lacks.
std::optional<DType> dtype_from_safetensors(std::string_view name);

// One tensor as the header describes it, after validation.
struct TensorEntry {
  std::string name;
  DType dtype = DType::Float32;
  Shape shape;
  uint64_t begin = 0;  // byte offsets relative to the data buffer
  uint64_t end = 0;
};

struct SafetensorsHeader {
  std::vector<TensorEntry> entries;  // in the order of the JSON header
  Metadata metadata;
  uint64_t data_start = 0;  // 8 + header length: where the data buffer begins in the file
};

// Reads the 8-byte length prefix and checks it against the file size.
uint64_t check_header_length(std::span<const std::byte> prefix8, uint64_t file_size,
                             std::string_view source);
// Parses and validates the JSON header against a data buffer of `buffer_size` bytes: every
// tensor's dtype, shape, offsets and byte count, no overlaps, no gaps, nothing left over.
SafetensorsHeader parse_header(std::string_view json, uint64_t header_length, uint64_t buffer_size,
                               std::string_view source);

}  // namespace ember::io
