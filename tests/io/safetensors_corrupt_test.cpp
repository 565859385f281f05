// safetensors readers facing broken and lying files: every problem is an ember::Error naming
// it, from memory and from disk alike, never a crash or a half-loaded result.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "ember/io.h"
#include "io/io_test_util.h"
#include "io/safetensors.h"

namespace ember::test {
namespace {

using io::NamedTensors;

std::vector<std::byte> with_length(uint64_t n, std::string_view json,
                                   std::vector<uint8_t> data = {}) {
  std::vector<std::byte> out(8);
  for (int i = 0; i < 8; ++i) out[size_t(i)] = std::byte((n >> (8 * i)) & 0xff);
  for (char c : json) out.push_back(std::byte(c));
  for (uint8_t b : data) out.push_back(std::byte(b));
  return out;
}

// A file with the given header text and `data_bytes` bytes of data (value 0).
std::vector<std::byte> make_file(std::string_view json, size_t data_bytes = 0) {
  return with_length(json.size(), json, std::vector<uint8_t>(data_bytes, 0));
}

class CorruptFiles : public ::testing::Test {
 protected:
  // Both readers must refuse the bytes with a message that mentions `needle`; the file
  // reader's message names the file as well.
  void expect_rejected(const std::vector<std::byte>& bytes, const std::string& needle) {
    EXPECT_ERROR_WITH(io::parse_safetensors(bytes, "mem"), needle);
    const std::string path = dir_.file("corrupt.safetensors");
    write_bytes(path, bytes);
    EXPECT_ERROR_WITH(io::load_safetensors(path), needle);
    EXPECT_ERROR_WITH(io::load_safetensors(path), path);
  }
  TempDir dir_;
};

TEST_F(CorruptFiles, LengthPrefix) {
  expect_rejected({}, "too short for the 8-byte header length");
  expect_rejected(std::vector<std::byte>(7, std::byte{2}), "too short for the 8-byte header");
  expect_rejected(with_length(UINT64_MAX, "{}"), "exceeds the limit");
  expect_rejected(with_length(uint64_t(1) << 40, "{}"), "exceeds the limit");
  expect_rejected(with_length(1000, "{}"), "header length 1000 exceeds the 2 bytes");
  expect_rejected(with_length(3, "{}"), "exceeds the 2 bytes");
  expect_rejected(with_length(0, ""), "too short for a JSON object");
  expect_rejected(with_length(1, "{"), "too short for a JSON object");
}

TEST_F(CorruptFiles, HeaderIsNotJson) {
  expect_rejected(make_file(" {}"), "must begin with '{'");
  expect_rejected(make_file("[{}]"), "must begin with '{'");
  expect_rejected(make_file("{\"a\":"), "not valid JSON");
  expect_rejected(make_file("{} x"), "not valid JSON");
  expect_rejected(make_file(std::string_view("{}\0\0", 4)), "not valid JSON");
  expect_rejected(make_file("{\"\xff\":1}"), "not valid JSON");
  expect_rejected(make_file("{\"a\":\"\\ud800\"}"), "not valid JSON");
  expect_rejected(make_file("{\"__metadata__\":[[[[[[[[[[[[1]]]]]]]]]]]]}"), "nests deeper");
  std::string deep = "{\"x\":" + std::string(100000, '[') + std::string(100000, ']') + "}";
  expect_rejected(make_file(deep), "nests deeper");
}

TEST_F(CorruptFiles, DuplicateKeys) {
  const std::string a = R"("a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]})";
  expect_rejected(make_file("{" + a + "," + a + "}", 4), "key 'a' twice");
  // The same name spelled with an escape is still the same name.
  expect_rejected(
      make_file("{" + a + R"(,"\u0061":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 4),
      "key 'a' twice");
  expect_rejected(
      make_file(R"({"a":{"dtype":"F32","dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 4),
      "key 'dtype' twice");
  expect_rejected(make_file(R"({"__metadata__":{"k":"1","k":"2"}})"), "key 'k' twice");
}

