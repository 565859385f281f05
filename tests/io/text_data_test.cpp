// Character-level text data: the tokenizer on the shipped Shakespeare text, nanoGPT-style
// preparation into train.bin/val.bin/meta.json, and batches reproducible by (seed, step).
#include "io/text_data.h"

#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <sstream>

#include "ember/io.h"
#include "ember/ops.h"
#include "io/io_test_util.h"

namespace ember::test {
namespace {

const std::string kShakespeare = std::string(EMBER_SOURCE_DIR) + "/data/tinyshakespeare.txt";

std::string read_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::vector<int64_t> row(const Tensor& t, int64_t r) {
  const auto* p = t.data_ptr<int64_t>() + r * t.size(1);
  return std::vector<int64_t>(p, p + t.size(1));
}

TEST(CharTokenizer, ShakespeareHas65SymbolsAndRoundTrips) {
  const std::string text = read_text(kShakespeare);
  ASSERT_EQ(text.size(), 1115394u) << "data/tinyshakespeare.txt";
  io::CharTokenizer tok = io::CharTokenizer::from_text(text);
  EXPECT_EQ(tok.vocab_size(), 65);
  // nanoGPT's shakespeare_char vocabulary: sorted(set(text)).
  EXPECT_EQ(tok.chars().front(), U'\n');
  EXPECT_EQ(tok.chars()[1], U' ');
  EXPECT_EQ(tok.chars().back(), U'z');
  std::vector<int64_t> ids = tok.encode(text);
  ASSERT_EQ(ids.size(), 1115394u);
  EXPECT_EQ(ids[0], 18) << "'F' is id 18 in nanoGPT's vocabulary";
  EXPECT_EQ(tok.decode(ids), text);
}

TEST(CharTokenizer, VocabularyIsSortedUniqueCodePoints) {
  io::CharTokenizer tok = io::CharTokenizer::from_text("baé€a😀b");
  ASSERT_EQ(tok.vocab_size(), 5);
  EXPECT_EQ(tok.chars(), (std::vector<char32_t>{U'a', U'b', U'é', U'€', U'😀'}));
  EXPECT_EQ(tok.encode("€😀ab"), (std::vector<int64_t>{3, 4, 0, 1}));
  std::vector<int64_t> ids = {4, 2, 0};
  EXPECT_EQ(tok.decode(ids), "😀éa");
  EXPECT_EQ(io::CharTokenizer::from_text("").vocab_size(), 0);
  EXPECT_TRUE(tok.encode("").empty());
}

TEST(CharTokenizer, DecodesBatchTensors) {
  const std::string text = "to be or not to be";
  io::CharTokenizer tok = io::CharTokenizer::from_text(text);
  std::vector<int64_t> ids = tok.encode(text);
  io::TokenDataset ds(std::vector<uint16_t>(ids.begin(), ids.end()));
  auto [x, y] = ds.get_batch(1, 5, 3, 0);
  const std::string window = tok.decode(x);
  EXPECT_NE(text.find(window), std::string::npos) << window;
  EXPECT_EQ(tok.decode(y).substr(0, 4), window.substr(1));
  std::vector<int32_t> small(ids.begin(), ids.end());
  EXPECT_EQ(tok.decode(from_vector(small, {int64_t(small.size())}, DType::Int32)), text);
}

TEST(CharTokenizer, JsonRoundTrip) {
  io::CharTokenizer tok = io::CharTokenizer::from_text("hello, wörld\n\t\"\\");
  const std::string json = tok.to_json();
  EXPECT_EQ(json.rfind("{\"type\":\"char\",\"vocab\":[", 0), 0u) << json;
  io::CharTokenizer back = io::CharTokenizer::from_json(json);
  EXPECT_EQ(back, tok);
  EXPECT_EQ(back.encode("wörld"), tok.encode("wörld"));

  const std::string text = read_text(kShakespeare);
  io::CharTokenizer big = io::CharTokenizer::from_text(text);
  EXPECT_EQ(io::CharTokenizer::from_json(big.to_json()), big);
}

TEST(CharTokenizer, FromJsonRefusesBadVocabularies) {
  EXPECT_ERROR_WITH(io::CharTokenizer::from_json("{"), "not valid JSON");
  EXPECT_ERROR_WITH(io::CharTokenizer::from_json("[]"), "expected {\"type\": \"char\"");
  EXPECT_ERROR_WITH(io::CharTokenizer::from_json(R"({"type":"bpe","vocab":[]})"),
                    "\"bpe\" is not \"char\"");
  EXPECT_ERROR_WITH(io::CharTokenizer::from_json(R"({"type":"char","vocab":"ab"})"),
                    "vocab must be a list");
  EXPECT_ERROR_WITH(io::CharTokenizer::from_json(R"({"type":"char","vocab":["a",1]})"),
                    "vocab[1] is a number");
  EXPECT_ERROR_WITH(io::CharTokenizer::from_json(R"({"type":"char","vocab":["ab"]})"),
                    "vocab[0] must hold exactly one character");
  EXPECT_ERROR_WITH(io::CharTokenizer::from_json(R"({"type":"char","vocab":[""]})"),
                    "exactly one character");
  EXPECT_ERROR_WITH(io::CharTokenizer::from_json(R"({"type":"char","vocab":["b","a"]})"),
                    "vocab[1] 'a' (U+0061) is out of order or repeated");
  EXPECT_ERROR_WITH(io::CharTokenizer::from_json(R"({"type":"char","vocab":["a","a"]})"),
                    "out of order or repeated");
}

TEST(CharTokenizer, EncodeAndDecodeErrorsSayWhere) {
  io::CharTokenizer tok = io::CharTokenizer::from_text("abc");
  EXPECT_ERROR_WITH(tok.encode("abz"), "character 'z' (U+007A) at byte 2 is not in the vocabulary");
  EXPECT_ERROR_WITH(tok.encode("a\n"), "character U+000A at byte 1");
  EXPECT_ERROR_WITH(tok.encode("a€"), "U+20AC at byte 1");
  EXPECT_ERROR_WITH(tok.encode("ab\xff"), "not valid UTF-8 at byte 2 (0xFF)");
  EXPECT_ERROR_WITH(io::CharTokenizer::from_text("ok\xc3"), "not valid UTF-8 at byte 2");
  std::vector<int64_t> bad = {0, 3};
  EXPECT_ERROR_WITH(tok.decode(bad), "id 3 at position 1 is outside the vocabulary [0, 3)");
  bad = {-1};
  EXPECT_ERROR_WITH(tok.decode(bad), "id -1");
  EXPECT_ERROR_WITH(tok.decode(patterned_tensor({2}, DType::Float32, 1)),
                    "ids must be an integer tensor");
}

TEST(Utf8, RejectsEveryIllFormedSequence) {
  const std::string bad[] = {
      "\x80",              // stray continuation
      "\xc0\xaf",          // overlong '/'
      "\xc1\xbf",          // overlong
      "\xe0\x80\xaf",      // overlong 3-byte
      "\xed\xa0\x80",      // surrogate U+D800
      "\xf0\x80\x80\xaf",  // overlong 4-byte
      "\xf4\x90\x80\x80",  // past U+10FFFF
      "\xf5\x80\x80\x80",  // invalid lead
      "\xe2\x82",          // truncated
      "\xe2\x28\xa1",      // bad continuation
  };
  for (const std::string& s : bad) {
    size_t pos = 0;
    char32_t cp = 0;
    EXPECT_FALSE(io::next_code_point(s, pos, cp)) << testing::PrintToString(s);
    EXPECT_EQ(pos, 0u);
  }
  for (char32_t cp :
       {U'\0', U'a', U'\x7f', U'\x80', U'\x7ff', U'\x800', U'\xfffd', U'\x10000', U'\x10ffff'}) {
    std::string s;
    io::append_utf8(s, cp);
    size_t pos = 0;
    char32_t back = 0;
    ASSERT_TRUE(io::next_code_point(s, pos, back)) << unsigned(cp);
    EXPECT_EQ(back, cp);
    EXPECT_EQ(pos, s.size());
  }
}

TEST(PrepareCharDataset, ShakespeareSplitsAsNanoGPT) {
  TempDir dir;
  io::PreparedText p = io::prepare_char_dataset(kShakespeare, dir.path() + "/shakespeare_char");
  EXPECT_EQ(p.tokenizer.vocab_size(), 65);
  // nanoGPT: train has 1,003,854 tokens, val has 111,540 tokens.
  EXPECT_EQ(p.train_tokens, 1003854);
  EXPECT_EQ(p.val_tokens, 111540);
  const std::string out = dir.path() + "/shakespeare_char/";
  EXPECT_EQ(std::filesystem::file_size(out + "train.bin"), 2u * 1003854);
  EXPECT_EQ(std::filesystem::file_size(out + "val.bin"), 2u * 111540);

  io::PreparedText meta = io::load_char_meta(out);
  EXPECT_EQ(meta.tokenizer, p.tokenizer);
  EXPECT_EQ(meta.train_tokens, 1003854);
  EXPECT_EQ(meta.val_tokens, 111540);

  // train.bin followed by val.bin is the whole text.
  io::TokenDataset train = io::TokenDataset::load(out + "train.bin", 65);
  io::TokenDataset val = io::TokenDataset::load(out + "val.bin", 65);
  std::vector<int64_t> all(train.tokens().begin(), train.tokens().end());
  all.insert(all.end(), val.tokens().begin(), val.tokens().end());
  EXPECT_EQ(p.tokenizer.decode(all), read_text(kShakespeare));
}

TEST(PrepareCharDataset, ErrorsNameTheProblem) {
  TempDir dir;
  EXPECT_ERROR_WITH(io::prepare_char_dataset(dir.file("none.txt"), dir.file("out")), "none.txt");
  write_bytes(dir.file("bad.txt"), {std::byte{'a'}, std::byte{0xff}});
  EXPECT_ERROR_WITH(io::prepare_char_dataset(dir.file("bad.txt"), dir.file("out")),
                    "bad.txt: CharTokenizer::from_text: the text is not valid UTF-8 at byte 1");
  write_bytes(dir.file("one.txt"), {std::byte{'a'}});
  EXPECT_ERROR_WITH(io::prepare_char_dataset(dir.file("one.txt"), dir.file("out")),
                    "too few to split");
  EXPECT_ERROR_WITH(io::prepare_char_dataset(kShakespeare, dir.file("out"), 1.5),
                    "val_fraction 1.5 must be in (0, 1)");
  EXPECT_ERROR_WITH(io::load_char_meta(dir.file("out")), "meta.json");
  EXPECT_FALSE(std::filesystem::exists(dir.file("out/train.bin")));
}

TEST(TokenDataset, BatchesAreWindowsShiftedByOne) {
  std::vector<uint16_t> tokens(1000);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = uint16_t(i);  // token == position
  io::TokenDataset ds(tokens, "ramp");
  auto [x, y] = ds.get_batch(8, 16, 42, 3);
  EXPECT_EQ(x.dtype(), DType::Int64);
  EXPECT_EQ(y.dtype(), DType::Int64);
  EXPECT_EQ(x.sizes(), (Shape{8, 16}));
  EXPECT_EQ(y.sizes(), (Shape{8, 16}));
  std::set<int64_t> starts;
  for (int64_t b = 0; b < 8; ++b) {
    std::vector<int64_t> xr = row(x, b), yr = row(y, b);
    const int64_t start = ds.window_start(16, 42, 3, uint64_t(b));
    starts.insert(start);
    ASSERT_GE(start, 0);
    ASSERT_LT(start, 1000 - 16);
    for (int64_t t = 0; t < 16; ++t) {
      EXPECT_EQ(xr[size_t(t)], start + t);
      EXPECT_EQ(yr[size_t(t)], start + t + 1) << "y is x shifted by one";
    }
  }
  EXPECT_GT(starts.size(), 4u) << "rows start at different places";
}

TEST(TokenDataset, ReproducibleBySeedAndStep) {
  TempDir dir;
  io::prepare_char_dataset(kShakespeare, dir.path());
  io::TokenDataset uninterrupted = io::TokenDataset::load(dir.file("train.bin"));
  std::vector<std::vector<int64_t>> run;
  for (uint64_t step = 0; step < 10; ++step) {
    run.push_back(uninterrupted.get_batch(4, 32, 1337, step).first.to_vector<int64_t>());
  }
  // A resumed run loads the data afresh and continues at step 6.
  io::TokenDataset resumed = io::TokenDataset::load(dir.file("train.bin"));
  for (uint64_t step = 6; step < 10; ++step) {
    auto [x, y] = resumed.get_batch(4, 32, 1337, step);
    EXPECT_EQ(x.to_vector<int64_t>(), run[step]) << "step " << step;
  }
  EXPECT_NE(run[0], run[1]) << "steps draw different batches";
  EXPECT_NE(uninterrupted.get_batch(4, 32, 1338, 0).first.to_vector<int64_t>(), run[0])
      << "seeds draw different batches";
}

TEST(TokenDataset, StartsCoverTheRangeEvenly) {
  std::vector<uint16_t> tokens(110, 0);
  io::TokenDataset ds(tokens);
  std::vector<int> hits(100, 0);
  for (uint64_t step = 0; step < 2000; ++step) {
    for (uint64_t r = 0; r < 10; ++r) ++hits[size_t(ds.window_start(10, 7, step, r))];
  }
  for (int h : hits) {
    EXPECT_GT(h, 120);  // 200 expected each
    EXPECT_LT(h, 280);
  }
}

TEST(TokenDataset, ErrorsNameTheProblem) {
  TempDir dir;
  EXPECT_ERROR_WITH(io::TokenDataset::load(dir.file("train.bin")), "train.bin");
  write_bytes(dir.file("odd.bin"), {std::byte{1}, std::byte{0}, std::byte{2}});
  EXPECT_ERROR_WITH(io::TokenDataset::load(dir.file("odd.bin")), "odd count");
  write_bytes(dir.file("empty.bin"), {});
  EXPECT_ERROR_WITH(io::TokenDataset::load(dir.file("empty.bin")), "holds no tokens");
  write_bytes(dir.file("big.bin"), {std::byte{1}, std::byte{0}, std::byte{70}, std::byte{0}});
  EXPECT_ERROR_WITH(io::TokenDataset::load(dir.file("big.bin"), 65),
                    "token id 70 is outside the vocabulary of 65");
  EXPECT_EQ(io::TokenDataset::load(dir.file("big.bin")).size(), 2);

  io::TokenDataset ds(std::vector<uint16_t>(100, 1), "val.bin");
  EXPECT_ERROR_WITH(ds.get_batch(2, 100, 0, 0),
                    "val.bin: 100 tokens are too few for block_size 100 (need at least 101)");
  EXPECT_ERROR_WITH(ds.get_batch(2, 0, 0, 0), "block_size 0 must be positive");
  EXPECT_ERROR_WITH(ds.get_batch(0, 8, 0, 0), "batch_size 0 must be positive");
  EXPECT_ERROR_WITH(ds.get_batch(int64_t(1) << 60, 64, 0, 0), "too many elements");
  auto [x, y] = ds.get_batch(1, 99, 0, 0);  // the one window that fits
  EXPECT_EQ(x.size(1), 99);
}

}  // namespace
}  // namespace ember::test
