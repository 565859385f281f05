// ember-gpt train --compile: the compiled training step reports its compile time once and
// follows the eager run's loss curve (same seed; with dropout, and for 200 steps without) as
// loss.csv records it.
#include <gtest/gtest.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "compiler/compiler_test_util.h"

namespace ember::test {
namespace {

namespace fs = std::filesystem;

std::string run_gpt(const std::string& args, int* code) {
  std::string cmd = std::string(EMBER_GPT_BIN) + " " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  EXPECT_NE(p, nullptr);
  std::string out;
  std::array<char, 4096> buf;
  while (fgets(buf.data(), int(buf.size()), p)) out += buf.data();
  *code = WEXITSTATUS(pclose(p));
  return out;
}

std::map<int, double> train_losses(const std::string& dir) {
  std::ifstream f(dir + "/loss.csv");
  std::map<int, double> out;
  std::string line;
  std::getline(f, line);  // header
  while (std::getline(f, line)) {
    std::stringstream ss(line);
    std::string iter, loss;
    std::getline(ss, iter, ',');
    std::getline(ss, loss, ',');
    if (!loss.empty()) out[std::stoi(iter)] = std::stod(loss);
  }
  return out;
}

// Trains eager and compiled from the same seed; `iters` losses of each, as loss.csv has them.
// `compile_args` are added to the compiled run's flags. Returns the compiled run's output.
std::string follow_eager(const std::string& model_args, int iters, double rtol,
                         const std::string& compile_args = "") {
  CacheDir cache(kSharedCompilerCache);  // the child inherits it
  const std::string base =
      (fs::temp_directory_path() / ("ember_gpt_compile_" + std::to_string(getpid()))).string();
  const std::string n = std::to_string(iters);
  const std::string args = model_args + " --batch_size 4 --eval_iters 2 --max_iters " + n +
                           " --eval_interval " + n + " --log_interval 10 --seed 7";
  int code = 0;
  std::string eager = run_gpt("train --out_dir " + base + "_e" + args, &code);
  EXPECT_EQ(code, 0) << eager;
  if (code != 0) return eager;
  std::string compiled =
      run_gpt("train --compile true" + compile_args + " --out_dir " + base + "_c" + args, &code);
  EXPECT_EQ(code, 0) << compiled;
  if (code != 0) return compiled;
  EXPECT_NE(compiled.find("compiled the training step (forward + backward + AdamW) in "), std::string::npos)
      << compiled;
  EXPECT_NE(compiled.find("ms/iter"), std::string::npos) << compiled;
  std::map<int, double> le = train_losses(base + "_e"), lc = train_losses(base + "_c");
  EXPECT_EQ(le.size(), size_t(iters));
  EXPECT_EQ(lc.size(), le.size());
  for (auto& [iter, loss] : le) EXPECT_NEAR(lc[iter], loss, rtol * loss) << "iter " << iter;
  fs::remove_all(base + "_e");
  fs::remove_all(base + "_c");
  return compiled;
}

// With dropout: the compiled step draws the same masks.
TEST(GptAppCompile, CompiledTrainingWithDropoutFollowsEager) {
  follow_eager(" --n_layer 1 --n_head 2 --n_embd 16 --block_size 16 --dropout 0.1", 40, 1e-4);
}

// --eager_probe_iters: the first iterations eager, then compiled, on the same loss curve, and
// both speeds reported.
TEST(GptAppCompile, EagerProbeThenCompiledFollowsEager) {
  const std::string out = follow_eager(" --n_layer 1 --n_head 2 --n_embd 16 --block_size 16", 30,
                                       1e-4, " --eager_probe_iters 6");
  EXPECT_NE(out.find("speed: eager "), std::string::npos) << out;
  EXPECT_NE(out.find("(iterations 1-5), compiled "), std::string::npos) << out;
}

// 200 steps of a model whose backward runs the attention and layer_norm backward kernels
// (heads of 16 over 16 positions): every logged loss within 1e-4 relative of eager's.
TEST(GptAppCompile, TwoHundredCompiledStepsFollowEager) {
  follow_eager(" --n_layer 2 --n_head 2 --n_embd 32 --block_size 16 --dropout 0", 200, 1e-4);
}

}  // namespace
}  // namespace ember::test
