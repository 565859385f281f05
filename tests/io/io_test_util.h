// Helpers for the io tests: a scratch directory removed at the end, file bytes in and out,
// and a way to assert that a call throws ember::Error whose message mentions something.
#pragma once
#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "ember/error.h"

namespace ember::test {

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "ember-io-XXXXXX").string();
    if (!mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed");
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::permissions(path_, std::filesystem::perms::owner_all,
                                 std::filesystem::perm_options::add, ec);
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }
  // Names of everything in the directory, sorted.
  std::vector<std::string> entries() const {
    std::vector<std::string> out;
    for (const auto& e : std::filesystem::directory_iterator(path_)) {
      out.push_back(e.path().filename().string());
    }
    std::sort(out.begin(), out.end());
    return out;
  }

 private:
  std::string path_;
};

inline std::vector<std::byte> read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::vector<char> c((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::vector<std::byte> out(c.size());
  std::memcpy(out.data(), c.data(), c.size());
  return out;
}

inline void write_bytes(const std::string& path, const std::vector<std::byte>& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
}

}  // namespace ember::test

// Asserts that `stmt` throws ember::Error and that its message contains `needle`.
#define EXPECT_ERROR_WITH(stmt, needle)                                           \
  do {                                                                            \
    try {                                                                         \
      stmt;                                                                       \
      ADD_FAILURE() << "expected ember::Error mentioning \"" << (needle) << "\""; \
    } catch (const ::ember::Error& e) {                                           \
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos)            \
          << "message: " << e.what() << "\nexpected to mention: " << (needle);    \
    }                                                                             \
  } while (0)

#include "core/make_tensor.h"
#include "ember/tensor.h"

namespace ember::test {

// A tensor whose bytes follow a seeded pattern (booleans stay 0 or 1).
inline Tensor patterned_tensor(const Shape& shape, DType dtype, uint32_t seed) {
  Tensor t = make_tensor(shape, dtype);
  auto* p = static_cast<uint8_t*>(t.data_ptr());
  const size_t nbytes = size_t(t.numel()) * dtype_size(dtype);
  uint32_t s = seed * 2654435761u + 1;
  for (size_t i = 0; i < nbytes; ++i) {
    s = s * 1664525u + 1013904223u;
    p[i] = uint8_t(s >> 24);
    if (dtype == DType::Bool) p[i] &= 1;
  }
  return t;
}

// The bytes of a tensor's elements in row-major order, read through its strides.
inline std::vector<std::byte> logical_bytes(const Tensor& t) {
  const size_t item = dtype_size(t.dtype());
  std::vector<std::byte> out;
  const int64_t n = t.numel();
  if (n == 0) return out;
  const auto* base = static_cast<const std::byte*>(t.data_ptr());
  std::vector<int64_t> idx(size_t(t.dim()), 0);
  for (int64_t e = 0; e < n; ++e) {
    int64_t off = 0;
    for (int64_t d = 0; d < t.dim(); ++d) off += idx[size_t(d)] * t.stride(d);
    out.insert(out.end(), base + off * int64_t(item), base + (off + 1) * int64_t(item));
    for (int64_t d = t.dim() - 1; d >= 0; --d) {
      if (++idx[size_t(d)] < t.size(d)) break;
      idx[size_t(d)] = 0;
    }
  }
  return out;
}

}  // namespace ember::test