TEST_F(CorruptFiles, TensorEntryFields) {
  expect_rejected(make_file(R"({"a":5})"), "tensor 'a': expected an object");
  expect_rejected(make_file(R"({"a":{"shape":[1],"data_offsets":[0,4]}})", 4),
                  "tensor 'a': missing \"dtype\"");
  expect_rejected(make_file(R"({"a":{"dtype":"F32","data_offsets":[0,4]}})", 4),
                  "missing \"shape\"");
  expect_rejected(make_file(R"({"a":{"dtype":"F32","shape":[1]}})", 4), "missing \"data_offsets\"");
  expect_rejected(make_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"x":1}})", 4),
                  "unexpected key 'x'");
}

TEST_F(CorruptFiles, HugeNamesAreCutShortInMessages) {
  const std::string name(100000, 'n');
  try {
    io::parse_safetensors(make_file("{\"" + name + "\":5}"));
    ADD_FAILURE() << "expected an Error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_LT(msg.size(), 1000u);
    EXPECT_NE(msg.find("(100000 bytes)"), std::string::npos) << msg;
  }
}

TEST_F(CorruptFiles, WrongDTypes) {
  expect_rejected(make_file(R"({"a":{"dtype":32,"shape":[1],"data_offsets":[0,4]}})", 4),
                  "dtype must be a string");
  expect_rejected(make_file(R"({"a":{"dtype":"F33","shape":[1],"data_offsets":[0,4]}})", 4),
                  "'F33' is not a safetensors dtype");
  expect_rejected(make_file(R"({"a":{"dtype":"f32","shape":[1],"data_offsets":[0,4]}})", 4),
                  "is not a safetensors dtype");
  expect_rejected(make_file(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}})", 4),
                  "'U8' is valid safetensors but ember has no such dtype");
}

TEST_F(CorruptFiles, BadShapes) {
  auto entry = [](const std::string& shape, const std::string& offsets = "[0,0]") {
    return make_file(R"({"a":{"dtype":"F32","shape":)" + shape + R"(,"data_offsets":)" + offsets +
                     "}}");
  };
  expect_rejected(entry("3"), "shape must be a list of integers");
  expect_rejected(entry("[-1]"), "shape[0] must be a non-negative integer");
  expect_rejected(entry("[2.0]"), "shape[0] must be a non-negative integer");
  expect_rejected(entry("[\"2\"]"), "shape[0] must be a non-negative integer");
  expect_rejected(entry("[1, null]"), "shape[1] must be a non-negative integer");
  expect_rejected(entry("[9223372036854775808]"), "is too large");
  expect_rejected(entry("[1e400]"), "not valid JSON");
  expect_rejected(entry("[4294967296, 4294967296]"), "too many elements");
  // An empty dim does not excuse the others from fitting (strides must fit in int64).
  expect_rejected(entry("[0, 4611686018427387904, 4]"), "too many elements");
  std::string rank65 = "[1";
  for (int i = 0; i < 64; ++i) rank65 += ",1";
  expect_rejected(entry(rank65 + "]", "[0,4]"), "65 dimensions");
}

