// Checkpoints: model and optimizer tensors, step, config, RNG position and free-form keys come
// back as saved; files that are not checkpoints, or are damaged ones, are refused clearly.
#include "io/checkpoint.h"

#include <gtest/gtest.h>

#include "ember/io.h"
#include "io/io_test_util.h"

namespace ember::test {
namespace {

io::Checkpoint sample_checkpoint() {
  io::Checkpoint ck;
  ck.model = {{"wte.weight", patterned_tensor({5, 4}, DType::Float32, 1)},
              {"h.0.attn.c_attn.bias", patterned_tensor({12}, DType::Float32, 2)},
              {"lm_head.weight", patterned_tensor({4, 5}, DType::Float32, 3).t()}};
  ck.optimizer = {{"step", patterned_tensor({}, DType::Int64, 4)},
                  {"wte.weight.exp_avg", patterned_tensor({5, 4}, DType::Float32, 5)},
                  {"wte.weight.exp_avg_sq", patterned_tensor({5, 4}, DType::Float32, 6)}};
  ck.step = 1234;
  ck.config = R"({"n_layer": 2, "n_head": 2, "n_embd": 4, "dropout": 0.0})";
  ck.rng = {UINT64_MAX, (uint64_t(1) << 63) + 5};  // full 64-bit range survives
  ck.extra = {{"tokenizer", R"({"type":"char","vocab":["a","b"]})"}, {"best_val_loss", "1.4"}};
  return ck;
}

void expect_tensors_equal(const io::NamedTensors& got, const io::NamedTensors& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(got[i].first, want[i].first);
    EXPECT_EQ(got[i].second.dtype(), want[i].second.dtype()) << want[i].first;
    EXPECT_EQ(got[i].second.sizes(), want[i].second.sizes()) << want[i].first;
    EXPECT_EQ(logical_bytes(got[i].second), logical_bytes(want[i].second)) << want[i].first;
  }
}

TEST(Checkpoint, RoundTripsEverything) {
  TempDir dir;
  const io::Checkpoint ck = sample_checkpoint();
  const std::string path = dir.file("ckpt.safetensors");
  io::save_checkpoint(path, ck);
  io::Checkpoint back = io::load_checkpoint(path);
  expect_tensors_equal(back.model, ck.model);
  expect_tensors_equal(back.optimizer, ck.optimizer);
  EXPECT_EQ(back.step, 1234);
  EXPECT_EQ(back.config, ck.config);
  EXPECT_EQ(back.rng.seed, UINT64_MAX);
  EXPECT_EQ(back.rng.offset, (uint64_t(1) << 63) + 5);
  EXPECT_EQ(back.extra, ck.extra);
}

TEST(Checkpoint, IsAPlainSafetensorsFileWithPrefixes) {
  TempDir dir;
  const std::string path = dir.file("ckpt.safetensors");
  io::save_checkpoint(path, sample_checkpoint());
  io::TensorFile f = io::load_safetensors(path);
  EXPECT_TRUE(f.contains("model.wte.weight"));
  EXPECT_TRUE(f.contains("optim.wte.weight.exp_avg_sq"));
  EXPECT_EQ(f.tensors.size(), 6u);
  EXPECT_EQ(f.metadata.at("format"), "ember-checkpoint/1");
  EXPECT_EQ(f.metadata.at("step"), "1234");
  EXPECT_EQ(f.metadata.at("rng_seed"), "18446744073709551615");
  EXPECT_EQ(f.metadata.at("rng_offset"), "9223372036854775813");
  EXPECT_EQ(f.metadata.at("best_val_loss"), "1.4");
}

TEST(Checkpoint, EmptyCheckpointRoundTrips) {
  TempDir dir;
  io::Checkpoint ck;
  io::save_checkpoint(dir.file("c"), ck);
  io::Checkpoint back = io::load_checkpoint(dir.file("c"));
  EXPECT_TRUE(back.model.empty());
  EXPECT_TRUE(back.optimizer.empty());
  EXPECT_EQ(back.step, 0);
  EXPECT_EQ(back.config, "{}");
  EXPECT_EQ(back.rng.seed, 0u);
}

TEST(Checkpoint, SaveRefusesBadInput) {
  TempDir dir;
  const std::string path = dir.file("c");
  io::Checkpoint ck = sample_checkpoint();
  ck.extra["step"] = "9";
  EXPECT_ERROR_WITH(io::save_checkpoint(path, ck), "extra metadata key 'step' is reserved");
  ck = sample_checkpoint();
  ck.config = "{n_layer: 2}";
  EXPECT_ERROR_WITH(io::save_checkpoint(path, ck), "config is not a valid JSON document");
  ck = sample_checkpoint();
  ck.step = -1;
  EXPECT_ERROR_WITH(io::save_checkpoint(path, ck), "step -1 is negative");
  ck = sample_checkpoint();
  ck.model.push_back(ck.model[0]);
  EXPECT_ERROR_WITH(io::save_checkpoint(path, ck), "two tensors are named 'model.wte.weight'");
  ck = sample_checkpoint();
  ck.optimizer.emplace_back("", patterned_tensor({1}, DType::Float32, 1));
  EXPECT_ERROR_WITH(io::save_checkpoint(path, ck), "empty name");
  EXPECT_TRUE(dir.entries().empty());
}

TEST(Checkpoint, LoadRefusesWhatIsNotACheckpoint) {
  TempDir dir;
  const std::string path = dir.file("c");
  auto meta = [] {
    return io::Metadata{{"format", "ember-checkpoint/1"},
                        {"step", "3"},
                        {"config", "{}"},
                        {"rng_seed", "1"},
                        {"rng_offset", "2"}};
  };
  io::save_safetensors(path, {{"w", patterned_tensor({1}, DType::Float32, 1)}});
  EXPECT_ERROR_WITH(io::load_checkpoint(path), "not an ember checkpoint");

  io::save_safetensors(path, {{"w", patterned_tensor({1}, DType::Float32, 1)}}, meta());
  EXPECT_ERROR_WITH(io::load_checkpoint(path), "tensor 'w' is neither");
  io::save_safetensors(path, {{"model.", patterned_tensor({1}, DType::Float32, 1)}}, meta());
  EXPECT_ERROR_WITH(io::load_checkpoint(path), "tensor 'model.' is neither");

  struct Case {
    const char* key;
    const char* value;
    const char* needle;
  };
  const Case cases[] = {
      {"format", "ember-checkpoint/9", "format 'ember-checkpoint/9' is not supported"},
      {"step", "12x", "metadata 'step' = '12x' is not a valid integer"},
      {"step", "", "is not a valid integer"},
      {"step", "-4", "step -4 is negative"},
      {"step", "99999999999999999999", "is not a valid integer"},
      {"rng_seed", "-1", "'rng_seed' = '-1' is not a valid unsigned 64-bit integer"},
      {"rng_offset", "18446744073709551616", "is not a valid unsigned"},
      {"config", "{", "config is not a valid JSON document"},
  };
  for (const Case& c : cases) {
    io::Metadata md = meta();
    md[c.key] = c.value;
    io::save_safetensors(path, {}, md);
    EXPECT_ERROR_WITH(io::load_checkpoint(path), c.needle);
  }
  for (const char* key : {"step", "config", "rng_seed", "rng_offset"}) {
    io::Metadata md = meta();
    md.erase(key);
    io::save_safetensors(path, {}, md);
    EXPECT_ERROR_WITH(io::load_checkpoint(path), std::string("'") + key + "' is missing");
  }
  io::save_safetensors(path, {}, meta());
  EXPECT_EQ(io::load_checkpoint(path).step, 3);
}

TEST(Checkpoint, DamagedFileIsRefusedWithItsName) {
  TempDir dir;
  const std::string path = dir.file("ckpt.safetensors");
  io::save_checkpoint(path, sample_checkpoint());
  std::vector<std::byte> bytes = read_bytes(path);
  ASSERT_FALSE(bytes.empty());
  bytes.pop_back();
  write_bytes(path, bytes);
  EXPECT_ERROR_WITH(io::load_checkpoint(path), path);
  EXPECT_ERROR_WITH(io::load_checkpoint(path), "reach past the end of the data buffer");
}

}  // namespace
}  // namespace ember::test
