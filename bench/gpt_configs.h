// The GPT shapes the gpt and training rows measure: nanoGPT's CPU recipe ("baby": 4 layers,
// 4 heads, 128 embd, block 64, batch 12) and a larger one (6 layers, 6 heads, 384 embd, block
// 256, batch 8), vocab 65 (characters).
#pragma once
#include <cstdint>

#include "ember/nn.h"

namespace ember::bench {

struct GptBenchConfig {
  const char* name;
  int64_t n_layer, n_head, n_embd, block, batch;
  double dropout = 0.0;
};
inline constexpr GptBenchConfig kBabyGpt{"baby", 4, 4, 128, 64, 12};
inline constexpr GptBenchConfig kGpt384{"384", 6, 6, 384, 256, 8};

inline nn::GPTConfig gpt_config(const GptBenchConfig& c) {
  nn::GPTConfig g;
  g.n_layer = c.n_layer;
  g.n_head = c.n_head;
  g.n_embd = c.n_embd;
  g.block_size = c.block;
  g.vocab_size = 65;
  g.dropout = c.dropout;
  return g;
}

}  // namespace ember::bench
