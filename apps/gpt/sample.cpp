// ember-gpt sample: load a checkpoint and print generated text.
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include "ember/ember.h"
#include "ember/io.h"
#include "ember/nn.h"
#include "gpt/gpt_app.h"

namespace ember::app {

int run_sample(const SampleOptions& o) {
  namespace fs = std::filesystem;
  const Device device = app_device(o.device);
  EMBER_CHECK(o.num_samples > 0 && o.max_new_tokens >= 0, "--num_samples must be positive and "
              "--max_new_tokens non-negative");
  std::string path = o.checkpoint;
  if (path.empty()) {
    path = o.out_dir + "/best.safetensors";
    if (!fs::exists(path)) path = o.out_dir + "/ckpt.safetensors";
  }
  EMBER_CHECK(fs::exists(path), "no checkpoint at ", path, "; train first (ember-gpt train --out_dir ",
              o.out_dir, ") or pass --checkpoint");
  io::Checkpoint ckpt = io::load_checkpoint(path);
  auto tok_it = ckpt.extra.find("tokenizer");
  EMBER_CHECK(tok_it != ckpt.extra.end(), path, " has no tokenizer in its metadata");
  io::CharTokenizer tok = io::CharTokenizer::from_json(tok_it->second);
  nn::GPTConfig cfg = nn::GPTConfig::from_json(ckpt.config);
  cfg.dropout = 0;
  nn::GPT model(cfg);
  model.load_state_dict(ckpt.model);
  model.to(device);
  model.eval();

  std::string start = o.start;
  if (start.rfind("FILE:", 0) == 0) {
    std::ifstream f(start.substr(5));
    EMBER_CHECK(f, "--start: cannot read ", start.substr(5));
    std::stringstream ss;
    ss << f.rdbuf();
    start = ss.str();
  }
  std::vector<int64_t> ids = tok.encode(start);
  EMBER_CHECK(!ids.empty(), "--start must hold at least one character");
  manual_seed(o.seed);
  Tensor idx = from_vector(ids, {1, int64_t(ids.size())}, DType::Int64).to(device);
  for (int64_t s = 0; s < o.num_samples; ++s) {
    Tensor out = model.generate(idx, o.max_new_tokens, o.temperature, o.top_k);
    std::cout << tok.decode(out.cpu()) << "\n---------------\n";
    std::cout.flush();
  }
  return 0;
}

}  // namespace ember::app
