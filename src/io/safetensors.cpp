// safetensors reading and writing. Readers trust nothing in the file: the header is checked
// whole (types, shapes, offsets, coverage of the data buffer) before any tensor is made.
#include "io/safetensors.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>

#include "core/make_tensor.h"
#include "core/shape.h"
#include "io/file_io.h"

namespace ember::io {

static_assert(std::endian::native == std::endian::little,
              "safetensors stores little-endian data; a big-endian host needs byte swaps here");

using ojson = nlohmann::ordered_json;

// Every reader error starts with the file (or buffer) it is about.
#define ST_CHECK(cond, ...) EMBER_CHECK(cond, "safetensors ", source, ": ", __VA_ARGS__)
#define ST_FAIL(...) EMBER_FAIL("safetensors ", source, ": ", __VA_ARGS__)

namespace {

struct DTypeName {
  DType dtype;
  std::string_view name;
};
constexpr DTypeName kDTypeNames[] = {{DType::Bool, "BOOL"},     {DType::Int32, "I32"},
                                     {DType::Int64, "I64"},     {DType::Float16, "F16"},
                                     {DType::BFloat16, "BF16"}, {DType::Float32, "F32"},
                                     {DType::Float64, "F64"}};
// Valid in the format but absent from ember: named as such in errors.
constexpr std::string_view kForeignDTypes[] = {"U8",      "I8",      "U16",     "I16",     "U32",
                                               "U64",     "F8_E4M3", "F8_E5M2", "F8_E8M0", "F4",
                                               "F6_E2M3", "F6_E3M2", "C64"};

const char* json_type(const ojson& v) {
  return v.type_name();
}

uint64_t read_le64(const std::byte* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | uint64_t(p[i]);
  return v;
}

// A non-negative JSON integer that fits in int64, or an error naming `what`.
uint64_t json_index(const ojson& v, std::string_view source, const std::string& what) {
  ST_CHECK(v.is_number_unsigned(), what, " must be a non-negative integer, got ",
           v.dump(-1, ' ', false, ojson::error_handler_t::replace), " (", json_type(v), ")");
  uint64_t x = v.get<uint64_t>();
  ST_CHECK(x <= uint64_t(INT64_MAX), what, " = ", x, " is too large");
  return x;
}

// A name as errors show it: quoted, and cut short, since a hostile file may make it huge.
std::string quoted(const std::string& name) {
  constexpr size_t kShown = 200;
  std::string out(1, '\'');
  out.append(name, 0, kShown);
  if (name.size() <= kShown) return out += '\'';
  return out.append("...' (").append(std::to_string(name.size())).append(" bytes)");
}

TensorEntry parse_entry(const std::string& name, const ojson& v, uint64_t buffer_size,
                        std::string_view source) {
  const std::string who = "tensor " + quoted(name);
  ST_CHECK(v.is_object(), who, ": expected an object {\"dtype\", \"shape\", \"data_offsets\"}",
           ", got ", json_type(v));
  for (const auto& [key, _] : v.items()) {
    ST_CHECK(key == "dtype" || key == "shape" || key == "data_offsets", who, ": unexpected key ",
             quoted(key));
  }
  for (const char* key : {"dtype", "shape", "data_offsets"}) {
    ST_CHECK(v.contains(key), who, ": missing \"", key, "\"");
  }
  TensorEntry e;
  e.name = name;

  const ojson& dt = v["dtype"];
  ST_CHECK(dt.is_string(), who, ": dtype must be a string, got ", json_type(dt));
  const std::string dname = dt.get<std::string>();
  auto dtype = dtype_from_safetensors(dname);
  if (!dtype) {
    bool foreign = std::find(std::begin(kForeignDTypes), std::end(kForeignDTypes), dname) !=
                   std::end(kForeignDTypes);
    ST_FAIL(who, ": dtype ", quoted(dname),
            foreign ? " is valid safetensors but ember has no such dtype"
                    : " is not a safetensors dtype",
            " (ember reads F64, F32, F16, BF16, I64, I32, BOOL)");
  }
  e.dtype = *dtype;

  const ojson& shape = v["shape"];
  ST_CHECK(shape.is_array(), who, ": shape must be a list of integers, got ", json_type(shape));
  ST_CHECK(shape.size() <= kMaxTensorRank, who, ": shape has ", shape.size(),
           " dimensions, more than the ", kMaxTensorRank, " allowed");
  // The product of the non-zero sizes must fit, so that strides do too.
  uint64_t span = 1;
  bool empty = false;
  for (size_t d = 0; d < shape.size(); ++d) {
    uint64_t s = json_index(shape[d], source, who + ": shape[" + std::to_string(d) + "]");
    e.shape.push_back(int64_t(s));
    if (s == 0) {
      empty = true;
      continue;
    }
    ST_CHECK(span <= (uint64_t(1) << 62) / s, who, ": shape ", shape_str(e.shape),
             "... has too many elements");
    span *= s;
  }
  const uint64_t numel = empty ? 0 : span;

  const ojson& off = v["data_offsets"];
  ST_CHECK(off.is_array() && off.size() == 2, who,
           ": data_offsets must be a list [begin, end], got ",
           off.dump(-1, ' ', false, ojson::error_handler_t::replace));
  e.begin = json_index(off[0], source, who + ": data_offsets[0]");
  e.end = json_index(off[1], source, who + ": data_offsets[1]");
  ST_CHECK(e.begin <= e.end, who, ": data_offsets [", e.begin, ", ", e.end,
           "] end before they begin");
  ST_CHECK(e.end <= buffer_size, who, ": data_offsets [", e.begin, ", ", e.end,
           "] reach past the end of the data buffer (", buffer_size,
           " bytes): the file is truncated or the header is wrong");
  // numel <= 2^62 and an element has at most 8 bytes: 128 bits hold the product.
  const unsigned __int128 need = (unsigned __int128)numel * dtype_size(e.dtype);
  ST_CHECK(need == e.end - e.begin, who, ": shape ", shape_str(e.shape), " of ", dname, " needs ",
           numel, " x ", dtype_size(e.dtype), " bytes but data_offsets [", e.begin, ", ", e.end,
           "] hold ", e.end - e.begin);
  return e;
}

// The tensors must tile the data buffer exactly: no overlap, no gap, nothing after the last.
void check_coverage(const std::vector<TensorEntry>& entries, uint64_t buffer_size,
                    std::string_view source) {
  std::vector<const TensorEntry*> order;
  for (const auto& e : entries) order.push_back(&e);
  std::sort(order.begin(), order.end(), [](const TensorEntry* a, const TensorEntry* b) {
    return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
  });
  uint64_t covered = 0;
  const TensorEntry* prev = nullptr;
  for (const TensorEntry* e : order) {
    ST_CHECK(e->begin >= covered, "tensors ", quoted(prev ? prev->name : ""), " [",
             prev ? prev->begin : 0, ", ", covered, ") and ", quoted(e->name), " [", e->begin, ", ",
             e->end, ") overlap");
    ST_CHECK(e->begin == covered, "bytes [", covered, ", ", e->begin,
             ") of the data buffer belong to no tensor");
    covered = e->end;
    prev = e;
  }
  ST_CHECK(covered == buffer_size, "bytes [", covered, ", ", buffer_size,
           ") at the end of the data buffer belong to no tensor");
}

// Copies one tensor's bytes out of the buffer, checking BOOL bytes are 0 or 1 (anything else
// would be an invalid C++ bool).
void check_bool_bytes(const Tensor& t, const std::string& name, std::string_view source) {
  if (t.dtype() != DType::Bool) return;
  const auto* p = static_cast<const uint8_t*>(t.impl()->data());
  for (int64_t i = 0; i < t.numel(); ++i) {
    ST_CHECK(p[i] <= 1, "tensor ", quoted(name), ": BOOL element ", i, " is byte ", int(p[i]),
             "; only 0 and 1 are booleans");
  }
}

// Visits the bytes of a tensor in row-major order, as few runs of memory as its strides allow.
template <class Sink>
void for_each_run(const Tensor& t, Sink&& sink) {
  const int64_t n = t.numel();
  if (n == 0) return;
  const size_t item = dtype_size(t.dtype());
  const char* base = static_cast<const char*>(t.data_ptr());
  const Shape& sz = t.sizes();
  const Shape& st = t.strides();
  // The innermost dims that are laid out contiguously form one run.
  int64_t run = 1;
  int64_t d = t.dim() - 1;
  for (; d >= 0; --d) {
    if (sz[d] != 1 && st[d] != run) break;
    run *= sz[d];
  }
  if (d < 0) {
    sink(base, size_t(n) * item);
    return;
  }
  std::vector<int64_t> idx(size_t(d + 1), 0);
  int64_t off = 0;
  for (;;) {
    sink(base + off * int64_t(item), size_t(run) * item);
    int64_t k = d;
    for (; k >= 0; --k) {
      if (++idx[size_t(k)] < sz[size_t(k)]) {
        off += st[size_t(k)];
        break;
      }
      off -= st[size_t(k)] * (sz[size_t(k)] - 1);
      idx[size_t(k)] = 0;
    }
    if (k < 0) return;
  }
}

// Writes a whole file through `sink(const void*, size_t)`. The header keeps the callers'
// order; data is laid out by descending element size so every tensor stays aligned.
template <class Sink>
void write_safetensors(const NamedTensors& given, const Metadata& metadata, Sink&& sink) {
  // Tensors on a GPU are written from a copy on the CPU.
  NamedTensors moved;
  bool any_gpu = false;
  for (const auto& [name, t] : given) any_gpu |= t.defined() && t.device() != kCPU;
  if (any_gpu) {
    for (const auto& [name, t] : given)
      moved.emplace_back(name, t.defined() && t.device() != kCPU ? t.detach().cpu() : t);
  }
  const NamedTensors& tensors = any_gpu ? moved : given;
  std::set<std::string_view> seen;
  for (const auto& [name, t] : tensors) {
    EMBER_CHECK(name != "__metadata__", "save_safetensors: '__metadata__' is reserved for the",
                " metadata and cannot name a tensor");
    EMBER_CHECK(seen.insert(name).second, "save_safetensors: two tensors are named '", name, "'");
    EMBER_CHECK(t.defined(), "save_safetensors: tensor '", name, "' is undefined");
  }
  std::vector<size_t> layout(tensors.size());
  for (size_t i = 0; i < layout.size(); ++i) layout[i] = i;
  std::stable_sort(layout.begin(), layout.end(), [&](size_t a, size_t b) {
    return dtype_size(tensors[a].second.dtype()) > dtype_size(tensors[b].second.dtype());
  });
  std::vector<uint64_t> begin(tensors.size());
  uint64_t pos = 0;
  for (size_t i : layout) {
    begin[i] = pos;
    pos += uint64_t(tensors[i].second.numel()) * dtype_size(tensors[i].second.dtype());
  }

  ojson header = ojson::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i].second;
    uint64_t nbytes = uint64_t(t.numel()) * dtype_size(t.dtype());
    header[tensors[i].first] = ojson{{"dtype", safetensors_dtype_name(t.dtype())},
                                     {"shape", t.sizes()},
                                     {"data_offsets", {begin[i], begin[i] + nbytes}}};
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const nlohmann::json::exception& e) {
    EMBER_FAIL("save_safetensors: tensor names and metadata must be valid UTF-8 (", e.what(), ")");
  }
  text.append((8 - text.size() % 8) % 8, ' ');  // the data buffer starts 8-byte aligned
  std::byte len[8];
  for (int i = 0; i < 8; ++i) len[i] = std::byte((uint64_t(text.size()) >> (8 * i)) & 0xff);
  sink(len, 8);
  sink(text.data(), text.size());
  for (size_t i : layout) for_each_run(tensors[i].second, sink);
}

}  // namespace

