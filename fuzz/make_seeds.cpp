// Writes the fuzzer's seed corpus: small valid safetensors files covering every dtype,
// 0-dim and empty tensors, metadata, and several tensors in one file.
#include <cstdio>
#include <string>

#include "core/make_tensor.h"
#include "ember/io.h"

using namespace ember;

namespace {

Tensor filled(const Shape& shape, DType dtype, uint8_t seed) {
  Tensor t = make_tensor(shape, dtype);
  auto* p = static_cast<uint8_t*>(t.data_ptr());
  const size_t n = size_t(t.numel()) * dtype_size(dtype);
  for (size_t i = 0; i < n; ++i)
    p[i] = dtype == DType::Bool ? (i + seed) % 2 : uint8_t(i * 37 + seed);
  return t;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUT_DIR\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  const DType all[] = {DType::Bool,     DType::Int32,   DType::Int64,  DType::Float16,
                       DType::BFloat16, DType::Float32, DType::Float64};
  int n = 0;
  auto save = [&](const io::NamedTensors& t, const io::Metadata& md) {
    io::save_safetensors(dir + "/seed" + std::to_string(n++) + ".safetensors", t, md);
  };
  save({}, {});
  save({}, {{"format", "pt"}});
  for (DType t : all) save({{"x", filled({2, 3}, t, 1)}}, {});
  save({{"scalar", filled({}, DType::Float32, 2)}, {"empty", filled({0, 4}, DType::Int64, 3)}},
       {{"note", "edge"}});
  io::NamedTensors mixed;
  for (DType t : all)
    mixed.emplace_back(std::string("t.") + std::string(dtype_name(t)), filled({3}, t, 4));
  save(mixed, {{"step", "100"}, {"config", "{\"n_layer\": 2}"}});
  io::Checkpoint ck;
  ck.model = {{"wte", filled({4, 2}, DType::Float32, 5)}};
  ck.optimizer = {{"wte.exp_avg", filled({4, 2}, DType::Float32, 6)}};
  ck.step = 7;
  io::save_checkpoint(dir + "/seed" + std::to_string(n++) + ".safetensors", ck);
  std::printf("wrote %d seeds to %s\n", n, dir.c_str());
  return 0;
}
