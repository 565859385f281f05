// safetensors: what is written comes back exactly (every dtype, any strides, 0-dim and empty
// tensors, metadata, order), and the bytes follow the public format.
#include "io/safetensors.h"

#include <gtest/gtest.h>

#include <cstring>

#include "ember/io.h"
#include "ember/ops.h"
#include "io/io_test_util.h"

namespace ember::test {
namespace {

using io::NamedTensors;

constexpr DType kAllDTypes[] = {DType::Bool,     DType::Int32,   DType::Int64,  DType::Float16,
                                DType::BFloat16, DType::Float32, DType::Float64};

void expect_same(const Tensor& got, const Tensor& want, const std::string& name) {
  ASSERT_TRUE(got.defined()) << name;
  EXPECT_EQ(got.dtype(), want.dtype()) << name;
  EXPECT_EQ(got.sizes(), want.sizes()) << name;
  // (The core reports fresh empty tensors of rank > 1 as non-contiguous; nothing to read there.)
  if (got.numel() > 0) {
    EXPECT_TRUE(got.is_contiguous()) << name;
  }
  EXPECT_EQ(logical_bytes(got), logical_bytes(want)) << name;
}

uint64_t le64(const std::vector<std::byte>& b) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | uint64_t(b[size_t(i)]);
  return v;
}

TEST(Safetensors, RoundTripsEveryDType) {
  TempDir dir;
  NamedTensors in;
  uint32_t seed = 1;
  for (DType t : kAllDTypes) {
    in.emplace_back(std::string(dtype_name(t)), patterned_tensor({3, 5}, t, seed++));
  }
  const std::string path = dir.file("all.safetensors");
  io::save_safetensors(path, in);
  io::TensorFile out = io::load_safetensors(path);
  ASSERT_EQ(out.tensors.size(), in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    EXPECT_EQ(out.tensors[i].first, in[i].first);
    expect_same(out.tensors[i].second, in[i].second, in[i].first);
  }
  EXPECT_TRUE(out.metadata.empty());
}

TEST(Safetensors, DTypeNamesAreTheFormatsOwn) {
  EXPECT_EQ(io::safetensors_dtype_name(DType::Float64), "F64");
  EXPECT_EQ(io::safetensors_dtype_name(DType::Float32), "F32");
  EXPECT_EQ(io::safetensors_dtype_name(DType::Float16), "F16");
  EXPECT_EQ(io::safetensors_dtype_name(DType::BFloat16), "BF16");
  EXPECT_EQ(io::safetensors_dtype_name(DType::Int64), "I64");
  EXPECT_EQ(io::safetensors_dtype_name(DType::Int32), "I32");
  EXPECT_EQ(io::safetensors_dtype_name(DType::Bool), "BOOL");
  for (DType t : kAllDTypes) {
    EXPECT_EQ(io::dtype_from_safetensors(io::safetensors_dtype_name(t)), t);
  }
  EXPECT_FALSE(io::dtype_from_safetensors("U8").has_value());
  EXPECT_FALSE(io::dtype_from_safetensors("f32").has_value());
}

TEST(Safetensors, NonContiguousTensorsAreStoredInLogicalOrder) {
  TempDir dir;
  Tensor base = patterned_tensor({4, 6}, DType::Float32, 7);
  Tensor big = patterned_tensor({2, 3, 4}, DType::Float64, 8);
  NamedTensors in = {
      {"transposed", base.t()},
      {"strided_slice", base.slice(1, 1, 6, 2)},
      {"offset_row", base.select(0, 2)},
      {"expanded", patterned_tensor({1, 3}, DType::Int64, 9).expand({4, 3})},
      {"permuted", big.permute({2, 0, 1})},
      {"inner_run", big.slice(1, 1, 3)},  // rows of contiguous memory with gaps between
  };
  for (const auto& [name, t] : in) {
    if (name == "offset_row") {
      EXPECT_GT(t.storage_offset(), 0);
    } else {
      EXPECT_FALSE(t.is_contiguous()) << name;
    }
  }
  const std::string path = dir.file("views.safetensors");
  io::save_safetensors(path, in);
  io::TensorFile out = io::load_safetensors(path);
  ASSERT_EQ(out.tensors.size(), in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    expect_same(out.at(in[i].first), in[i].second, in[i].first);
  }
}

TEST(Safetensors, ZeroDimAndEmptyTensors) {
  TempDir dir;
  NamedTensors in = {
      {"scalar", patterned_tensor({}, DType::Float64, 1)},
      {"empty", make_tensor({0}, DType::Float32)},
      {"empty_3d", make_tensor({3, 0, 2}, DType::Int64)},
      {"scalar_bool", patterned_tensor({}, DType::Bool, 2)},
      {"after", patterned_tensor({2}, DType::Float16, 3)},
  };
  const std::string path = dir.file("edge.safetensors");
  io::save_safetensors(path, in);
  io::TensorFile out = io::load_safetensors(path);
  ASSERT_EQ(out.tensors.size(), in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    EXPECT_EQ(out.tensors[i].first, in[i].first);
    expect_same(out.tensors[i].second, in[i].second, in[i].first);
  }
  EXPECT_EQ(out.at("scalar").dim(), 0);
  EXPECT_EQ(out.at("empty_3d").sizes(), (Shape{3, 0, 2}));

  io::save_safetensors(path, {});  // a file with no tensors at all is valid too
  io::TensorFile none = io::load_safetensors(path);
  EXPECT_TRUE(none.tensors.empty());
}

TEST(Safetensors, MetadataRoundTrips) {
  TempDir dir;
  io::Metadata md = {{"format", "pt"},
                     {"empty", ""},
                     {"unicode", "ünïcødé — ✓"},
                     {"json", R"({"n_layer": 4, "quote": "\"x\""})"},
                     {"newline", "a\nb\tc"}};
  const std::string path = dir.file("meta.safetensors");
  io::save_safetensors(path, {{"w", patterned_tensor({2}, DType::Float32, 1)}}, md);
  io::TensorFile out = io::load_safetensors(path);
  EXPECT_EQ(out.metadata, md);
}

