// ember-gpt end to end: a short training run whose loss must fall, resume that continues the
// same loss curve exactly, sampling from the checkpoint, and clear errors for bad flags.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "ember/cuda.h"

namespace {

namespace fs = std::filesystem;

struct Result {
  int code;
  std::string output;
};

// ember-gpt with `args`, and environment assignments ("NAME=value ...") in front when given.
Result run_env(const std::string& env, const std::string& args) {
  std::string cmd = env + (env.empty() ? "" : " ") + EMBER_GPT_BIN + " " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  EXPECT_NE(p, nullptr);
  std::string out;
  std::array<char, 4096> buf;
  while (fgets(buf.data(), int(buf.size()), p)) out += buf.data();
  int status = pclose(p);
  return {WEXITSTATUS(status), out};
}
Result run(const std::string& args) { return run_env("", args); }

// iter -> train loss text, as written in loss.csv
std::map<int, std::string> train_losses(const std::string& dir) {
  std::ifstream f(dir + "/loss.csv");
  std::map<int, std::string> out;
  std::string line;
  std::getline(f, line);  // header
  while (std::getline(f, line)) {
    std::stringstream ss(line);
    std::string iter, loss;
    std::getline(ss, iter, ',');
    std::getline(ss, loss, ',');
    if (!loss.empty()) out[std::stoi(iter)] = loss;
  }
  return out;
}

std::string temp_dir(const std::string& name) {
  fs::path p = fs::temp_directory_path() / ("ember_gpt_test_" + name + "_" + std::to_string(getpid()));
  fs::remove_all(p);
  return p.string();
}

const std::string kTiny =
    " --n_layer 1 --n_head 2 --n_embd 16 --block_size 16 --batch_size 4 --eval_iters 2"
    " --log_interval 1000 --warmup_iters 5 --lr_decay_iters 200 --dropout 0.1 --seed 7";

TEST(GptApp, ResumeContinuesTheSameLossCurve) {
  std::string full = temp_dir("full"), part = temp_dir("part");
  Result a = run("train --out_dir " + full + " --max_iters 200 --eval_interval 50" + kTiny);
  ASSERT_EQ(a.code, 0) << a.output;
  Result b = run("train --out_dir " + part + " --max_iters 100 --eval_interval 50" + kTiny);
  ASSERT_EQ(b.code, 0) << b.output;
  Result c = run("train --out_dir " + part + " --max_iters 200 --eval_interval 50 --init_from resume" + kTiny);
  ASSERT_EQ(c.code, 0) << c.output;
  EXPECT_NE(c.output.find("resumed from"), std::string::npos) << c.output;
  auto la = train_losses(full), lc = train_losses(part);
  ASSERT_EQ(la.size(), 200u);
  ASSERT_EQ(lc.size(), 200u);
  for (int i = 0; i < 200; ++i) EXPECT_EQ(la[i], lc[i]) << "iter " << i;

  Result s = run("sample --out_dir " + full + " --max_new_tokens 30 --num_samples 2");
  ASSERT_EQ(s.code, 0) << s.output;
  EXPECT_GT(s.output.size(), 60u);
  fs::remove_all(full);
  fs::remove_all(part);
}

TEST(GptApp, LossFallsOnShakespeare) {
  std::string dir = temp_dir("fall");
  Result r = run("train --out_dir " + dir +
                 " --n_layer 2 --n_head 2 --n_embd 64 --block_size 32 --batch_size 16"
                 " --max_iters 300 --eval_interval 300 --eval_iters 5 --lr 1e-2"
                 " --lr_decay_iters 300 --warmup_iters 20 --log_interval 1000");
  ASSERT_EQ(r.code, 0) << r.output;
  auto losses = train_losses(dir);
  ASSERT_EQ(losses.size(), 300u);
  double first = std::stod(losses[0]), last10 = 0;
  for (int i = 290; i < 300; ++i) last10 += std::stod(losses[i]) / 10;
  EXPECT_NEAR(first, std::log(65.0), 0.3);  // starts near uniform over 65 symbols
  EXPECT_LT(last10, 2.5) << r.output;
  // The loss plot: an SVG with the train curve (300 points) and the val points (iters 0, 300).
  std::ifstream svg(dir + "/loss.svg");
  ASSERT_TRUE(svg) << "no loss.svg in " << dir;
  std::stringstream text;
  text << svg.rdbuf();
  const std::string s = text.str();
  EXPECT_EQ(s.rfind("<svg ", 0), 0u);
  EXPECT_NE(s.find("</svg>"), std::string::npos);
  size_t polylines = 0, circles = 0;
  for (size_t p = s.find("<polyline"); p != std::string::npos; p = s.find("<polyline", p + 1))
    ++polylines;
  for (size_t p = s.find("<circle"); p != std::string::npos; p = s.find("<circle", p + 1))
    ++circles;
  EXPECT_EQ(polylines, 2u);
  EXPECT_EQ(circles, 2u);
  fs::remove_all(dir);
}

TEST(GptApp, BadFlagsGiveClearErrors) {
  Result r = run("train --n_embd 30 --n_head 4 --max_iters 1 --out_dir " + temp_dir("bad"));
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.output.find("divisible"), std::string::npos) << r.output;
  Result s = run("sample --out_dir " + temp_dir("nothing"));
  EXPECT_NE(s.code, 0);
  EXPECT_NE(s.output.find("no checkpoint"), std::string::npos) << s.output;
  Result d = run("train --device tpu --max_iters 1 --out_dir " + temp_dir("dev"));
  EXPECT_NE(d.code, 0);
  EXPECT_NE(d.output.find("unknown device 'tpu'"), std::string::npos) << d.output;
  if (!ember::cuda::is_available()) {
    Result c = run("train --device cuda --max_iters 1 --out_dir " + temp_dir("dev"));
    EXPECT_NE(c.code, 0);
    EXPECT_NE(c.output.find("--device cuda"), std::string::npos) << c.output;
  }
}

}  // namespace

