// Character-level text data: the tokenizer, nanoGPT-style train/val preparation, and a
// token dataset whose batches depend only on (seed, step), so resumed runs see the same data.
#include "io/text_data.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/make_tensor.h"
#include "kernels/device_memory.h"
#include "ember/io.h"
#include "io/file_io.h"

namespace ember::io {

// ---- UTF-8 ----

bool next_code_point(std::string_view s, size_t& pos, char32_t& cp) {
  const size_t n = s.size();
  if (pos >= n) return false;
  const auto b0 = uint8_t(s[pos]);
  if (b0 < 0x80) {
    cp = b0;
    ++pos;
    return true;
  }
  int len = 0;
  uint8_t lo = 0x80, hi = 0xBF;  // the allowed range of the second byte (RFC 3629 table)
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    len = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    len = 3;
    if (b0 == 0xE0) lo = 0xA0;  // no overlong forms
    if (b0 == 0xED) hi = 0x9F;  // no surrogates
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    len = 4;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;  // nothing past U+10FFFF
  } else {
    return false;
  }
  if (n - pos < size_t(len)) return false;
  char32_t v = b0 & (0xFF >> (len + 1));
  for (int i = 1; i < len; ++i) {
    const auto b = uint8_t(s[pos + size_t(i)]);
    if (i == 1 ? (b < lo || b > hi) : (b < 0x80 || b > 0xBF)) return false;
    v = (v << 6) | (b & 0x3F);
  }
  cp = v;
  pos += size_t(len);
  return true;
}

void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out += char(cp);
  } else if (cp < 0x800) {
    out += char(0xC0 | (cp >> 6));
    out += char(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += char(0xE0 | (cp >> 12));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  } else {
    out += char(0xF0 | (cp >> 18));
    out += char(0x80 | ((cp >> 12) & 0x3F));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  }
}

std::string describe_char(char32_t cp) {
  char text[32];
  if (cp >= 0x20 && cp < 0x7F) {
    std::snprintf(text, sizeof text, "'%c' (U+%04X)", char(cp), unsigned(cp));
  } else {
    std::snprintf(text, sizeof text, "U+%04X", unsigned(cp));
  }
  return text;
}

