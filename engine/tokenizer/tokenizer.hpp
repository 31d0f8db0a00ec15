// Tokenizers: text <-> token ids.
//
// Tokenizer is the interface the engine and the tools use; two implementations:
//   SentencePieceTokenizer - the score-driven BPE of llama2.c's tokenizer.bin and of GGUF files
//                            with tokenizer.ggml.model == "llama" (Llama 1/2 and Gemma 2/3
//                            vocabularies);
//   BpeTokenizer           - byte-level BPE (GPT-2 style: Llama 3, Qwen), engine/tokenizer/bpe_tokenizer.hpp.
// load_tokenizer() (tokenizer_factory.hpp) picks the right one for a model file.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace turbokv::engine {

class SpecialTokenMatcher;

// A byte range [begin, end) of a text.
struct TextRange {
  size_t begin = 0, end = 0;
};

// GGUF token types (tokenizer.ggml.token_type).
enum class TokenType : int32_t { Normal = 1, Unknown = 2, Control = 3, UserDefined = 4, Unused = 5, Byte = 6 };

// Spellings of the control tokens that end a chat turn (Llama 3's <|eot_id|> and <|eom_id|>,
// ChatML's <|im_end|>, <|endoftext|>, Gemma's <end_of_turn>): a generation stops at them even
// where the GGUF names no eot_token_id, as llama.cpp does.
bool is_end_of_turn_spelling(std::string_view text);

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // Token ids of `text`, with BOS first if `bos` (and EOS last if `eos`). Control tokens spelled
  // in the text (e.g. "<|eot_id|>") become those tokens.
  virtual std::vector<int> encode(std::string_view text, bool bos, bool eos = false) const = 0;
  // As encode(), but inside the `literal` ranges (sorted, disjoint: e.g. the contents of chat
  // messages, which users write) a control token's spelling is ordinary text, so only the
  // template around them can open or close a turn. Tokenizers without control tokens in their
  // text encoding (llama2.c's) encode as encode() does.
  virtual std::vector<int> encode_marked(std::string_view text, bool bos, std::span<const TextRange> literal) const {
    (void)literal;
    return encode(text, bos);
  }
  // The bytes token `id` stands for (byte tokens give their single byte); throws
  // turbokv::Error for an id outside [0, vocab_size()).
  virtual std::string decode(int id) const = 0;
  // Streaming form: what to print for `id` when it follows `prev` (SentencePiece drops the
  // leading space of the first piece after BOS, as llama2.c does).
  virtual std::string decode(int prev, int id) const { (void)prev; return decode(id); }
  // Text of a whole sequence (the streaming form applied token by token; BOS and EOS add
  // nothing).
  std::string decode_all(std::span<const int> ids) const;
  // What `id` adds to that text after `prev` (decode_all's step; -1: the first token).
  std::string token_text(int prev, int id) const;

  virtual int vocab_size() const = 0;
  virtual int bos_id() const = 0;
  virtual int eos_id() const = 0;
  // Tokens that end a generation (EOS and, for chat models, end-of-turn tokens).
  virtual bool is_end_of_generation(int id) const { return id == eos_id(); }
};

// llama2.c's encoder: a dummy-prefix space, UTF-8 code points looked up whole (falling back
// to one byte token per byte), then repeated merging of the adjacent pair whose merged piece
// has the highest score (leftmost on ties) until no merge is in the vocabulary.
//
// With token types (GGUF files), as llama.cpp's SPM tokenizer and Hugging Face's tokenizers
// do: control, unknown and user-defined tokens spelled in the text are split out first
// (leftmost, longest; SpecialTokenMatcher), each fragment between them is encoded as above
// with the dummy prefix only on the first fragment and after a special token, and only normal
// and user-defined pieces are looked up or merged into (a typed "<bos>" is never assembled from
// "<bos" and ">", as Hugging Face's merges never make a special token). Gemma 2/3
// (add_space_prefix false) rely on this: newlines, tabs, runs of spaces and HTML tags are
// user-defined tokens, <start_of_turn> and <unusedN> control ones.
class SentencePieceTokenizer : public Tokenizer {
 public:
  // pieces[i] is token i's text (spaces as ' '; GGUF's U+2581 is mapped to ' ' by the
  // loaders), scores[i] its merge priority. Byte tokens are pieces of the form "<0xXX>".
  // token_types: one TokenType per piece, or empty (llama2.c: every piece is normal and no
  // text spells a special token). end_ids: further end-of-generation tokens (eot).
  // Throws turbokv::Error on inconsistent sizes or ids.
  SentencePieceTokenizer(std::vector<std::string> pieces, std::vector<float> scores, int bos_id,
                         int eos_id, bool add_dummy_prefix = true, std::vector<int32_t> token_types = {},
                         std::vector<int> end_ids = {});
  ~SentencePieceTokenizer() override;

  std::vector<int> encode(std::string_view text, bool bos, bool eos = false) const override;
  std::vector<int> encode_marked(std::string_view text, bool bos, std::span<const TextRange> literal) const override;
  // Byte tokens give their byte, other tokens their piece (control tokens too, as llama2.c's
  // tokenizer.bin spells them; decode_all leaves out BOS and EOS).
  std::string decode(int id) const override;
  std::string decode(int prev, int id) const override;
  int vocab_size() const override { return static_cast<int>(pieces_.size()); }
  int bos_id() const override { return bos_id_; }
  int eos_id() const override { return eos_id_; }
  // EOS and end-of-turn tokens; without token types (llama2.c) also BOS: llama2.c models mark
  // the end of a text by starting the next one.
  bool is_end_of_generation(int id) const override;

  const std::string& piece(int id) const;
  float score(int id) const;
  // Id of the exact piece, or -1.
  int find(std::string_view piece) const;
  // Largest piece length in bytes (llama2.c's max_token_length).
  int max_piece_length() const { return max_piece_length_; }

 private:
  void check_id(int id) const;
  // The score-driven merges over one fragment without special tokens, appended to `out`.
  void encode_fragment(std::string_view text, bool dummy_prefix, std::vector<int>& out) const;
  // Id of the exact piece if it is one the merges may produce (normal or user-defined), or -1.
  int find_mergeable(std::string_view piece) const;

  std::vector<std::string> pieces_;
  std::vector<float> scores_;
  std::unordered_map<std::string_view, int> index_;  // views into pieces_
  int byte_ids_[256];                                // id of "<0xXX>", or -1
  std::vector<int16_t> byte_value_;                  // per id: byte value of a byte token or -1
  std::vector<bool> mergeable_;                      // per id: a normal or user-defined piece
  std::unique_ptr<SpecialTokenMatcher> specials_;    // null without token types
  std::vector<int> end_ids_;
  int bos_id_;
  int eos_id_;
  bool add_dummy_prefix_;
  bool bos_ends_generation_;
  int max_piece_length_ = 0;
};

// Reads llama2.c's tokenizer.bin: int32 max_token_length, then per token float32 score,
// int32 length, `length` bytes. With expected_vocab > 0 exactly that many tokens are read
// (llama2.c takes the count from the model header) and the file must end there; otherwise
// tokens are read until the end of the file. BOS is 1, EOS 2. Throws turbokv::Error naming
// the field on a truncated or malformed file.
std::unique_ptr<SentencePieceTokenizer> load_llama2c_tokenizer(const std::string& path,
                                                               int expected_vocab = 0);

}  // namespace turbokv::engine