TEST(Safetensors, HeaderFollowsTheFormat) {
  NamedTensors in = {{"flag", patterned_tensor({3}, DType::Bool, 1)},
                     {"half", patterned_tensor({3}, DType::Float16, 2)},
                     {"wide", patterned_tensor({2, 2}, DType::Float64, 3)},
                     {"mid", patterned_tensor({5}, DType::Int32, 4)}};
  std::vector<std::byte> bytes = io::serialize_safetensors(in, {{"k", "v"}});
  const uint64_t n = le64(bytes);
  EXPECT_EQ(n % 8, 0u) << "the data buffer starts 8-byte aligned";
  ASSERT_LE(8 + n, bytes.size());
  std::string json(reinterpret_cast<const char*>(bytes.data()) + 8, size_t(n));
  EXPECT_EQ(json.front(), '{');
  EXPECT_NE(json.find("\"__metadata__\":{\"k\":\"v\"}"), std::string::npos) << json;
  EXPECT_NE(json.find("\"wide\":{\"dtype\":\"F64\",\"shape\":[2,2],\"data_offsets\":[0,32]}"),
            std::string::npos)
      << json;

  io::SafetensorsHeader h = io::parse_header(json, n, bytes.size() - 8 - n, "test");
  ASSERT_EQ(h.entries.size(), 4u);
  // The header keeps the callers' order, the data is laid out by element size so that each
  // tensor starts at a multiple of its element size.
  EXPECT_EQ(h.entries[0].name, "flag");
  EXPECT_EQ(h.entries[3].name, "mid");
  for (const auto& e : h.entries) {
    EXPECT_EQ(e.begin % dtype_size(e.dtype), 0u) << e.name;
  }
  EXPECT_EQ(h.data_start, 8 + n);
}

