// Training checkpoints: model and optimizer tensors, step, config, RNG position and free-form
// metadata in one atomically written safetensors file.
#include "io/checkpoint.h"

#include <algorithm>
#include <charconv>
#include <nlohmann/json.hpp>

#include "ember/io.h"

namespace ember::io {

namespace {

bool is_reserved(std::string_view key) {
  return std::find(std::begin(kReservedKeys), std::end(kReservedKeys), key) !=
         std::end(kReservedKeys);
}

// A decimal number that is the whole string, or an error naming the key.
template <class T>
T parse_number(const Metadata& md, std::string_view key, const std::string& path) {
  auto it = md.find(std::string(key));
  EMBER_CHECK(it != md.end(), "load_checkpoint ", path, ": metadata key '", key, "' is missing");
  const std::string& s = it->second;
  T v{};
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  EMBER_CHECK(ec == std::errc() && end == s.data() + s.size() && !s.empty(), "load_checkpoint ",
              path, ": metadata '", key, "' = '", s, "' is not a valid ",
              std::is_signed_v<T> ? "integer" : "unsigned 64-bit integer");
  return v;
}

void add_prefixed(NamedTensors& out, const NamedTensors& in, std::string_view prefix,
                  const std::string& path) {
  for (const auto& [name, t] : in) {
    EMBER_CHECK(!name.empty(), "save_checkpoint ", path, ": a tensor under '", prefix,
                "' has an empty name");
    out.emplace_back(std::string(prefix) + name, t);
  }
}

}  // namespace

void save_checkpoint(const std::string& path, const Checkpoint& ckpt) {
  EMBER_CHECK(ckpt.step >= 0, "save_checkpoint ", path, ": step ", ckpt.step, " is negative");
  EMBER_CHECK(nlohmann::json::accept(ckpt.config), "save_checkpoint ", path,
              ": config is not a valid JSON document: ", ckpt.config.substr(0, 80));
  Metadata md;
  for (const auto& [k, v] : ckpt.extra) {
    EMBER_CHECK(!is_reserved(k), "save_checkpoint ", path, ": extra metadata key '", k,
                "' is reserved by the checkpoint format; choose another name");
    md[k] = v;
  }
  md[std::string(kFormatKey)] = kCheckpointFormat;
  md[std::string(kStepKey)] = std::to_string(ckpt.step);
  md[std::string(kConfigKey)] = ckpt.config;
  md[std::string(kRngSeedKey)] = std::to_string(ckpt.rng.seed);
  md[std::string(kRngOffsetKey)] = std::to_string(ckpt.rng.offset);

  NamedTensors all;
  all.reserve(ckpt.model.size() + ckpt.optimizer.size());
  add_prefixed(all, ckpt.model, kModelPrefix, path);
  add_prefixed(all, ckpt.optimizer, kOptimPrefix, path);
  save_safetensors(path, all, md);
}

Checkpoint load_checkpoint(const std::string& path) {
  TensorFile f = load_safetensors(path);
  const Metadata& md = f.metadata;
  auto fmt = md.find(std::string(kFormatKey));
  EMBER_CHECK(fmt != md.end(), "load_checkpoint ", path,
              ": not an ember checkpoint (no metadata key 'format'); for plain tensor files",
              " use load_safetensors");
  EMBER_CHECK(fmt->second == kCheckpointFormat, "load_checkpoint ", path, ": format '", fmt->second,
              "' is not supported (this build reads '", kCheckpointFormat, "')");

  Checkpoint ck;
  ck.step = parse_number<int64_t>(md, kStepKey, path);
  EMBER_CHECK(ck.step >= 0, "load_checkpoint ", path, ": step ", ck.step, " is negative");
  ck.rng.seed = parse_number<uint64_t>(md, kRngSeedKey, path);
  ck.rng.offset = parse_number<uint64_t>(md, kRngOffsetKey, path);
  auto cfg = md.find(std::string(kConfigKey));
  EMBER_CHECK(cfg != md.end(), "load_checkpoint ", path, ": metadata key 'config' is missing");
  EMBER_CHECK(nlohmann::json::accept(cfg->second), "load_checkpoint ", path,
              ": config is not a valid JSON document");
  ck.config = cfg->second;
  for (const auto& [k, v] : md) {
    if (!is_reserved(k)) ck.extra[k] = v;
  }

  for (auto& [name, t] : f.tensors) {
    std::string_view n = name;
    if (n.starts_with(kModelPrefix) && n.size() > kModelPrefix.size()) {
      ck.model.emplace_back(name.substr(kModelPrefix.size()), std::move(t));
    } else if (n.starts_with(kOptimPrefix) && n.size() > kOptimPrefix.size()) {
      ck.optimizer.emplace_back(name.substr(kOptimPrefix.size()), std::move(t));
    } else {
      EMBER_FAIL("load_checkpoint ", path, ": tensor '", name, "' is neither 'model.<name>'",
                 " nor 'optim.<name>'");
    }
  }
  return ck;
}

}  // namespace ember::io
