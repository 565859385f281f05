// A character-level GPT trained from C++: a compiled loss, AdamW, then a sample.
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "ember/compile.h"
#include "ember/ember.h"
#include "ember/nn.h"
#include "ember/optim.h"

using namespace ember;

int main() {
  std::string text;
  for (int i = 0; i < 40; ++i) text += "to be, or not to be, that is the question. ";
  std::string vocab;  // the distinct characters, in order of first use
  for (char c : text)
    if (vocab.find(c) == std::string::npos) vocab += c;
  std::vector<int64_t> ids;
  for (char c : text) ids.push_back(int64_t(vocab.find(c)));
  Tensor data = from_vector(ids, {int64_t(ids.size())}, DType::Int64);

  nn::GPTConfig cfg;
  cfg.vocab_size = int64_t(vocab.size());
  cfg.block_size = 32;
  cfg.n_layer = 2;
  cfg.n_head = 2;
  cfg.n_embd = 64;
  manual_seed(1337);
  auto model = std::make_shared<nn::GPT>(cfg);
  optim::AdamW opt(optim::decay_groups(*model, 0.1), 3e-3);
  auto loss_fn = compile([model](const Tensor& x, const Tensor& y) { return model->loss(x, y); });

  const int64_t batch = 8, T = cfg.block_size;
  for (int it = 0; it <= 100; ++it) {
    Tensor starts = randint(0, data.size(0) - T - 1, {batch, 1});
    Tensor pos = starts + arange(T).unsqueeze(0);  // [batch, T] positions into the text
    Tensor x = data.index_select(0, pos.flatten()).view({batch, T});
    Tensor y = data.index_select(0, (pos + 1).flatten()).view({batch, T});
    opt.zero_grad();
    Tensor loss = loss_fn(x, y);
    loss.backward();
    optim::clip_grad_norm_(model->parameters(), 1.0);
    opt.step();
    if (it % 50 == 0) std::printf("iter %3d  loss %.4f\n", it, loss.item());
  }

  Tensor start = from_vector(std::vector<int64_t>{int64_t(vocab.find('t'))}, {1, 1}, DType::Int64);
  std::vector<int64_t> out = model->generate(start, 60, 0.8, 5).to_vector<int64_t>();
  std::string sample;
  for (int64_t id : out) sample += vocab[size_t(id)];
  std::printf("sample: %s\n", sample.c_str());
  return 0;
}