namespace {

[[noreturn]] void fail_utf8(std::string_view what, std::string_view text, size_t pos) {
  char byte[8];
  std::snprintf(byte, sizeof byte, "0x%02X", unsigned(uint8_t(text[pos])));
  EMBER_FAIL(what, ": the text is not valid UTF-8 at byte ", pos, " (", byte, ")");
}

std::vector<char32_t> decode_utf8(std::string_view text, std::string_view what) {
  std::vector<char32_t> out;
  out.reserve(text.size());
  size_t pos = 0;
  char32_t cp = 0;
  while (pos < text.size()) {
    if (!next_code_point(text, pos, cp)) fail_utf8(what, text, pos);
    out.push_back(cp);
  }
  return out;
}

uint64_t mix64(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

std::vector<std::byte> to_le_bytes(const std::vector<int64_t>& ids, size_t begin, size_t end) {
  std::vector<std::byte> out((end - begin) * 2);
  for (size_t i = begin; i < end; ++i) {
    const auto v = uint16_t(ids[i]);
    out[2 * (i - begin)] = std::byte(v & 0xFF);
    out[2 * (i - begin) + 1] = std::byte(v >> 8);
  }
  return out;
}

std::string join_path(const std::string& dir, const char* name) {
  return (std::filesystem::path(dir) / name).string();
}

}  // namespace

uint64_t batch_hash(uint64_t seed, uint64_t step, uint64_t row) {
  return mix64(mix64(mix64(seed) ^ step) ^ row);
}

// ---- CharTokenizer ----

void CharTokenizer::index() {
  std::fill(ascii_ids_.begin(), ascii_ids_.end(), -1);
  for (size_t i = 0; i < chars_.size(); ++i) {
    if (chars_[i] < 128) ascii_ids_[chars_[i]] = int32_t(i);
  }
}

CharTokenizer CharTokenizer::from_text(std::string_view text) {
  std::vector<char32_t> cps = decode_utf8(text, "CharTokenizer::from_text");
  std::sort(cps.begin(), cps.end());
  cps.erase(std::unique(cps.begin(), cps.end()), cps.end());
  CharTokenizer tok;
  tok.chars_ = std::move(cps);
  tok.index();
  return tok;
}

std::string CharTokenizer::to_json() const {
  nlohmann::json vocab = nlohmann::json::array();
  for (char32_t c : chars_) {
    std::string s;
    append_utf8(s, c);
    vocab.push_back(std::move(s));
  }
  return nlohmann::json{{"type", "char"}, {"vocab", std::move(vocab)}}.dump();
}

CharTokenizer CharTokenizer::from_json(std::string_view json) {
  const char* what = "CharTokenizer::from_json";
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(json);
  } catch (const nlohmann::json::exception& e) {
    EMBER_FAIL(what, ": not valid JSON: ", e.what());
  }
  EMBER_CHECK(j.is_object() && j.contains("type") && j.contains("vocab"), what,
              ": expected {\"type\": \"char\", \"vocab\": [...]}");
  EMBER_CHECK(j["type"] == "char", what, ": tokenizer type ", j["type"].dump(), " is not \"char\"");
  const nlohmann::json& vocab = j["vocab"];
  EMBER_CHECK(vocab.is_array(), what, ": vocab must be a list of one-character strings");
  CharTokenizer tok;
  for (size_t i = 0; i < vocab.size(); ++i) {
    EMBER_CHECK(vocab[i].is_string(), what, ": vocab[", i, "] is a ", vocab[i].type_name(),
                ", not a string");
    const std::string& s = vocab[i].get_ref<const std::string&>();
    size_t pos = 0;
    char32_t cp = 0;
    EMBER_CHECK(next_code_point(s, pos, cp) && pos == s.size(), what, ": vocab[", i,
                "] must hold exactly one character, got ", vocab[i].dump());
    EMBER_CHECK(tok.chars_.empty() || cp > tok.chars_.back(), what, ": vocab[", i, "] ",
                describe_char(cp), " is out of order or repeated; vocab must be sorted and",
                " unique");
    tok.chars_.push_back(cp);
  }
  tok.index();
  return tok;
}

std::vector<int64_t> CharTokenizer::encode(std::string_view text) const {
  std::vector<int64_t> ids;
  ids.reserve(text.size());
  size_t pos = 0;
  char32_t cp = 0;
  while (pos < text.size()) {
    const size_t at = pos;
    if (!next_code_point(text, pos, cp)) fail_utf8("CharTokenizer::encode", text, at);
    int64_t id = -1;
    if (cp < 128) {
      id = ascii_ids_[cp];
    } else {
      auto it = std::lower_bound(chars_.begin(), chars_.end(), cp);
      if (it != chars_.end() && *it == cp) id = it - chars_.begin();
    }
    EMBER_CHECK(id >= 0, "CharTokenizer::encode: character ", describe_char(cp), " at byte ", at,
                " is not in the vocabulary of ", chars_.size(), " characters");
    ids.push_back(id);
  }
  return ids;
}

std::string CharTokenizer::decode(std::span<const int64_t> ids) const {
  std::string out;
  out.reserve(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    EMBER_CHECK(ids[i] >= 0 && ids[i] < vocab_size(), "CharTokenizer::decode: id ", ids[i],
                " at position ", i, " is outside the vocabulary [0, ", vocab_size(), ")");
    append_utf8(out, chars_[size_t(ids[i])]);
  }
  return out;
}