std::string_view safetensors_dtype_name(DType t) {
  for (const auto& d : kDTypeNames) {
    if (d.dtype == t) return d.name;
  }
  EMBER_FAIL("safetensors: no name for dtype ", dtype_name(t));
}

std::optional<DType> dtype_from_safetensors(std::string_view name) {
  for (const auto& d : kDTypeNames) {
    if (d.name == name) return d.dtype;
  }
  return std::nullopt;
}

const Tensor* TensorFile::find(std::string_view name) const {
  for (const auto& [n, t] : tensors) {
    if (n == name) return &t;
  }
  return nullptr;
}

const Tensor& TensorFile::at(std::string_view name) const {
  const Tensor* t = find(name);
  EMBER_CHECK(t, "tensor '", name, "' is not in the file (it holds ", tensors.size(), " tensors)");
  return *t;
}

uint64_t check_header_length(std::span<const std::byte> prefix8, uint64_t file_size,
                             std::string_view source) {
  ST_CHECK(file_size >= 8 && prefix8.size() >= 8, "the file has ", file_size,
           " bytes, too short for the 8-byte header length");
  const uint64_t n = read_le64(prefix8.data());
  ST_CHECK(n <= kMaxHeaderBytes, "header length ", n, " exceeds the limit of ", kMaxHeaderBytes,
           " bytes (not a safetensors file?)");
  ST_CHECK(n <= file_size - 8, "header length ", n, " exceeds the ", file_size - 8,
           " bytes that follow it: the file is truncated or not safetensors");
  ST_CHECK(n >= 2, "header length ", n, " is too short for a JSON object");
  return n;
}

