// Dropout's keep flags for the tensor-core attention kernels, drawn before them by a kernel of
// their own: a block a (batch entry, query tile, key tile) of 64 x 64 draws the tile's flags
// from Philox (the CPU's draws, as attention_tiles.cuh's keep_tile takes them) and stores them
// as one 32-bit word a thread, in the order the thread of the same index in a consumer kernel
// needs them. The draws run over every tile at once, so the forward, dkdv and dq kernels,
// whose longest blocks set their time, only load a word a tile.
//
// Two layouts of a tile's 128 words: query-major for the forward and dq (thread 32 w + 4 g + q
// holds query rows 16 w + g + 8 h and key cols 8 n + 2 q + e), key-major for dkdv (key rows
// 16 w + g + 8 h and query cols 8 n + 2 q + e); in both, the flag of (n, h, e) is bit
// keep_bit(n, h, e), as the accumulator fragments hold their entries (attention_mma.cuh).
// The layouts are kernels/attention_keep.h's, which the attention_keep op draws ahead (both at
// once) for a captured graph's forward and backward.
#pragma once
#include "core/make_tensor.h"
#include "kernels/attention_keep.h"
#include "kernels/cuda/attention_launch.cuh"
#include "kernels/cuda/attention_mma.cuh"

namespace ember::cuda::attn::mma {

constexpr int kKeepWords = kThreads;  // words of a tile's flags in one layout
static_assert(kRows * kRows == 32 * kKeepWords, "a tile's flags fill its words");
static_assert(kRows == attention_keep::kTileRows && kKeepWords == attention_keep::kTileWords &&
                  kHead == attention_keep::kHead,
              "the flags' tiles are kernels/attention_keep.h's");

EMBER_ATTN_DEVICE constexpr int keep_bit(int n, int h, int e) { return n * 4 + 2 * h + e; }

// Tiles of a problem's flags (the host sizes their buffer), and the index of (batch entry b,
// query tile qi, key tile kj).
EMBER_ATTN_HOST_DEVICE int64_t keep_tiles(const Problem<float>& p) {
  return p.batch * ((p.L + kRows - 1) / kRows) * ((p.S + kRows - 1) / kRows);
}
EMBER_ATTN_DEVICE int64_t keep_tile_index(const Problem<float>& p, int64_t b, int64_t qi,
                                          int64_t kj) {
  return (b * ((p.L + kRows - 1) / kRows) + qi) * ((p.S + kRows - 1) / kRows) + kj;
}

// The most bytes of flags one call draws ahead (a workspace of keep_tiles(p) * kKeepWords words
// a layout, an eighth of the [batch, L, S] scores): a problem with dropout whose flags take more
// runs the float kernels (attention_fwd.cuh, attention_bwd.cuh), which draw theirs inside their
// blocks and keep no workspace. 512 MiB; tests lower it.
inline int64_t& keep_bits_limit() {
  static int64_t bytes = attention_keep::kLimitBytes;
  return bytes;
}

// The workspace of `layouts` layouts of p's flags (the forward's 1, the backward's 2) for the
// tensor-core kernels, in `bits` with its words at `words` (allocated only under dropout and
// where the kernels take the problem, `takes`); false when it would pass keep_bits_limit(), and
// the float kernels run instead.
inline bool keep_bits_workspace(const Problem<float>& p, int layouts, bool takes, Device device,
                                Tensor& bits, uint32_t*& words) {
  if (!p.dropout) return true;
  const int64_t n = layouts * keep_tiles(p) * kKeepWords;
  if (4 * n > keep_bits_limit()) return false;
  if (takes) {
    bits = make_tensor({n}, DType::Int32, device);
    words = static_cast<uint32_t*>(bits.impl()->data());
  }
  return true;
}

// The words: query-major at `query`, key-major at `key` (null: not drawn), keep_tiles(p)
// tiles of kKeepWords each.
struct KeepBitsArgs {
  Problem<float> p;
  uint32_t* query = nullptr;
  uint32_t* key = nullptr;
};

// 2 bytes from p, which is 2-byte aligned.
EMBER_ATTN_DEVICE uint32_t load2(const void* p) {
#ifdef EMBER_CUDA_EMULATION
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
#else
  return *static_cast<const uint16_t*>(p);
#endif
}

// Shared memory: the tile's flags as bytes. Threads a block: the draws of a tile (up to 17
// Philox blocks a row) spread over 512, so that each thread's part is short; four blocks a
// multiprocessor (32 registers a thread).
constexpr size_t kKeepBitsSmem = size_t(kRows) * kRows;
constexpr int kKeepBitsThreads = 512;
#ifdef EMBER_CUDA_EMULATION
#define EMBER_KEEP_BITS_KERNEL
#else
#define EMBER_KEEP_BITS_KERNEL __global__ __launch_bounds__(kKeepBitsThreads, 4)
#endif

// A template on the kernels' storage type T, which it does not read, as the kernels it runs
// before.
template <class T>
EMBER_KEEP_BITS_KERNEL void attention_keep_bits_kernel(KeepBitsArgs a) {
  unsigned char* keep = shared_memory();
  const Problem<float> p = a.p.drawn();
  // The tile's place in 32-bit arithmetic (keep_bits_limit() keeps the tiles far below 2^31):
  // 64-bit divisions cost tens of instructions each.
  const unsigned qt = unsigned((p.L + kRows - 1) / kRows), kt = unsigned((p.S + kRows - 1) / kRows);
  const unsigned tile = unsigned(block_index()), b = tile / (qt * kt), rest = tile - b * (qt * kt);
  const unsigned qi = rest / kt;
  const int64_t r0 = int64_t(qi) * kRows, c0 = int64_t(rest - qi * kt) * kRows;
  const int rows = min_rows(p.L - r0, kRows), cols = min_rows(p.S - c0, kRows);
  const int tid = thread_index();
  if (p.causal && c0 > r0 + rows - 1) {  // hidden whole: no kernel reads its flags, all 0
    if (tid < 2 * kKeepWords && (tid < kKeepWords || a.key))
      (tid < kKeepWords ? a.query : a.key)[int64_t(tile) * kKeepWords + tid % kKeepWords] = 0;
    return;
  }
  // Entries past the edges, and those the causal mask hides, are not drawn (no kernel reads
  // them): 0.
  for (int i = tid; i < kRows * kRows / 8; i += kKeepBitsThreads)
    reinterpret_cast<uint64_t*>(keep)[i] = 0;
  sync_block();
  // Row r's draws start at draw (b L + r0 + r) S + c0: its cols are words 4 s + k - o of the
  // Philox blocks first / 4 + s (o = first % 4), 8 threads a row taking every 8th block (the
  // CPU's draws, as keep_tile takes them, with the index arithmetic done once a row).
  constexpr int kPerRow = kKeepBitsThreads / kRows;
  const int r = tid / kPerRow;
  if (r < rows) {
    const uint64_t first = uint64_t((int64_t(b) * p.L + r0 + r) * p.S + c0);
    const int o = int(first % 4);
    const uint64_t block0 = p.base_block + first / 4;
    // The cols the row sees: all, or under the causal mask up to its own position.
    const int seen = p.causal && r0 + r - c0 + 1 < cols ? int(r0 + r - c0 + 1) : cols;
    unsigned char* row = keep + r * kRows;
    for (int blk = tid % kPerRow; 4 * blk - o < seen; blk += kPerRow) {
      const philox::Block w = philox::block(p.seed, block0 + uint64_t(blk));
      uint32_t bytes = 0;  // the block's four flags, a byte each
      EMBER_UNROLL
      for (int k = 0; k < 4; ++k)
        bytes |= uint32_t(philox::bernoulli(w.v[k], p.threshold)) << (8 * k);
      if (o == 0 && 4 * blk + 4 <= seen) {  // the four land on one aligned word
        store4(row + 4 * blk, bytes);
        continue;
      }
      EMBER_UNROLL
      for (int k = 0; k < 4; ++k) {
        const int c = 4 * blk + k - o;
        if (c >= 0 && c < seen) row[c] = (bytes >> (8 * k)) & 1u;
      }
    }
  }
  sync_block();
  // Threads [0, 256) gather the query-major words, [256, 512) the key-major ones, two threads a
  // word (n < 4 and n >= 4), joined by a shuffle: word w as thread w of a consumer (warp w / 32,
  // lane 4 g + q) needs it.
  const bool by_key = tid >= 2 * kKeepWords, idle = by_key && !a.key;  // idle: whole warps
  const int w = tid % (2 * kKeepWords) / 2, warp = w / 32, g = w % 32 / 4, q = w % 4;
  const int n0 = tid % 2 * 4;
  uint32_t word = 0;
  EMBER_UNROLL
  for (int n = n0; n < n0 + 4 && !idle; ++n) {
    EMBER_UNROLL
    for (int h = 0; h < 2; ++h) {
      const int row = warp * 16 + g + 8 * h, col = n * 8 + 2 * q;
      if (by_key) {
        word |= uint32_t(keep[col * kRows + row]) << keep_bit(n, h, 0);
        word |= uint32_t(keep[(col + 1) * kRows + row]) << keep_bit(n, h, 1);
      } else {  // the pair of cols as one 16-bit load
        const uint32_t pair = load2(keep + row * kRows + col);
        word |= uint32_t(pair & 1u) << keep_bit(n, h, 0);
        word |= uint32_t(pair >> 8) << keep_bit(n, h, 1);
      }
    }
  }
  word |= shfl_xor(word, 1);
  if (!idle && tid % 2 == 0) (by_key ? a.key : a.query)[int64_t(tile) * kKeepWords + w] = word;
}

// This thread's word of the flags of (batch entry b, query tile qi, key tile kj) in one layout.
EMBER_ATTN_DEVICE uint32_t keep_word(const uint32_t* words, const Problem<float>& p, int64_t b,
                                     int64_t qi, int64_t kj) {
  return words[keep_tile_index(p, b, qi, kj) * kKeepWords + thread_index()];
}

// Whether the flag of (n, h, e) in a thread's word is set.
EMBER_ATTN_DEVICE bool kept(uint32_t word, int n, int h, int e) {
  return (word >> keep_bit(n, h, e)) & 1u;
}

// The words of an attention_keep input in[at] (where the op has one and p has dropout), checked
// against p's tiles: both layouts, drawn ahead; null where there is none.
inline uint32_t* drawn_words(std::span<const Tensor> in, size_t at, const Problem<float>& p,
                             const char* op) {
  if (in.size() <= at || !p.dropout) return nullptr;
  const Tensor& w = in[at];
  EMBER_CHECK(w.dtype() == DType::Int32 && w.is_contiguous() &&
                  w.numel() == 2 * keep_tiles(p) * kKeepWords,
              op, ": the keep flags drawn ahead must be attention_keep's int32 [",
              2 * keep_tiles(p) * kKeepWords, "] for ", p.batch, " x ", p.L, " x ", p.S,
              " scores, got ", dtype_name(w.dtype()), " ", w.shape_str());
  return static_cast<uint32_t*>(w.impl()->data());
}

// Draws both layouts of p's flags (the attention_keep op) into `words`, 2 * keep_tiles(p) *
// kKeepWords of them, on `run`.
template <class Runner>
void draw_keep(const Problem<float>& p, uint32_t* words, Runner&& run, const char* op) {
  if (!p.dropout || p.L == 0 || p.S == 0) return;
  run(&attention_keep_bits_kernel<__nv_bfloat16>, grid_blocks(1, keep_tiles(p), op),
      kKeepBitsSmem, KeepBitsArgs{p, words, words + keep_tiles(p) * kKeepWords},
      kKeepBitsThreads);
}

}  // namespace ember::cuda::attn::mma
