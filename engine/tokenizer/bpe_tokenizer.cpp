#include "engine/tokenizer/bpe_tokenizer.hpp"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <fmt/format.h>
#include <pcre2.h>

#include <algorithm>
#include <array>
#include <limits>

#include "engine/model/gguf.hpp"
#include "engine/tokenizer/tokenizer_factory.hpp"
#include "turbokv/error.hpp"

namespace turbokv::engine {
namespace {

// Pre-tokenizer patterns. "llama3" is the cl100k-style split (letters with one leading
// non-letter, digits in runs of at most three, case-insensitive contractions, newlines kept
// together); qwen2 is the same with single digits; the GPT-2 pattern is the fallback that
// llama.cpp also uses when tokenizer.ggml.pre is absent or "default".
constexpr const char* kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kQwen2Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kGpt2Pattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

struct ByteAlphabet {
  std::array<uint32_t, 256> to_cp{};
  std::array<int16_t, 324> to_byte{};  // code points below 256 + 68

  ByteAlphabet() {
    to_byte.fill(-1);
    uint32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
      to_cp[b] = printable ? static_cast<uint32_t>(b) : next++;
      to_byte[to_cp[b]] = static_cast<int16_t>(b);
    }
  }
};

const ByteAlphabet& alphabet() {
  static const ByteAlphabet a;
  return a;
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

// Length of the UTF-8 sequence starting with lead byte c (1 for stray bytes, so a malformed
// token string still advances).
size_t utf8_length(unsigned char c) {
  if (c >= 0xF0 && c < 0xF8) return 4;
  if (c >= 0xE0) return c < 0xF0 ? 3 : 1;
  if (c >= 0xC0) return 2;
  return 1;
}

// Decodes one code point at s[i] (well-formed input assumed; stray bytes decode as themselves).
uint32_t decode_utf8(std::string_view s, size_t i, size_t& length) {
  const auto c = static_cast<unsigned char>(s[i]);
  length = std::min(utf8_length(c), s.size() - i);
  if (length == 1) return c;
  uint32_t cp = c & (length == 2 ? 0x1F : length == 3 ? 0x0F : 0x07);
  for (size_t k = 1; k < length; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
  return cp;
}

}  // namespace

uint32_t byte_to_codepoint(uint8_t b) { return alphabet().to_cp[b]; }

std::string byte_symbol(uint8_t b) {
  std::string s;
  append_utf8(s, byte_to_codepoint(b));
  return s;
}

int codepoint_to_byte(uint32_t cp) { return cp < alphabet().to_byte.size() ? alphabet().to_byte[cp] : -1; }

struct BpeTokenizer::Regex {
  pcre2_code* code = nullptr;
  ~Regex() { pcre2_code_free(code); }
};

const char* BpeTokenizer::pre_tokenizer_pattern(const std::string& pre) {
  if (pre == "default" || pre == "gpt2" || pre.empty()) return kGpt2Pattern;
  if (pre == "llama-bpe" || pre == "llama3" || pre == "llama-v3" || pre == "smaug-bpe") return kLlama3Pattern;
  if (pre == "qwen2" || pre == "qwen3" || pre == "deepseek-r1-qwen") return kQwen2Pattern;
  throw Error(fmt::format("BPE tokenizer: unknown pre-tokenizer tokenizer.ggml.pre = '{}'", pre));
}

BpeTokenizer::BpeTokenizer(BpeVocab vocab)
    : tokens_(std::move(vocab.tokens)),
      bos_id_(vocab.bos_id),
      eos_id_(vocab.eos_id),
      add_bos_(vocab.add_bos),
      end_ids_(std::move(vocab.end_of_generation_ids)) {
  const int n = static_cast<int>(tokens_.size());
  if (tokens_.empty() || tokens_.size() > static_cast<size_t>(std::numeric_limits<int>::max())) {
    throw Error(fmt::format("BPE tokenizer: vocabulary size {} is invalid", tokens_.size()));
  }
  if (!vocab.token_types.empty() && vocab.token_types.size() != tokens_.size()) {
    throw Error(fmt::format("BPE tokenizer: {} token types for {} tokens", vocab.token_types.size(), tokens_.size()));
  }
  for (int id : {bos_id_, eos_id_}) {
    if (id < -1 || id >= n) throw Error(fmt::format("BPE tokenizer: special token id {} outside the vocabulary", id));
  }
  for (int id : end_ids_) {
    if (id < 0 || id >= n) throw Error(fmt::format("BPE tokenizer: end-of-generation id {} outside the vocabulary", id));
  }
  control_.assign(tokens_.size(), false);
  for (int id = 0; id < n; ++id) {
    const std::string& t = tokens_[id];
    token_ids_.emplace(t, id);  // the first of duplicate spellings wins
    bool special = false;
    if (vocab.token_types.empty()) {
      special = t.size() > 4 && t.starts_with("<|") && t.ends_with("|>");
      control_[id] = special;
    } else {
      const auto type = static_cast<TokenType>(vocab.token_types[id]);
      control_[id] = type == TokenType::Control;
      special = type == TokenType::Control || type == TokenType::UserDefined;
    }
    if (special && !t.empty()) specials_.emplace_back(t, id);
    if (is_end_of_turn_spelling(t)) end_ids_.push_back(id);
  }
  std::stable_sort(specials_.begin(), specials_.end(),
                   [](const auto& a, const auto& b) { return a.first.size() > b.first.size(); });
  for (size_t rank = 0; rank < vocab.merges.size(); ++rank) {
    const std::string& m = vocab.merges[rank];
    const size_t space = m.find(' ');
    if (space == std::string::npos || space == 0 || space + 1 == m.size() || m.find(' ', space + 1) != std::string::npos) {
      throw Error(fmt::format("BPE tokenizer: merge #{} '{}' is not two symbols separated by one space", rank, m));
    }
    merge_ranks_.emplace(m, static_cast<int>(rank));
  }

  const char* pattern = pre_tokenizer_pattern(vocab.pre);
  ignore_merges_ = pattern == kLlama3Pattern;
  int error = 0;
  PCRE2_SIZE error_offset = 0;
  regex_ = std::make_unique<Regex>();
  regex_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern), PCRE2_ZERO_TERMINATED,
                               PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &error, &error_offset, nullptr);
  if (regex_->code == nullptr) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error, message, sizeof message);
    throw Error(fmt::format("BPE tokenizer: pre-tokenizer regex failed to compile at {}: {}", error_offset,
                            reinterpret_cast<const char*>(message)));
  }
  pcre2_jit_compile(regex_->code, PCRE2_JIT_COMPLETE);  // optional speed-up; the interpreter is the fallback
}

