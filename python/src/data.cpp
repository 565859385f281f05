// ember.data's core: the character tokenizer, nanoGPT-style train/val preparation and the
// token dataset whose batches ember-gpt train draws (include/ember/io.h). A Python training
// loop that calls get_batch(batch_size, block_size, seed, step) sees the same batches as
// ember-gpt for the same seed. python/ember/data.py re-exports these.
#include "common.h"

#include <nanobind/stl/pair.h>
#include <nanobind/stl/string_view.h>

#include "ember/io.h"

namespace ember::python {
namespace {

void bind_tokenizer(nb::module_& m) {
  nb::class_<io::CharTokenizer>(m, "CharTokenizer",
                                "Characters as tokens: the sorted unique code points of a text; "
                                "an id is a position in that list.")
      .def_static("from_text", &io::CharTokenizer::from_text, nb::arg("text"),
                  "The vocabulary of text's characters.")
      .def_static("from_json", &io::CharTokenizer::from_json, nb::arg("json"),
                  "From {\"type\": \"char\", \"vocab\": [...]} (checkpoints, meta.json).")
      .def("to_json", &io::CharTokenizer::to_json)
      .def_prop_ro("vocab_size", &io::CharTokenizer::vocab_size)
      .def_prop_ro(
          "chars",
          [](const io::CharTokenizer& tok) {
            std::vector<std::string> out;
            for (int64_t i = 0; i < tok.vocab_size(); ++i)
              out.push_back(tok.decode(std::span<const int64_t>(&i, 1)));
            return out;
          },
          "The characters in id order (one str each).")
      .def("encode", &io::CharTokenizer::encode, nb::arg("text"), "The ids of text's characters.")
      .def(
          "decode",
          [](const io::CharTokenizer& tok, nb::handle ids) {
            if (nb::isinstance<Tensor>(ids)) return tok.decode(nb::cast<Tensor>(ids));
            std::vector<int64_t> v = nb::cast<std::vector<int64_t>>(ids);
            return tok.decode(std::span<const int64_t>(v));
          },
          nb::arg("ids"), "The text of a sequence of ids (a list or an integer tensor).")
      .def("__len__", &io::CharTokenizer::vocab_size);
}

void bind_token_dataset(nb::module_& m) {
  nb::class_<io::TokenDataset>(
      m, "TokenDataset",
      "Token ids sampled in nanoGPT's way: row b of a batch is the window x = tokens[i : i+T], "
      "y = tokens[i+1 : i+T+1] with i a hash of (seed, step, b), so a batch depends only on "
      "(seed, step): the sampler of ember-gpt train.")
      .def(nb::init<std::vector<uint16_t>, std::string>(), nb::arg("tokens"),
           nb::arg("name") = "<memory>", "Tokens in memory (ids below 65536); name is for errors.")
      .def_static("load", &io::TokenDataset::load, nb::arg("path"), nb::arg("vocab_size") = 0,
                  "A file of raw little-endian uint16 ids (train.bin, val.bin); with "
                  "vocab_size > 0, every id is checked to be below it.")
      .def("__len__", &io::TokenDataset::size)
      .def_prop_ro(
          "tokens",
          [](const io::TokenDataset& d) {
            const auto& t = d.tokens();
            return from_vector(std::vector<int64_t>(t.begin(), t.end()), {d.size()},
                               DType::Int64);
          },
          "A copy of the tokens as a 1-D int64 tensor.")
      .def(
          "get_batch",
          [](const io::TokenDataset& d, int64_t batch_size, int64_t block_size, uint64_t seed,
             uint64_t step, nb::handle device) {
            return d.get_batch(batch_size, block_size, seed, step,
                               device_arg(device).value_or(kCPU));
          },
          nb::arg("batch_size"), nb::arg("block_size"), nb::arg("seed"), nb::arg("step"),
          nb::arg("device") = nb::none(),
          "(x, y): int64 tensors [batch_size, block_size], y the next tokens of x.")
      .def("window_start", &io::TokenDataset::window_start, nb::arg("block_size"),
           nb::arg("seed"), nb::arg("step"), nb::arg("row"),
           "Where row `row` of get_batch(..., seed, step) starts, in [0, len - block_size).");
}

}  // namespace

void bind_data(nb::module_& m) {
  bind_tokenizer(m);
  bind_token_dataset(m);
  nb::class_<io::PreparedText>(m, "PreparedText", "What prepare_char_dataset wrote.")
      .def_ro("tokenizer", &io::PreparedText::tokenizer)
      .def_ro("train_tokens", &io::PreparedText::train_tokens)
      .def_ro("val_tokens", &io::PreparedText::val_tokens);
  m.def("prepare_char_dataset", &io::prepare_char_dataset, nb::arg("text_path"),
        nb::arg("out_dir"), nb::arg("val_fraction") = 0.1,
        "Encodes a UTF-8 text file per character and writes out_dir/train.bin (the first "
        "1 - val_fraction of the tokens), out_dir/val.bin (the rest) and out_dir/meta.json, as "
        "ember-gpt train does.");
}

}  // namespace ember::python
