// Byte-level BPE (GPT-2 style), the tokenizer of Llama 3 and Qwen GGUF files
// (tokenizer.ggml.model == "gpt2").
//
// Encoding: special tokens (control and user-defined types, e.g. <|begin_of_text|>) are found
// literally first, longest first; the text between them is split by the pre-tokenizer regex that
// tokenizer.ggml.pre names (PCRE2 with UTF and Unicode properties); each piece's bytes are
// spelled with GPT-2's bytes-to-unicode alphabet (printable bytes stand for themselves, the other
// 68 become U+0100 + n in byte order, so ' ' is 'Ġ' and '\n' is 'Ċ'); then the adjacent pair
// with the lowest merge rank is merged (leftmost on ties) until no pair has a rank, and each
// symbol becomes its token id (Llama 3's pre-tokenizer first takes a piece that is a whole token
// as is, as its reference tokenizer does with ignore_merges). Decoding maps the alphabet back to bytes; control tokens decode
// to nothing.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "engine/tokenizer/tokenizer.hpp"

namespace turbokv::engine {

class GgufFile;

struct BpeVocab {
  std::vector<std::string> tokens;   // in the byte-level alphabet
  std::vector<std::string> merges;   // "left right", in rank order
  std::vector<int32_t> token_types;  // empty: tokens shaped "<|...|>" count as control tokens
  std::string pre = "default";       // tokenizer.ggml.pre
  int bos_id = -1;
  int eos_id = -1;
  bool add_bos = true;               // tokenizer.ggml.add_bos_token
  std::vector<int> end_of_generation_ids;  // besides eos (eot, eom)
};

class BpeTokenizer : public Tokenizer {
 public:
  // Throws turbokv::Error on an unknown pre-tokenizer, a merge that names a token not in the
  // vocabulary, or ids out of range.
  explicit BpeTokenizer(BpeVocab vocab);
  ~BpeTokenizer() override;
  // Reads tokenizer.ggml.{tokens, merges, token_type, pre, bos_token_id, eos_token_id,
  // eot_token_id, eom_token_id, add_bos_token}.
  static std::unique_ptr<BpeTokenizer> from_gguf(const GgufFile& gguf);

  // BOS is prepended when `bos` is true, the vocabulary has one and add_bos is set.
  std::vector<int> encode(std::string_view text, bool bos, bool eos = false) const override;
  std::vector<int> encode_marked(std::string_view text, bool bos, std::span<const TextRange> literal) const override;
  std::string decode(int id) const override;
  int vocab_size() const override { return static_cast<int>(tokens_.size()); }
  int bos_id() const override { return bos_id_; }
  int eos_id() const override { return eos_id_; }
  bool is_end_of_generation(int id) const override;

  // The regex used for tokenizer.ggml.pre == `pre` (throws for an unknown name).
  static const char* pre_tokenizer_pattern(const std::string& pre);
  // Id of the token spelled `token` (byte-level alphabet), or -1.
  int find(std::string_view token) const;

 private:
  struct Regex;
  void encode_piece(std::string_view bytes, std::vector<int>& out) const;
  void encode_fragment(std::string_view text, std::vector<int>& out) const;

  std::vector<std::string> tokens_;
  std::vector<bool> control_;
  std::unordered_map<std::string, int> token_ids_;
  std::unordered_map<std::string, int> merge_ranks_;  // "left right" -> rank
  std::vector<std::pair<std::string, int>> specials_;  // raw text, id; longest first
  std::unique_ptr<Regex> regex_;
  int bos_id_;
  int eos_id_;
  bool add_bos_;
  bool ignore_merges_ = false;  // Llama 3: a piece that is a whole token skips the merges
  std::vector<int> end_ids_;
};

// GPT-2's byte alphabet: the code point byte b is spelled with, and the inverse (-1 for code
// points that spell no byte).
uint32_t byte_to_codepoint(uint8_t b);
int codepoint_to_byte(uint32_t cp);
// Byte b's symbol in that alphabet, UTF-8 encoded: how a vocabulary's base tokens are spelled.
std::string byte_symbol(uint8_t b);

}  // namespace turbokv::engine
