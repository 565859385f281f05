// Hashing and printing of op attributes.
#include <cstring>
#include <sstream>

#include "ops/attrs.h"

namespace ember {

namespace {
inline void mix(size_t& h, uint64_t v) { h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2); }
inline uint64_t bits(double d) {
  uint64_t u;
  std::memcpy(&u, &d, 8);
  return u;
}
std::string list_str(const Shape& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}
}  // namespace

size_t Attrs::hash() const {
  size_t h = 0;
  for (const Shape* s : {&dims, &shape, &strides}) {
    mix(h, s->size());
    for (int64_t v : *s) mix(h, uint64_t(v));
  }
  for (int64_t v : {dim, start, end, step}) mix(h, uint64_t(v));
  mix(h, bits(value));
  mix(h, bits(value2));
  mix(h, uint64_t(keepdim) | uint64_t(flag) << 1 | uint64_t(dtype) << 2);
  mix(h, seed);
  mix(h, offset);
  mix(h, uint64_t(device.type) << 32 | uint32_t(device.index));
  return h;
}

std::string Attrs::str() const {
  const Attrs def;
  std::ostringstream os;
  const char* sep = "";
  auto field = [&](const char* name, const auto& v) {
    os << sep << name << "=" << v;
    sep = ", ";
  };
  if (dims != def.dims) field("dims", list_str(dims));
  if (shape != def.shape) field("shape", list_str(shape));
  if (strides != def.strides) field("strides", list_str(strides));
  if (dim != def.dim) field("dim", dim);
  if (start != def.start) field("start", start);
  if (end != def.end) field("end", end);
  if (step != def.step) field("step", step);
  if (bits(value) != bits(def.value)) field("value", value);
  if (bits(value2) != bits(def.value2)) field("value2", value2);
  if (keepdim) field("keepdim", "true");
  if (flag) field("flag", "true");
  if (dtype != def.dtype) field("dtype", dtype_name(dtype));
  if (seed != def.seed) field("seed", seed);
  if (offset != def.offset) field("offset", offset);
  if (device != def.device) field("device", device.str());
  return os.str();
}

}  // namespace ember
