// ember-gpt train --compile: the compiled training step reports its compile time once and
// follows the eager run's loss curve (same seed, dropout on) as loss.csv records it.
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

TEST(GptAppCompile, CompiledTrainingFollowsEager) {
  CacheDir cache(kSharedCompilerCache);  // the child inherits it
  const std::string base =
      (fs::temp_directory_path() / ("ember_gpt_compile_" + std::to_string(getpid()))).string();
  const std::string args =
      " --n_layer 1 --n_head 2 --n_embd 16 --block_size 16 --batch_size 4 --eval_iters 2"
      " --max_iters 40 --eval_interval 40 --log_interval 10 --dropout 0.1 --seed 7";
  int code = 0;
  std::string eager = run_gpt("train --out_dir " + base + "_e" + args, &code);
  ASSERT_EQ(code, 0) << eager;
  std::string compiled = run_gpt("train --compile true --out_dir " + base + "_c" + args, &code);
  ASSERT_EQ(code, 0) << compiled;
  EXPECT_NE(compiled.find("compiled the training step (forward + backward + AdamW) in "), std::string::npos)
      << compiled;
  EXPECT_NE(compiled.find("ms/iter"), std::string::npos) << compiled;
  std::map<int, double> le = train_losses(base + "_e"), lc = train_losses(base + "_c");
  ASSERT_EQ(le.size(), 40u);
  ASSERT_EQ(lc.size(), le.size());
  for (auto& [iter, loss] : le) EXPECT_NEAR(lc[iter], loss, 1e-4 * loss) << "iter " << iter;
  fs::remove_all(base + "_e");
  fs::remove_all(base + "_c");
}

}  // namespace
}  // namespace ember::test
