// Byte-level BPE on a small vocabulary built here: 256 byte tokens (token b spells byte b, so a
// byte's id is its value), a handful of merges and two control tokens; the expected ids below
// were worked out by hand from the pre-tokenizer split and the merge ranks.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "engine/tokenizer/bpe_tokenizer.hpp"
#include "engine/model/gguf.hpp"
#include "turbokv/error.hpp"

namespace turbokv::engine {
namespace {

// Ids: 0..255 bytes; then the merge results in this order.
const std::vector<std::string> kMerges = {
    "h e", "l l", "he ll", "hell o",    // hello = 259
    "Ġ w", "o r", "Ġw or", "l d", "Ġwor ld",  // Ġworld = 264
    "1 2", "12 3", "3 4", "4 5",        // 12 = 265, 123 = 266, 34 = 267, 45 = 268
    "Ċ Ċ", "Ġ b",                        // ĊĊ = 269, Ġb = 270
};
const std::vector<std::string> kMerged = {"he",  "ll", "hell", "hello", "Ġw", "or", "Ġwor", "ld",
                                          "Ġworld", "12", "123", "34", "45", "ĊĊ", "Ġb"};
constexpr int kHello = 259, kWorld = 264, k12 = 265, k123 = 266, k45 = 268, kNewlines = 269, kSpaceB = 270;
constexpr int kBegin = 271, kEot = 272;

BpeVocab small_vocab(const std::string& pre) {
  BpeVocab v;
  for (int b = 0; b < 256; ++b) v.tokens.push_back(byte_symbol(static_cast<uint8_t>(b)));
  for (const auto& m : kMerged) v.tokens.push_back(m);
  v.tokens.push_back("<|begin_of_text|>");
  v.tokens.push_back("<|eot_id|>");
  v.token_types.assign(v.tokens.size(), 1);
  v.token_types[kBegin] = 3;
  v.token_types[kEot] = 3;
  v.merges = kMerges;
  v.pre = pre;
  v.bos_id = kBegin;
  v.eos_id = kEot;
  return v;
}

TEST(BpeTokenizer, ByteAlphabetIsGpt2s) {
  EXPECT_EQ(byte_to_codepoint('A'), 0x41u);
  EXPECT_EQ(byte_to_codepoint('!'), 0x21u);
  EXPECT_EQ(byte_to_codepoint(0), 0x100u);
  EXPECT_EQ(byte_to_codepoint('\n'), 0x10Au);  // 'Ċ'
  EXPECT_EQ(byte_to_codepoint(' '), 0x120u);   // 'Ġ'
  EXPECT_EQ(byte_to_codepoint(127), 0x121u);
  EXPECT_EQ(byte_to_codepoint(160), 0x142u);
  EXPECT_EQ(byte_to_codepoint(161), 0xA1u);
  EXPECT_EQ(byte_to_codepoint(173), 0x143u);  // soft hyphen, the last of the 68 remapped bytes
  EXPECT_EQ(byte_to_codepoint(255), 0xFFu);
  for (int b = 0; b < 256; ++b) EXPECT_EQ(codepoint_to_byte(byte_to_codepoint(static_cast<uint8_t>(b))), b);
  EXPECT_EQ(codepoint_to_byte(0x20), -1);
  EXPECT_EQ(codepoint_to_byte(0x144), -1);
}

TEST(BpeTokenizer, MergesByRank) {
  const BpeTokenizer tok(small_vocab("llama-bpe"));
  using V = std::vector<int>;
  EXPECT_EQ(tok.encode("hello world", false), (V{kHello, kWorld}));
  EXPECT_EQ(tok.encode("hel", false), (V{256, 'l'}));       // "he" + "l": no "he l" merge
  EXPECT_EQ(tok.encode("lle", false), (V{257, 'e'}));       // "l l" ranks first
  EXPECT_EQ(tok.encode("héllo", false), (V{'h', 0xC3, 0xA9, 257, 'o'}));  // é is two byte tokens
  EXPECT_EQ(tok.encode("", false), V{});
}

TEST(BpeTokenizer, Llama3PreTokenizer) {
  const BpeTokenizer tok(small_vocab("llama-bpe"));
  using V = std::vector<int>;
  EXPECT_EQ(tok.encode("12345", false), (V{k123, k45}));  // digits split in runs of three
  EXPECT_EQ(tok.encode("it's", false), (V{'i', 't', '\'', 's'}));
  EXPECT_EQ(tok.encode("IT'S", false), (V{'I', 'T', '\'', 'S'}));  // contractions ignore case
  EXPECT_EQ(tok.encode("a\n\nb", false), (V{'a', kNewlines, 'b'}));  // newline run is one piece
  EXPECT_EQ(tok.encode("a b", false), (V{'a', kSpaceB}));
  // Two spaces: the first is a piece of its own (\s+(?!\S)), the second leads " b".
  EXPECT_EQ(tok.encode("a  b", false), (V{'a', ' ', kSpaceB}));
  EXPECT_EQ(tok.encode("a!!", false), (V{'a', '!', '!'}));
}

TEST(BpeTokenizer, Qwen2SplitsSingleDigits) {
  const BpeTokenizer tok(small_vocab("qwen2"));
  EXPECT_EQ(tok.encode("12345", false), (std::vector<int>{'1', '2', '3', '4', '5'}));
  EXPECT_EQ(tok.encode("hello world", false), (std::vector<int>{kHello, kWorld}));
  const BpeTokenizer gpt2(small_vocab("default"));
  // GPT-2's pattern keeps the whole number: 1 2 -> 12, 12 3 -> 123, 4 5 -> 45.
  EXPECT_EQ(gpt2.encode("12345", false), (std::vector<int>{k123, k45}));
  EXPECT_EQ(gpt2.encode("123456", false), (std::vector<int>{k123, k45, '6'}));
  EXPECT_THROW(BpeTokenizer(small_vocab("no-such-pre")), Error);
}

// Issue 26, finding 9: a user who types "<|eot_id|>" in a chat message must not close their
// turn. Inside literal ranges (message contents) control tokens are ordinary text; the template
// around them keeps its control tokens; texts without such spellings encode as before.
TEST(BpeTokenizer, ControlTokensInLiteralRangesAreOrdinaryText) {
  const BpeTokenizer tok(small_vocab("llama-bpe"));
  using V = std::vector<int>;
  using R = std::vector<TextRange>;
  const std::string text = "<|begin_of_text|>hello<|eot_id|><|eot_id|>";  // content: "hello<|eot_id|>"
  const R content{{17, 32}};
  const V marked = tok.encode_marked(text, false, content);
  EXPECT_EQ(tok.encode(text, false), (V{kBegin, kHello, kEot, kEot}));
  ASSERT_GE(marked.size(), 3u);
  EXPECT_EQ(marked.front(), kBegin);
  EXPECT_EQ(marked.back(), kEot);
  EXPECT_EQ(std::count(marked.begin(), marked.end(), kEot), 1) << "the user's <|eot_id|> became a control token";
  EXPECT_EQ(tok.decode_all(marked), "hello<|eot_id|>");  // control tokens decode to nothing
  // The user's spelling encodes exactly as the same bytes do on their own.
  V plain = tok.encode("hello<|eot_id", false);
  plain.push_back('|');
  plain.push_back('>');
  EXPECT_EQ(V(marked.begin() + 1, marked.end() - 1), plain);
  // A control token straddling a range's edge is not matched either.
  const V straddling = tok.encode_marked("<|eot_id|>", false, R{{5, 10}});
  EXPECT_EQ(std::count(straddling.begin(), straddling.end(), kEot), 0);
  // Without such spellings, the same ids as encode().
  EXPECT_EQ(tok.encode_marked("<|begin_of_text|>hello world<|eot_id|>", false, R{{17, 28}}),
            tok.encode("<|begin_of_text|>hello world<|eot_id|>", false));
  EXPECT_EQ(tok.encode_marked("hello", true, R{{0, 5}}), (V{kBegin, kHello}));
}

TEST(BpeTokenizer, SpecialTokensAreMatchedLiterally) {
  const BpeTokenizer tok(small_vocab("llama-bpe"));
  using V = std::vector<int>;
  EXPECT_EQ(tok.encode("<|begin_of_text|>hello<|eot_id|>", false), (V{kBegin, kHello, kEot}));
  EXPECT_EQ(tok.encode("hello", true), (V{kBegin, kHello}));
  EXPECT_EQ(tok.encode("hello", true, true), (V{kBegin, kHello, kEot}));
  EXPECT_EQ(tok.encode("<|eot_id", false).size(), 8u);  // incomplete: plain bytes
  EXPECT_TRUE(tok.is_end_of_generation(kEot));
  EXPECT_FALSE(tok.is_end_of_generation(kHello));
}

TEST(BpeTokenizer, DecodesBackToTheBytes) {
  const BpeTokenizer tok(small_vocab("llama-bpe"));
  EXPECT_EQ(tok.decode(kWorld), " world");
  EXPECT_EQ(tok.decode(kNewlines), "\n\n");
  EXPECT_EQ(tok.decode(kBegin), "");  // control tokens print nothing
  EXPECT_THROW(tok.decode(-1), Error);
  EXPECT_THROW(tok.decode(tok.vocab_size()), Error);
  for (const std::string text : {"hello world", "héllo  wörld\n\n\tx", "12345 it's", "\xff\xfe broken utf8 \xc3",
                                 "日本語のテキスト", "a\r\nb  \n"}) {
    const auto ids = tok.encode(text, false);
    std::string back;
    for (int id : ids) back += tok.decode(id);
    EXPECT_EQ(back, text);
    EXPECT_EQ(tok.decode_all(ids), text);
  }
}

TEST(BpeTokenizer, LoadsFromGguf) {
  const BpeVocab v = small_vocab("llama-bpe");
  GgufWriter w;
  w.set_string("tokenizer.ggml.model", "gpt2");
  w.set_string("tokenizer.ggml.pre", "llama-bpe");
  w.set_string_array("tokenizer.ggml.tokens", v.tokens);
  w.set_string_array("tokenizer.ggml.merges", v.merges);
  w.set_int32_array("tokenizer.ggml.token_type", v.token_types);
  w.set_uint32("tokenizer.ggml.bos_token_id", kBegin);
  w.set_uint32("tokenizer.ggml.eos_token_id", kEot);
  w.set_bool("tokenizer.ggml.add_bos_token", false);
  const std::string path = testing::TempDir() + "turbokv_test_bpe.gguf";
  w.write(path);
  const GgufFile f = GgufFile::open(path);
  const auto tok = BpeTokenizer::from_gguf(f);
  EXPECT_EQ(tok->vocab_size(), 273);
  EXPECT_EQ(tok->bos_id(), kBegin);
  EXPECT_EQ(tok->encode("hello world", true), (std::vector<int>{kHello, kWorld}));  // add_bos_token false
  std::remove(path.c_str());
}

TEST(BpeTokenizer, RejectsInconsistentVocabularies) {
  BpeVocab v = small_vocab("llama-bpe");
  v.merges.push_back("nospace");
  EXPECT_THROW(BpeTokenizer{v}, Error);
  v = small_vocab("llama-bpe");
  v.token_types.pop_back();
  EXPECT_THROW(BpeTokenizer{v}, Error);
  v = small_vocab("llama-bpe");
  v.bos_id = 9999;
  EXPECT_THROW(BpeTokenizer{v}, Error);
}

}  // namespace
}  // namespace turbokv::engine
