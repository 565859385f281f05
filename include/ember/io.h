// Files in and out of ember: safetensors tensors files, training checkpoints, and the
// character-level text data (tokenizer, nanoGPT-style train.bin/val.bin, batches).
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ember/ops.h"
#include "ember/tensor.h"

namespace ember::io {

// ---- safetensors ----
// The public format: an 8-byte little-endian header length N, N bytes of JSON
// {name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {str: str}},
// then the tensor bytes, little-endian and row-major, offsets relative to the buffer start.

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;
using Metadata = std::map<std::string, std::string>;

// What a safetensors file holds. Tensors keep the order of the file's header.
struct TensorFile {
  NamedTensors tensors;
  Metadata metadata;

  // Whether the file holds a tensor called `name`.
  bool contains(std::string_view name) const { return find(name) != nullptr; }
  const Tensor* find(std::string_view name) const;  // null when absent
  const Tensor& at(std::string_view name) const;    // throws Error naming the missing key
};

// Writes tensors (any dtype, any strides; stored contiguous) and string metadata. The write
// is atomic: a temporary file in the same directory is written, flushed to disk and renamed
// over `path`, so a crash or an error at any point leaves the previous file as it was.
// Throws Error for duplicate or reserved names, undefined or non-CPU tensors, I/O failures.
void save_safetensors(const std::string& path, const NamedTensors& tensors,
                      const Metadata& metadata = {});
// The same bytes save_safetensors writes, in memory.
std::vector<std::byte> serialize_safetensors(const NamedTensors& tensors,
                                             const Metadata& metadata = {});

// Reads a whole file. The file is not trusted: every inconsistency (header length, JSON,
// dtype names, shapes, offsets, overlaps, gaps, file size) throws Error naming the file and
// the problem. Either everything loads or nothing does.
TensorFile load_safetensors(const std::string& path);
// Parses the bytes of a whole safetensors file; `source` names it in error messages.
TensorFile parse_safetensors(std::span<const std::byte> bytes,
                             std::string_view source = "<memory>");

// ---- checkpoints ----
// A checkpoint is one safetensors file: model tensors named "model.<name>", optimizer state
// named "optim.<name>", and metadata keys "format", "step", "config", "rng_seed",
// "rng_offset"; any other metadata key is free-form (`extra`).
struct Checkpoint {
  NamedTensors model;      // names without the "model." prefix
  NamedTensors optimizer;  // names without the "optim." prefix
  int64_t step = 0;
  std::string config = "{}";  // a JSON document (checked on save and load)
  RngState rng;               // the global generator's position
  Metadata extra;             // free-form keys; reserved names are refused
};

// Writes ckpt atomically (a temporary file renamed over path); load throws Error for a
// missing or damaged file.
void save_checkpoint(const std::string& path, const Checkpoint& ckpt);
Checkpoint load_checkpoint(const std::string& path);

// ---- character-level text data ----

// Vocabulary = the sorted unique characters (Unicode code points, from UTF-8 text) of a
// text, as nanoGPT's shakespeare_char. Ids are positions in that sorted list.
class CharTokenizer {
 public:
  CharTokenizer() = default;
  // Throws Error for text that is not valid UTF-8.
  static CharTokenizer from_text(std::string_view text);
  // {"type": "char", "vocab": ["\n", " ", ...]}: the form stored in checkpoints and meta.json.
  static CharTokenizer from_json(std::string_view json);
  std::string to_json() const;

  // The number of distinct characters, and those characters in id order.
  int64_t vocab_size() const { return int64_t(chars_.size()); }
  const std::vector<char32_t>& chars() const { return chars_; }
  // Throws Error (with position and character) for invalid UTF-8 or characters not in the
  // vocabulary.
  std::vector<int64_t> encode(std::string_view text) const;
  // Throws Error for ids outside [0, vocab_size).
  std::string decode(std::span<const int64_t> ids) const;
  std::string decode(const Tensor& ids) const;  // any integer tensor, read in row-major order

  bool operator==(const CharTokenizer& o) const { return chars_ == o.chars_; }

 private:
  std::vector<char32_t> chars_;                                     // sorted, unique
  std::vector<int32_t> ascii_ids_ = std::vector<int32_t>(128, -1);  // fast path for ASCII
  void index();
};

// What prepare_char_dataset wrote.
struct PreparedText {
  CharTokenizer tokenizer;
  int64_t train_tokens = 0;
  int64_t val_tokens = 0;
};

// nanoGPT-style preparation: encodes the text file with its own CharTokenizer and writes
// out_dir/train.bin (the first 1 - val_fraction of the tokens), out_dir/val.bin (the rest),
// both raw little-endian uint16 ids, and out_dir/meta.json (tokenizer and counts).
// Creates out_dir when missing; each file is written atomically.
PreparedText prepare_char_dataset(const std::string& text_path, const std::string& out_dir,
                                  double val_fraction = 0.1);
// Reads out_dir/meta.json back.
PreparedText load_char_meta(const std::string& out_dir);

// A token file (raw uint16 ids) read into memory, sampled in nanoGPT's way: each row is a
// random window x = tokens[i : i+T], y = tokens[i+1 : i+T+1]. The window starts come from a
// stateless hash of (seed, step, row), so resuming at any step reproduces exactly the
// batches an uninterrupted run would have drawn.
class TokenDataset {
 public:
  // Throws Error when the file is missing, has an odd byte count, or, when vocab_size > 0,
  // holds an id >= vocab_size.
  static TokenDataset load(const std::string& path, int64_t vocab_size = 0);
  // Tokens already in memory; `name` appears in errors.
  explicit TokenDataset(std::vector<uint16_t> tokens, std::string name = "<memory>");

  // The number of tokens, and the tokens.
  int64_t size() const { return int64_t(tokens_.size()); }
  const std::vector<uint16_t>& tokens() const { return tokens_; }
  // (x, y), int64 tensors of shape [batch_size, block_size] on `device`. Throws Error when the
  // data has no more than block_size tokens. For a GPU the batch is written into page-locked
  // host memory and copied without making the host wait.
  std::pair<Tensor, Tensor> get_batch(int64_t batch_size, int64_t block_size, uint64_t seed,
                                      uint64_t step, Device device = kCPU) const;
  // The window start that get_batch uses for (seed, step, row), in [0, size - block_size).
  int64_t window_start(int64_t block_size, uint64_t seed, uint64_t step, uint64_t row) const;

 private:
  std::vector<uint16_t> tokens_;
  std::string name_;
};

}  // namespace ember::io