namespace {

// --dtype float16 trains under float16 autocast with loss scaling, and says how it went.
TEST(GptApp, Float16TrainsWithLossScaling) {
  Result r = run("train --max_iters 30 --eval_interval 30 --eval_iters 1 --n_layer 1 --n_head 2 "
                 "--n_embd 16 --block_size 8 --batch_size 4 --dtype float16 --out_dir " +
                 temp_dir("f16"));
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("float16 autocast"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("float16 loss scaling: "), std::string::npos) << r.output;
}

// EMBER_PROFILE_OPS=1 prints a table of the ops that ran, by time, when the program exits.
TEST(GptApp, OpProfileTableAtExit) {
  Result r = run("train --max_iters 2 --eval_interval 100 --eval_iters 1 --n_layer 1 --n_head 2 "
                 "--n_embd 16 --block_size 8 --batch_size 2 --quiet --out_dir " +
                 temp_dir("profile") + " --device cpu");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(r.output.find("[ember op profile]"), std::string::npos) << "printed without the variable";
  Result p = run_env("EMBER_PROFILE_OPS=1", "train --max_iters 2 --eval_interval 100 --eval_iters 1 "
                     "--n_layer 1 --n_head 2 --n_embd 16 --block_size 8 --batch_size 2 --quiet "
                     "--out_dir " + temp_dir("profile2") + " --device cpu");
  EXPECT_EQ(p.code, 0) << p.output;
  EXPECT_NE(p.output.find("[ember op profile]"), std::string::npos) << p.output;
  for (const char* op : {"matmul", "softmax", "cross_entropy", "layer_norm"})
    EXPECT_NE(p.output.find(std::string("  ") + op + " "), std::string::npos) << op << "\n" << p.output;
}

}  // namespace
