// Text data internals: strict UTF-8 decoding and encoding, and the stateless hash behind
// TokenDataset's batch sampling.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace ember::io {

// Decodes the code point starting at s[pos] and advances pos. Returns false (pos unchanged)
// for ill-formed UTF-8: stray continuation bytes, truncated sequences, overlong forms,
// surrogates, values past U+10FFFF.
bool next_code_point(std::string_view s, size_t& pos, char32_t& cp);
void append_utf8(std::string& out, char32_t cp);
// "'a' (U+0061)" for printable ASCII, "U+000A" otherwise: how errors name a character.
std::string describe_char(char32_t cp);

// A 64-bit hash of (seed, step, row), well mixed in every bit (splitmix64 finalizers).
uint64_t batch_hash(uint64_t seed, uint64_t step, uint64_t row);

}  // namespace ember::io