TEST(Safetensors, FileAndMemoryAgree) {
  TempDir dir;
  NamedTensors in = {{"a", patterned_tensor({4, 3}, DType::BFloat16, 5)},
                     {"b", patterned_tensor({2}, DType::Int64, 6).expand({3, 2})}};
  io::Metadata md = {{"step", "12"}};
  const std::string path = dir.file("x.safetensors");
  io::save_safetensors(path, in, md);
  std::vector<std::byte> mem = io::serialize_safetensors(in, md);
  EXPECT_EQ(read_bytes(path), mem);
  io::TensorFile parsed = io::parse_safetensors(mem);
  ASSERT_EQ(parsed.tensors.size(), 2u);
  expect_same(parsed.at("a"), in[0].second, "a");
  expect_same(parsed.at("b"), in[1].second, "b");
  EXPECT_EQ(parsed.metadata, md);
}

TEST(Safetensors, OverwritesAnExistingFile) {
  TempDir dir;
  const std::string path = dir.file("w.safetensors");
  io::save_safetensors(path, {{"old", patterned_tensor({100}, DType::Float64, 1)}});
  Tensor small = patterned_tensor({2}, DType::Float32, 2);
  io::save_safetensors(path, {{"new", small}});
  io::TensorFile out = io::load_safetensors(path);
  ASSERT_EQ(out.tensors.size(), 1u);
  expect_same(out.at("new"), small, "new");
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"w.safetensors"}) << "no temporary left";
}

TEST(Safetensors, LoadedTensorsOwnTheirMemory) {
  std::vector<std::byte> mem =
      io::serialize_safetensors({{"a", patterned_tensor({4}, DType::Float32, 1)}});
  io::TensorFile parsed = io::parse_safetensors(mem);
  std::vector<std::byte> before = logical_bytes(parsed.at("a"));
  std::fill(mem.begin(), mem.end(), std::byte{0xAB});
  EXPECT_EQ(logical_bytes(parsed.at("a")), before);
}

TEST(Safetensors, SaveRefusesBadInput) {
  TempDir dir;
  const std::string path = dir.file("bad.safetensors");
  Tensor t = patterned_tensor({2}, DType::Float32, 1);
  EXPECT_ERROR_WITH(io::save_safetensors(path, {{"w", t}, {"w", t}}), "two tensors are named 'w'");
  EXPECT_ERROR_WITH(io::save_safetensors(path, {{"__metadata__", t}}), "reserved");
  EXPECT_ERROR_WITH(io::save_safetensors(path, {{"w", t}, {"u", Tensor()}}),
                    "tensor 'u' is undefined");
  EXPECT_ERROR_WITH(io::save_safetensors(path, {{"bad\xff", t}}), "valid UTF-8");
  EXPECT_ERROR_WITH(io::save_safetensors(dir.path(), {{"w", t}}), "is a directory");
  EXPECT_ERROR_WITH(io::save_safetensors(dir.file("missing/dir/x.safetensors"), {{"w", t}}),
                    "cannot create the temporary file");
  EXPECT_TRUE(dir.entries().empty()) << "a refused save writes nothing";
}

TEST(Safetensors, MissingFileAndMissingTensorAreNamed) {
  TempDir dir;
  EXPECT_ERROR_WITH(io::load_safetensors(dir.file("nope.safetensors")), "nope.safetensors");
  EXPECT_ERROR_WITH(io::load_safetensors(dir.path()), "directory");
  io::TensorFile f = io::parse_safetensors(
      io::serialize_safetensors({{"a", patterned_tensor({1}, DType::Int32, 1)}}));
  EXPECT_TRUE(f.contains("a"));
  EXPECT_FALSE(f.contains("b"));
  EXPECT_EQ(f.find("b"), nullptr);
  EXPECT_ERROR_WITH(f.at("b"), "tensor 'b' is not in the file");
}

}  // namespace
}  // namespace ember::test