SafetensorsHeader parse_header(std::string_view json, uint64_t header_length, uint64_t buffer_size,
                               std::string_view source) {
  ST_CHECK(!json.empty() && json[0] == '{', "the header must begin with '{' (not a",
           " safetensors file?)");
  // The JSON parser stops at a NUL byte as at the end of input; JSON allows none anywhere.
  const size_t nul = json.find('\0');
  ST_CHECK(nul == std::string_view::npos, "the header is not valid JSON: a NUL byte at",
           " header offset ", nul);
  // Duplicate keys would silently replace each other in a JSON object: track them per object.
  std::vector<std::set<std::string>> keys;
  int depth = 0;
  auto on_event = [&](int, ojson::parse_event_t ev, ojson& parsed) {
    using E = ojson::parse_event_t;
    if (ev == E::object_start || ev == E::array_start) {
      ST_CHECK(++depth <= kMaxJsonDepth, "header JSON nests deeper than ", kMaxJsonDepth,
               " levels");
      if (ev == E::object_start) keys.emplace_back();
    } else if (ev == E::object_end) {
      keys.pop_back();
      --depth;
    } else if (ev == E::array_end) {
      --depth;
    } else if (ev == E::key) {
      const std::string& k = parsed.get_ref<const std::string&>();
      ST_CHECK(keys.back().insert(k).second, "header JSON has the key ", quoted(k), " twice");
    }
    return true;
  };
  ojson root;
  try {
    root = ojson::parse(json.begin(), json.end(), on_event);
  } catch (const nlohmann::json::exception& e) {
    ST_FAIL("the header is not valid JSON: ", e.what());
  }
  ST_CHECK(root.is_object(), "the header must be a JSON object, got ", json_type(root));

  SafetensorsHeader h;
  h.data_start = 8 + header_length;
  for (const auto& [key, value] : root.items()) {
    if (key == "__metadata__") {
      ST_CHECK(value.is_object(), "__metadata__ must be an object of strings, got ",
               json_type(value));
      for (const auto& [mk, mv] : value.items()) {
        ST_CHECK(mv.is_string(), "__metadata__ value ", quoted(mk), " must be a string, got ",
                 json_type(mv));
        h.metadata[mk] = mv.get<std::string>();
      }
      continue;
    }
    h.entries.push_back(parse_entry(key, value, buffer_size, source));
  }
  check_coverage(h.entries, buffer_size, source);
  return h;
}