BpeTokenizer::~BpeTokenizer() = default;

std::unique_ptr<BpeTokenizer> BpeTokenizer::from_gguf(const GgufFile& gguf) {
  check_gguf_vocabulary(gguf);
  BpeVocab v;
  v.tokens = gguf.get_string_array("tokenizer.ggml.tokens");
  v.merges = gguf.get_string_array("tokenizer.ggml.merges");
  if (gguf.has("tokenizer.ggml.token_type")) {
    for (int64_t t : gguf.get_int_array("tokenizer.ggml.token_type")) v.token_types.push_back(static_cast<int32_t>(t));
  }
  v.pre = gguf.get_string_or("tokenizer.ggml.pre", "default");
  const auto id_or_none = [&](const char* key) {
    const int64_t id = gguf.get_int_or(key, -1);
    if (id < -1 || id >= static_cast<int64_t>(v.tokens.size())) {
      throw Error(fmt::format("GGUF '{}': {} = {} outside the vocabulary of {}", gguf.path(), key, id, v.tokens.size()));
    }
    return static_cast<int>(id);
  };
  v.bos_id = id_or_none("tokenizer.ggml.bos_token_id");
  v.eos_id = id_or_none("tokenizer.ggml.eos_token_id");
  for (const char* key : {"tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"}) {
    if (const int id = id_or_none(key); id >= 0) v.end_of_generation_ids.push_back(id);
  }
  if (gguf.has("tokenizer.ggml.add_bos_token")) v.add_bos = gguf.get_bool("tokenizer.ggml.add_bos_token");
  return std::make_unique<BpeTokenizer>(std::move(v));
}

int BpeTokenizer::find(std::string_view token) const {
  const auto it = token_ids_.find(std::string(token));
  return it == token_ids_.end() ? -1 : it->second;
}

bool BpeTokenizer::is_end_of_generation(int id) const {
  return id == eos_id_ || std::find(end_ids_.begin(), end_ids_.end(), id) != end_ids_.end();
}

