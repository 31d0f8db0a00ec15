// SentencePiece-style tokenizer (llama2.c tokenizer.bin): exact ids from the reference
// llama2.c encoder, decode round trips, and rejection of malformed files.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "engine/tokenizer/tokenizer.hpp"
#include "turbokv/error.hpp"

using namespace turbokv::engine;

namespace {

const std::string kModels = TURBOKV_MODELS_DIR;

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// llama2.c's merge loop written out literally (rescan every step), as an oracle for the
// heap-based encoder on inputs the case file does not cover.
std::vector<int> encode_by_rescan(const SentencePieceTokenizer& tok, const std::string& text) {
  std::vector<int> ids{tok.bos_id()};
  if (!text.empty()) ids.push_back(tok.find(" "));
  for (size_t i = 0; i < text.size();) {
    size_t len = 1;
    while (i + len < text.size() && len < 4 && (static_cast<unsigned char>(text[i + len]) & 0xC0) == 0x80) ++len;
    const int id = tok.find(text.substr(i, len));
    if (id >= 0) {
      ids.push_back(id);
    } else {
      for (size_t b = 0; b < len; ++b) ids.push_back(static_cast<unsigned char>(text[i + b]) + 3);
    }
    i += len;
  }
  while (true) {
    float best = -1e10f;
    int best_id = -1;
    size_t best_at = 0;
    for (size_t k = 1; k + 1 < ids.size(); ++k) {
      const int merged = tok.find(tok.piece(ids[k]) + tok.piece(ids[k + 1]));
      if (merged >= 0 && tok.score(merged) > best) {
        best = tok.score(merged);
        best_id = merged;
        best_at = k;
      }
    }
    if (best_id < 0) break;
    ids[best_at] = best_id;
    ids.erase(ids.begin() + static_cast<long>(best_at) + 1);
  }
  return ids;
}

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

}  // namespace

TEST(Tokenizer, Llama2CasesMatchReferenceIds) {
  const auto tok = load_llama2c_tokenizer(kModels + "/llama2-tokenizer.bin");
  EXPECT_EQ(tok->vocab_size(), 32000);
  const auto cases = nlohmann::json::parse(read_text(kModels + "/llama2-tokenizer-cases.json"));
  ASSERT_GE(cases["cases"].size(), 8u);
  for (const auto& c : cases["cases"]) {
    const std::string text = c["text"];
    const std::vector<int> expected = c["ids"];
    EXPECT_EQ(tok->encode(text, true), expected) << text;
    EXPECT_EQ(tok->decode_all(expected), text) << text;  // BOS's following space is dropped
  }
}

TEST(Tokenizer, ByteFallbackAndSpecialPieces) {
  const auto tok = load_llama2c_tokenizer(kModels + "/llama2-tokenizer.bin");
  EXPECT_EQ(tok->decode(3 + 0xF0), std::string(1, '\xF0'));  // <0xF0>
  EXPECT_EQ(tok->decode(13), "\n");
  EXPECT_EQ(tok->encode("", true), std::vector<int>{1});       // no dummy prefix on empty text
  EXPECT_EQ(tok->encode("", false), std::vector<int>{});
  const auto with_eos = tok->encode("Hello", true, true);
  EXPECT_EQ(with_eos.front(), 1);
  EXPECT_EQ(with_eos.back(), 2);
  // The leading space is only dropped right after BOS.
  EXPECT_EQ(tok->decode(1, 15043), "Hello");
  EXPECT_EQ(tok->decode(3186, 15043), " Hello");
  EXPECT_THROW(tok->decode(32000), turbokv::Error);
  EXPECT_THROW(tok->decode(-1), turbokv::Error);
}

TEST(Tokenizer, HeapMergeEqualsRescanOnRandomText) {
  const auto small = load_llama2c_tokenizer(kModels + "/tok512.bin");
  const auto big = load_llama2c_tokenizer(kModels + "/llama2-tokenizer.bin");
  EXPECT_EQ(small->vocab_size(), 512);
  const std::vector<std::string> alphabet = {"a", "e", "t", " ", "  ", "th", "he", "in", "o", "n",
                                             "\n", ".", ",", "é", "日", "🙂", "\x80", "Z", "ing", "s"};
  std::mt19937 rng(7);
  for (int trial = 0; trial < 300; ++trial) {
    std::string text;
    const int len = static_cast<int>(rng() % 40);
    for (int i = 0; i < len; ++i) text += alphabet[rng() % alphabet.size()];
    for (const auto* tok : {small.get(), big.get()}) {
      const auto ids = tok->encode(text, true);
      ASSERT_EQ(ids, encode_by_rescan(*tok, text)) << text;
      ASSERT_EQ(tok->decode_all(ids), text) << text;
    }
  }
}