TensorFile parse_safetensors(std::span<const std::byte> bytes, std::string_view source) {
  const uint64_t n = check_header_length(bytes, bytes.size(), source);
  std::string_view json(reinterpret_cast<const char*>(bytes.data()) + 8, size_t(n));
  const std::byte* buffer = bytes.data() + 8 + n;
  SafetensorsHeader h = parse_header(json, n, bytes.size() - 8 - n, source);
  TensorFile out;
  for (const TensorEntry& e : h.entries) {
    Tensor t = make_tensor(e.shape, e.dtype);
    if (e.end > e.begin) std::memcpy(t.impl()->data(), buffer + e.begin, e.end - e.begin);
    check_bool_bytes(t, e.name, source);
    out.tensors.emplace_back(e.name, std::move(t));
  }
  out.metadata = std::move(h.metadata);
  return out;
}

TensorFile load_safetensors(const std::string& path) {
  const std::string& source = path;
  ReadFile f(path);
  std::byte prefix[8] = {};
  if (f.size() >= 8) f.read_at(0, prefix, 8);
  const uint64_t n =
      check_header_length(std::span(prefix, f.size() >= 8 ? 8 : 0), f.size(), source);
  std::string json(size_t(n), '\0');
  f.read_at(8, json.data(), json.size());
  SafetensorsHeader h = parse_header(json, n, f.size() - 8 - n, source);
  TensorFile out;
  for (const TensorEntry& e : h.entries) {
    Tensor t = make_tensor(e.shape, e.dtype);
    if (e.end > e.begin) f.read_at(h.data_start + e.begin, t.impl()->data(), e.end - e.begin);
    check_bool_bytes(t, e.name, source);
    out.tensors.emplace_back(e.name, std::move(t));
  }
  out.metadata = std::move(h.metadata);
  return out;
}

std::vector<std::byte> serialize_safetensors(const NamedTensors& tensors,
                                             const Metadata& metadata) {
  std::vector<std::byte> out;
  write_safetensors(tensors, metadata, [&](const void* p, size_t n) {
    const auto* b = static_cast<const std::byte*>(p);
    out.insert(out.end(), b, b + n);
  });
  return out;
}

void save_safetensors(const std::string& path, const NamedTensors& tensors,
                      const Metadata& metadata) {
  AtomicFileWriter w(path);
  write_safetensors(tensors, metadata, [&](const void* p, size_t n) { w.write(p, n); });
  w.commit();
}

}  // namespace ember::io