void BpeTokenizer::encode_piece(std::string_view bytes, std::vector<int>& out) const {
  if (bytes.empty()) return;
  std::vector<std::string> symbols;
  std::string whole;
  for (char c : bytes) {
    std::string s = byte_symbol(static_cast<uint8_t>(c));
    whole += s;
    symbols.push_back(std::move(s));
  }
  if (ignore_merges_) {
    // Llama 3 (like its reference tokenizer) takes a piece that is itself a token as is.
    if (const int id = find(whole); id >= 0) {
      out.push_back(id);
      return;
    }
  }
  while (symbols.size() > 1) {
    int best_rank = std::numeric_limits<int>::max();
    size_t best = 0;
    for (size_t i = 0; i + 1 < symbols.size(); ++i) {
      const auto it = merge_ranks_.find(symbols[i] + " " + symbols[i + 1]);
      if (it != merge_ranks_.end() && it->second < best_rank) {
        best_rank = it->second;
        best = i;
      }
    }
    if (best_rank == std::numeric_limits<int>::max()) break;
    symbols[best] += symbols[best + 1];
    symbols.erase(symbols.begin() + static_cast<std::ptrdiff_t>(best) + 1);
  }
  for (const auto& s : symbols) {
    if (const int id = find(s); id >= 0) {
      out.push_back(id);
      continue;
    }
    // Not in the vocabulary: spell it one byte symbol at a time.
    for (size_t i = 0; i < s.size();) {
      size_t length = 0;
      const uint32_t cp = decode_utf8(s, i, length);
      std::string one;
      append_utf8(one, cp);
      const int id = find(one);
      if (id < 0) throw Error(fmt::format("BPE tokenizer: no token for byte 0x{:02X}", codepoint_to_byte(cp)));
      out.push_back(id);
      i += length;
    }
  }
}

void BpeTokenizer::encode_fragment(std::string_view text, std::vector<int>& out) const {
  pcre2_match_data* md = pcre2_match_data_create_from_pattern(regex_->code, nullptr);
  if (md == nullptr) throw Error("BPE tokenizer: out of memory");
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t offset = 0;
  try {
    while (offset < text.size()) {
      const int rc = pcre2_match(regex_->code, subject, text.size(), offset, 0, md, nullptr);
      if (rc < 0) {  // no further match (or bytes the pattern cannot match): the rest is one piece
        encode_piece(text.substr(offset), out);
        break;
      }
      const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
      const size_t start = ov[0], end = ov[1];
      if (start > offset) encode_piece(text.substr(offset, start - offset), out);  // unmatched bytes
      if (end == start) {
        // An empty match cannot make progress; take one byte as its own piece.
        encode_piece(text.substr(start, 1), out);
        offset = start + 1;
        continue;
      }
      encode_piece(text.substr(start, end - start), out);
      offset = end;
    }
  } catch (...) {
    pcre2_match_data_free(md);
    throw;
  }
  pcre2_match_data_free(md);
}

std::vector<int> BpeTokenizer::encode(std::string_view text, bool bos, bool eos) const {
  std::vector<int> out = encode_marked(text, bos, {});
  if (eos && eos_id_ >= 0) out.push_back(eos_id_);
  return out;
}

std::vector<int> BpeTokenizer::encode_marked(std::string_view text, bool bos, std::span<const TextRange> literal) const {
  std::vector<int> out;
  if (bos && add_bos_ && bos_id_ >= 0) out.push_back(bos_id_);
  size_t start = 0, i = 0;
  size_t next_literal = 0;  // the first literal range not wholly before i
  while (i < text.size()) {
    while (next_literal < literal.size() && literal[next_literal].end <= i) ++next_literal;
    const TextRange* in = next_literal < literal.size() ? &literal[next_literal] : nullptr;
    if (in != nullptr && in->begin <= i) {  // inside a literal range: ordinary text up to its end
      i = std::min(in->end, text.size());
      continue;
    }
    // A control token matches only wholly outside the literal ranges.
    const size_t room = in != nullptr ? in->begin - i : text.size() - i;
    const std::pair<std::string, int>* hit = nullptr;
    for (const auto& special : specials_) {
      if (special.first.size() <= room && text.substr(i).starts_with(special.first)) {
        hit = &special;
        break;
      }
    }
    if (hit == nullptr) {
      ++i;
      continue;
    }
    encode_fragment(text.substr(start, i - start), out);
    out.push_back(hit->second);
    i += hit->first.size();
    start = i;
  }
  encode_fragment(text.substr(start), out);
  return out;
}

std::string BpeTokenizer::decode(int id) const {
  if (id < 0 || id >= vocab_size()) {
    throw Error(fmt::format("BPE tokenizer: token id {} outside [0, {})", id, vocab_size()));
  }
  if (control_[id]) return {};
  const std::string& t = tokens_[id];
  std::string out;
  for (size_t i = 0; i < t.size();) {
    size_t length = 0;
    const uint32_t cp = decode_utf8(t, i, length);
    const int b = codepoint_to_byte(cp);
    if (b >= 0) {
      out.push_back(static_cast<char>(b));
    } else {
      out.append(t, i, length);  // literal text (user-defined tokens such as "<think>")
    }
    i += length;
  }
  return out;
}

}  // namespace turbokv::engine
