// Checkpoint layout inside a safetensors file: tensor name prefixes and metadata keys.
#pragma once
#include <string_view>

namespace ember::io {

inline constexpr std::string_view kModelPrefix = "model.";
inline constexpr std::string_view kOptimPrefix = "optim.";

// Metadata keys the checkpoint itself uses; free-form keys may not take these names.
inline constexpr std::string_view kFormatKey = "format";
inline constexpr std::string_view kStepKey = "step";
inline constexpr std::string_view kConfigKey = "config";
inline constexpr std::string_view kRngSeedKey = "rng_seed";
inline constexpr std::string_view kRngOffsetKey = "rng_offset";
inline constexpr std::string_view kReservedKeys[] = {kFormatKey, kStepKey, kConfigKey, kRngSeedKey,
                                                     kRngOffsetKey};

// Bumped when the layout changes; a reader refuses versions it does not know.
inline constexpr std::string_view kCheckpointFormat = "ember-checkpoint/1";

}  // namespace ember::io