std::string CharTokenizer::decode(const Tensor& ids) const {
  EMBER_CHECK(ids.defined() && is_integral(ids.dtype()), "CharTokenizer::decode: ids must be",
              " an integer tensor", ids.defined() ? ", got dtype " : "",
              ids.defined() ? dtype_name(ids.dtype()) : "");
  std::vector<int64_t> v = ids.to_vector<int64_t>();
  return decode(std::span<const int64_t>(v));
}

// ---- dataset preparation ----

PreparedText prepare_char_dataset(const std::string& text_path, const std::string& out_dir,
                                  double val_fraction) {
  const std::string what = "prepare_char_dataset " + text_path;
  EMBER_CHECK(val_fraction > 0 && val_fraction < 1, what, ": val_fraction ", val_fraction,
              " must be in (0, 1)");
  std::vector<std::byte> raw = read_whole_file(text_path);
  std::string_view text(reinterpret_cast<const char*>(raw.data()), raw.size());
  PreparedText out;
  try {
    out.tokenizer = CharTokenizer::from_text(text);
  } catch (const Error& e) {
    EMBER_FAIL(what, ": ", e.what());
  }
  EMBER_CHECK(out.tokenizer.vocab_size() <= 65536, what, ": ", out.tokenizer.vocab_size(),
              " distinct characters do not fit in uint16 token ids");
  std::vector<int64_t> ids = out.tokenizer.encode(text);
  const auto n = int64_t(ids.size());
  // As nanoGPT: train = data[:int(n * 0.9)], val = the rest.
  out.train_tokens = int64_t(std::floor(double(n) * (1.0 - val_fraction)));
  out.val_tokens = n - out.train_tokens;
  EMBER_CHECK(out.train_tokens > 0 && out.val_tokens > 0, what, ": ", n,
              " characters are too few to split into train and val");

  std::error_code ec;
  std::filesystem::create_directories(out_dir, ec);
  EMBER_CHECK(!ec, what, ": cannot create directory ", out_dir, ": ", ec.message());
  write_file_atomic(join_path(out_dir, "train.bin"), to_le_bytes(ids, 0, size_t(out.train_tokens)));
  write_file_atomic(join_path(out_dir, "val.bin"),
                    to_le_bytes(ids, size_t(out.train_tokens), size_t(n)));
  nlohmann::json meta{{"tokenizer", nlohmann::json::parse(out.tokenizer.to_json())},
                      {"vocab_size", out.tokenizer.vocab_size()},
                      {"train_tokens", out.train_tokens},
                      {"val_tokens", out.val_tokens},
                      {"token_dtype", "uint16"},
                      {"source", std::filesystem::path(text_path).filename().string()}};
  std::string meta_text = meta.dump(2) + "\n";
  write_file_atomic(join_path(out_dir, "meta.json"),
                    std::as_bytes(std::span(meta_text.data(), meta_text.size())));
  return out;
}

PreparedText load_char_meta(const std::string& out_dir) {
  const std::string path = join_path(out_dir, "meta.json");
  std::vector<std::byte> raw = read_whole_file(path);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(reinterpret_cast<const char*>(raw.data()),
                              reinterpret_cast<const char*>(raw.data()) + raw.size());
  } catch (const nlohmann::json::exception& e) {
    EMBER_FAIL(path, ": not valid JSON: ", e.what());
  }
  auto count = [&](const char* key) {
    EMBER_CHECK(j.is_object() && j.contains(key) && j[key].is_number_unsigned(), path, ": '", key,
                "' must be a non-negative integer");
    return int64_t(j[key].get<uint64_t>());
  };
  PreparedText out;
  EMBER_CHECK(j.is_object() && j.contains("tokenizer"), path, ": no 'tokenizer' entry");
  out.tokenizer = CharTokenizer::from_json(j["tokenizer"].dump());
  EMBER_CHECK(count("vocab_size") == out.tokenizer.vocab_size(), path, ": vocab_size ",
              count("vocab_size"), " disagrees with the tokenizer's ", out.tokenizer.vocab_size(),
              " characters");
  out.train_tokens = count("train_tokens");
  out.val_tokens = count("val_tokens");
  return out;
}