TEST(Tokenizer, RejectsMalformedFiles) {
  const auto dir = std::filesystem::temp_directory_path() / "turbokv_test_tokenizer";
  std::filesystem::create_directories(dir);
  const std::string good = read_text(kModels + "/tok512.bin");
  const std::string path = (dir / "tok.bin").string();

  write_file(path, good.substr(0, good.size() - 3));  // truncated inside the last token
  EXPECT_THROW(load_llama2c_tokenizer(path), turbokv::Error);
  EXPECT_THROW(load_llama2c_tokenizer(path, 512), turbokv::Error);
  write_file(path, good.substr(0, 2));  // not even the header
  EXPECT_THROW(load_llama2c_tokenizer(path), turbokv::Error);
  write_file(path, good);
  EXPECT_THROW(load_llama2c_tokenizer(path, 600), turbokv::Error);  // fewer tokens than expected
  EXPECT_THROW(load_llama2c_tokenizer(path, 500), turbokv::Error);  // trailing tokens
  std::string bad_len = good;
  const int32_t huge = 1 << 30;  // first token's length field
  std::memcpy(bad_len.data() + 8, &huge, 4);
  write_file(path, bad_len);
  try {
    load_llama2c_tokenizer(path);
    FAIL() << "no error";
  } catch (const turbokv::Error& e) {
    EXPECT_NE(std::string(e.what()).find("length"), std::string::npos) << e.what();
  }
  EXPECT_THROW(load_llama2c_tokenizer((dir / "missing.bin").string()), turbokv::Error);
  std::filesystem::remove_all(dir);
}

// With GGUF token types (llama.cpp's SPM rules): control and user-defined spellings are split out
// first, the dummy prefix goes on the first fragment and after each special, a control token is
// text inside encode_marked's literal ranges while a user-defined one still matches, and merges
// never assemble a control token.
TEST(Tokenizer, TokenTypesSplitOutSpecialTokens) {
  //                                  0        1      2       3    4    5    6     7     8     9    10     11   12
  std::vector<std::string> pieces = {"<unk>", "<s>", "</s>", " ", "a", "b", "ab", " a", "<s", ">", "<u>", "<", "s"};
  std::vector<float> scores = {0, 0, 0, -10, -10, -10, -1, -2, -3, -10, 0, -10, -10};
  std::vector<int32_t> types(pieces.size(), 1);
  types[0] = 2;
  types[1] = types[2] = 3;
  types[10] = 4;
  const SentencePieceTokenizer tok(pieces, scores, 1, 2, true, types);
  EXPECT_EQ(tok.encode("a<s>b", false), (std::vector<int>{7, 1, 3, 5}));  // " a" <s> " " "b"
  const TextRange all{0, 5};
  EXPECT_EQ(tok.encode_marked("a<s>b", false, {&all, 1}), (std::vector<int>{7, 8, 9, 5}));  // " a" "<s" ">" "b"
  const TextRange tag{0, 3};
  EXPECT_EQ(tok.encode_marked("<u>", false, {&tag, 1}), (std::vector<int>{10}));
  EXPECT_EQ(tok.encode("ab<u>", true), (std::vector<int>{1, 3, 6, 10}));  // BOS " " "ab" <u>
  EXPECT_EQ(tok.decode(1), "<s>");
  EXPECT_EQ(tok.decode(10), "<u>");
  EXPECT_EQ(tok.decode_all(tok.encode_marked("a<s>b", true, {&all, 1})), "a<s>b");
  EXPECT_TRUE(tok.is_end_of_generation(2));
  EXPECT_FALSE(tok.is_end_of_generation(1));  // BOS ends a generation only for llama2.c vocabularies
  EXPECT_THROW(SentencePieceTokenizer(pieces, scores, 1, 2, true, std::vector<int32_t>(3, 1)), turbokv::Error);
}