TEST_F(CorruptFiles, OffsetLies) {
  auto f32 = [](const std::string& name, const std::string& shape, const std::string& offsets) {
    return "\"" + name + R"(":{"dtype":"F32","shape":)" + shape + R"(,"data_offsets":)" + offsets +
           "}";
  };
  expect_rejected(make_file("{" + f32("a", "[1]", "[0]") + "}", 4), "must be a list [begin, end]");
  expect_rejected(make_file("{" + f32("a", "[1]", "[0,4,8]") + "}", 4), "[begin, end]");
  expect_rejected(make_file("{" + f32("a", "[1]", "{}") + "}", 4), "[begin, end]");
  expect_rejected(make_file("{" + f32("a", "[1]", "[-4,0]") + "}", 4), "data_offsets[0]");
  expect_rejected(make_file("{" + f32("a", "[0]", "[8,4]") + "}", 8), "end before they begin");
  expect_rejected(make_file("{" + f32("a", "[1]", "[0,4]") + "}", 3), "reach past the end");
  expect_rejected(make_file("{" + f32("a", "[4]", "[0,18446744073709551615]") + "}", 16),
                  "is too large");
  // Shape and byte count disagree.
  expect_rejected(make_file("{" + f32("a", "[2]", "[0,4]") + "}", 4),
                  "tensor 'a': shape [2] of F32 needs 2 x 4 bytes but data_offsets [0, 4] hold 4");
  // Overlapping, gapped and partial coverage of the buffer.
  expect_rejected(
      make_file("{" + f32("a", "[2]", "[0,8]") + "," + f32("b", "[2]", "[4,12]") + "}", 12),
      "tensors 'a' [0, 8) and 'b' [4, 12) overlap");
  expect_rejected(
      make_file("{" + f32("a", "[1]", "[0,4]") + "," + f32("b", "[1]", "[0,4]") + "}", 4),
      "overlap");
  expect_rejected(
      make_file("{" + f32("a", "[1]", "[0,4]") + "," + f32("b", "[1]", "[8,12]") + "}", 12),
      "bytes [4, 8) of the data buffer belong to no tensor");
  expect_rejected(make_file("{" + f32("a", "[1]", "[4,8]") + "}", 8),
                  "bytes [0, 4) of the data buffer belong to no tensor");
  expect_rejected(make_file("{" + f32("a", "[1]", "[0,4]") + "}", 9),
                  "bytes [4, 9) at the end of the data buffer belong to no tensor");
  expect_rejected(make_file("{}", 1), "bytes [0, 1) at the end");
  // Zero-size tensors sit between the others, not inside them (as the reference reader).
  io::TensorFile ok = io::parse_safetensors(make_file("{" + f32("e", "[0]", "[8,8]") + "," +
                                                          f32("a", "[2]", "[0,8]") + "," +
                                                          f32("z", "[3,0]", "[0,0]") + "}",
                                                      8));
  EXPECT_EQ(ok.tensors.size(), 3u);
  EXPECT_EQ(ok.tensors[0].first, "e") << "tensors keep the header's order";
  expect_rejected(
      make_file("{" + f32("e", "[0]", "[4,4]") + "," + f32("a", "[2]", "[0,8]") + "}", 8),
      "overlap");
}

TEST_F(CorruptFiles, BadMetadata) {
  expect_rejected(make_file(R"({"__metadata__":"x"})"), "__metadata__ must be an object");
  expect_rejected(make_file(R"({"__metadata__":{"n":1}})"),
                  "__metadata__ value 'n' must be a string");
  expect_rejected(make_file(R"({"__metadata__":{"n":{"x":"y"}}})"), "must be a string");
}

TEST_F(CorruptFiles, BoolBytesMustBeZeroOrOne) {
  const std::string json = R"({"m":{"dtype":"BOOL","shape":[3],"data_offsets":[0,3]}})";
  expect_rejected(with_length(json.size(), json, {1, 2, 0}),
                  "tensor 'm': BOOL element 1 is byte 2");
  io::TensorFile ok = io::parse_safetensors(with_length(json.size(), json, {1, 0, 1}));
  EXPECT_EQ(ok.at("m").dtype(), DType::Bool);
}

// ---- deterministic mutation of valid files ----

NamedTensors sample_tensors() {
  return {{"wte", patterned_tensor({4, 3}, DType::Float32, 1)},
          {"ln.bias", patterned_tensor({3}, DType::BFloat16, 2)},
          {"steps", patterned_tensor({2}, DType::Int64, 3)},
          {"mask", patterned_tensor({2, 2}, DType::Bool, 4)},
          {"scale", patterned_tensor({}, DType::Float64, 5)},
          {"idx", patterned_tensor({3}, DType::Int32, 6)},
          {"h", patterned_tensor({2, 1}, DType::Float16, 7)}};
}

std::vector<std::byte> sample_file() {
  return io::serialize_safetensors(sample_tensors(), {{"step", "7"}, {"note", "ok"}});
}

// Whatever the readers do with the bytes, it is an Error or a consistent success.
bool parses(const std::vector<std::byte>& bytes) {
  try {
    io::TensorFile f = io::parse_safetensors(bytes, "mutant");
    uint64_t total = 0;
    for (const auto& [name, t] : f.tensors) total += uint64_t(t.numel()) * dtype_size(t.dtype());
    EXPECT_LE(total, bytes.size());
    return true;
  } catch (const Error&) {
    return false;
  }
}

