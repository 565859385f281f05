// The keep flags of attention's dropout drawn ahead of the GPU's tensor-core attention kernels
// (the attention_keep op, ops/defs/reduction.def): the tile geometry that the op's shape rule,
// its CPU reference (kernels/cpu/attention.cpp) and the CUDA kernels
// (kernels/cuda/attention_mma_keep.cuh) share.
//
// The flags of [batch, L, S] scores come in tiles of 64 x 64 (batch entry b, query tile qi, key
// tile kj; tile index (b * ceil(L / 64) + qi) * ceil(S / 64) + kj), a tile 128 32-bit words in
// each of two layouts: all tiles query-major, then all tiles key-major. Word w of a tile (w =
// 32 warp + 4 g + q) holds at bit bit(n, h, e) (n < 8, h < 2, e < 2) the flag of query row
// 16 warp + g + 8 h and key col 8 n + 2 q + e of the tile (query-major), or of key row
// 16 warp + g + 8 h and query col 8 n + 2 q + e (key-major): as the tensor-core fragments hold
// their entries. Flags past the edges or hidden by the causal mask are 0.
#pragma once
#include <cstdint>

namespace ember::attention_keep {

inline constexpr int64_t kTileRows = 64;
inline constexpr int64_t kTileWords = kTileRows * kTileRows / 32;
inline constexpr int64_t kLayouts = 2;
// The largest head sizes (E and F) of the kernels that read the words.
inline constexpr int64_t kHead = 64;
// The most bytes of words one problem draws ahead; past it the GPU's float kernels run, which
// draw their flags inside their blocks.
inline constexpr int64_t kLimitBytes = int64_t(512) << 20;

inline constexpr int bit(int n, int h, int e) { return n * 4 + 2 * h + e; }

inline int64_t tiles(int64_t batch, int64_t L, int64_t S) {
  return batch * ((L + kTileRows - 1) / kTileRows) * ((S + kTileRows - 1) / kTileRows);
}
// Words of both layouts.
inline int64_t words(int64_t batch, int64_t L, int64_t S) {
  return kLayouts * tiles(batch, L, S) * kTileWords;
}

}  // namespace ember::attention_keep