// ---- TokenDataset ----

TokenDataset::TokenDataset(std::vector<uint16_t> tokens, std::string name)
    : tokens_(std::move(tokens)), name_(std::move(name)) {}

TokenDataset TokenDataset::load(const std::string& path, int64_t vocab_size) {
  ReadFile f(path);
  EMBER_CHECK(f.size() % 2 == 0, "TokenDataset ", path, ": ", f.size(),
              " bytes is an odd count; a token file holds uint16 ids (2 bytes each)");
  EMBER_CHECK(f.size() > 0, "TokenDataset ", path, ": the file holds no tokens");
  std::vector<uint16_t> tokens(size_t(f.size() / 2));
  f.read_at(0, tokens.data(), size_t(f.size()));  // little-endian, as the host
  if (vocab_size > 0) {
    const uint16_t top = *std::max_element(tokens.begin(), tokens.end());
    EMBER_CHECK(int64_t(top) < vocab_size, "TokenDataset ", path, ": token id ", top,
                " is outside the vocabulary of ", vocab_size, " (a file from another dataset?)");
  }
  return TokenDataset(std::move(tokens), path);
}

int64_t TokenDataset::window_start(int64_t block_size, uint64_t seed, uint64_t step,
                                   uint64_t row) const {
  EMBER_CHECK(block_size > 0, "TokenDataset ", name_, ": block_size ", block_size,
              " must be positive");
  EMBER_CHECK(size() > block_size, "TokenDataset ", name_, ": ", size(),
              " tokens are too few for block_size ", block_size, " (need at least ", block_size + 1,
              ")");
  const auto windows = uint64_t(size() - block_size);
  // Multiply-shift maps the hash onto [0, windows); the bias is below windows / 2^64.
  const auto h = (unsigned __int128)batch_hash(seed, step, row);
  return int64_t((h * windows) >> 64);
}

std::pair<Tensor, Tensor> TokenDataset::get_batch(int64_t batch_size, int64_t block_size,
                                                  uint64_t seed, uint64_t step,
                                                  Device device) const {
  EMBER_CHECK(batch_size > 0, "TokenDataset ", name_, ": batch_size ", batch_size,
              " must be positive");
  window_start(block_size, seed, step, 0);  // checks block_size against the data
  check_sizes({batch_size, block_size}, "TokenDataset::get_batch");
  Tensor x, y;
  if (device.type != DeviceType::CPU) {
    // Both halves in one pinned block: x its first half, y its second.
    const int64_t n = batch_size * block_size;
    auto storage = device_memory::new_pinned_storage(size_t(2 * n) * sizeof(int64_t));
    if (storage) {
      Tensor both = make_tensor({0}, DType::Int64);
      both.impl()->storage = std::move(storage);
      x = make_view(both, {batch_size, block_size}, {block_size, 1}, 0);
      y = make_view(both, {batch_size, block_size}, {block_size, 1}, n);
    }
  }
  if (!x.defined()) {
    x = make_tensor({batch_size, block_size}, DType::Int64);
    y = make_tensor({batch_size, block_size}, DType::Int64);
  }
  auto* px = static_cast<int64_t*>(x.impl()->data());
  auto* py = static_cast<int64_t*>(y.impl()->data());
  for (int64_t b = 0; b < batch_size; ++b) {
    const uint16_t* src = tokens_.data() + window_start(block_size, seed, step, uint64_t(b));
    for (int64_t t = 0; t < block_size; ++t) {
      px[b * block_size + t] = src[t];
      py[b * block_size + t] = src[t + 1];
    }
  }
  if (device.type != DeviceType::CPU) return {x.to(device), y.to(device)};
  return {x, y};
}

}  // namespace ember::io