TEST_F(CorruptFiles, TruncationAtEveryLengthIsRejected) {
  const std::vector<std::byte> full = sample_file();
  ASSERT_TRUE(parses(full));
  const std::string path = dir_.file("trunc.safetensors");
  for (size_t len = 0; len < full.size(); ++len) {
    std::vector<std::byte> cut(full.begin(), full.begin() + std::ptrdiff_t(len));
    EXPECT_THROW(io::parse_safetensors(cut), Error) << "length " << len;
    write_bytes(path, cut);
    EXPECT_THROW(io::load_safetensors(path), Error) << "length " << len;
  }
}

TEST_F(CorruptFiles, AppendedBytesAreRejected) {
  std::vector<std::byte> longer = sample_file();
  longer.push_back(std::byte{0});
  expect_rejected(longer, "at the end of the data buffer belong to no tensor");
}

TEST_F(CorruptFiles, EveryLengthPrefixBitFlipIsRejected) {
  const std::vector<std::byte> full = sample_file();
  for (size_t bit = 0; bit < 64; ++bit) {
    std::vector<std::byte> m = full;
    m[bit / 8] ^= std::byte(1u << (bit % 8));
    EXPECT_THROW(io::parse_safetensors(m), Error) << "bit " << bit;
  }
}

// Positions of the header's JSON punctuation and of digits outside strings: changing any of
// them to any other byte breaks the JSON or changes a shape or an offset.
std::vector<size_t> structural_positions(const std::vector<std::byte>& file) {
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | uint64_t(file[size_t(i)]);
  std::vector<size_t> out;
  bool in_string = false, escaped = false;
  for (size_t i = 8; i < 8 + n; ++i) {
    const char c = char(file[i]);
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
        out.push_back(i);
      }
      continue;
    }
    if (c == '"') in_string = true;
    if (std::strchr("{}[]:,\"0123456789", c) && c != '\0') out.push_back(i);
  }
  return out;
}

TEST_F(CorruptFiles, EveryChangeOfHeaderStructureIsRejected) {
  const std::vector<std::byte> full = sample_file();
  const std::vector<size_t> positions = structural_positions(full);
  ASSERT_GT(positions.size(), 100u);
  size_t tried = 0;
  for (size_t pos : positions) {
    for (int v = 0; v < 256; ++v) {
      if (std::byte(v) == full[pos]) continue;
      std::vector<std::byte> m = full;
      m[pos] = std::byte(v);
      ++tried;
      if (parses(m)) {
        ADD_FAILURE() << "byte " << pos << " ('" << char(full[pos]) << "') changed to " << v
                      << " still parses";
        return;
      }
    }
  }
  EXPECT_GT(tried, 25000u);
}

TEST_F(CorruptFiles, RandomByteChangesNeverCrash) {
  const std::vector<std::byte> full = sample_file();
  std::mt19937 rng(1234);
  int rejected = 0;
  for (int trial = 0; trial < 20000; ++trial) {
    std::vector<std::byte> m = full;
    const int flips = 1 + int(rng() % 4);
    for (int f = 0; f < flips; ++f) m[rng() % m.size()] = std::byte(rng() & 0xff);
    rejected += parses(m) ? 0 : 1;
  }
  EXPECT_GT(rejected, 0);
}

TEST_F(CorruptFiles, ChangedTensorDataStillLoads) {
  // The reader must not refuse valid content: data bytes of a float tensor may be anything.
  NamedTensors in = {{"w", patterned_tensor({8}, DType::Float32, 9)}};
  std::vector<std::byte> bytes = io::serialize_safetensors(in);
  for (size_t i = bytes.size() - 32; i < bytes.size(); ++i) bytes[i] = std::byte{0xFF};
  io::TensorFile f = io::parse_safetensors(bytes);
  std::vector<std::byte> got = logical_bytes(f.at("w"));
  EXPECT_EQ(got, std::vector<std::byte>(32, std::byte{0xFF}));
}

}  // namespace
}  // namespace ember::test
