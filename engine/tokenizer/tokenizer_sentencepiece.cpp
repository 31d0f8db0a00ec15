// SentencePiece-style tokenizer as llama2.c implements it (encode(), decode() in run.c),
// plus the tokenizer.bin reader.
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <queue>

#include "engine/model/mapped_file.hpp"
#include "engine/tokenizer/special_tokens.hpp"
#include "engine/tokenizer/tokenizer.hpp"
#include "turbokv/error.hpp"

namespace turbokv::engine {

std::string Tokenizer::decode_all(std::span<const int> ids) const {
  std::string text;
  int prev = -1;
  for (const int id : ids) {
    text += token_text(prev, id);
    prev = id;
  }
  return text;
}

bool is_end_of_turn_spelling(std::string_view text) {
  return text == "<|eot_id|>" || text == "<|eom_id|>" || text == "<|im_end|>" || text == "<|endoftext|>" ||
         text == "<end_of_turn>";
}

std::string Tokenizer::token_text(int prev, int id) const {
  // BOS/EOS carry no text (their llama2.c pieces are "\n<s>\n", "\n</s>\n").
  return id == bos_id() || id == eos_id() ? std::string() : decode(prev, id);
}

namespace {

// Value of a "<0xXX>" piece (two hex digits, either case), or -1.
int parse_byte_piece(std::string_view piece) {
  if (piece.size() != 6 || piece.substr(0, 3) != "<0x" || piece[5] != '>') return -1;
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  const int hi = hex(piece[3]);
  const int lo = hex(piece[4]);
  return (hi < 0 || lo < 0) ? -1 : hi * 16 + lo;
}

}  // namespace

SentencePieceTokenizer::SentencePieceTokenizer(std::vector<std::string> pieces,
                                               std::vector<float> scores, int bos_id, int eos_id,
                                               bool add_dummy_prefix, std::vector<int32_t> token_types,
                                               std::vector<int> end_ids)
    : pieces_(std::move(pieces)),
      scores_(std::move(scores)),
      end_ids_(std::move(end_ids)),
      bos_id_(bos_id),
      eos_id_(eos_id),
      add_dummy_prefix_(add_dummy_prefix),
      bos_ends_generation_(token_types.empty()) {
  if (pieces_.empty()) throw Error("tokenizer: empty vocabulary");
  if (pieces_.size() > (1u << 24)) throw Error("tokenizer: vocabulary too large");
  if (scores_.size() != pieces_.size()) {
    throw Error(fmt::format("tokenizer: {} scores for {} pieces", scores_.size(), pieces_.size()));
  }
  if (!token_types.empty() && token_types.size() != pieces_.size()) {
    throw Error(fmt::format("tokenizer: {} token types for {} pieces", token_types.size(), pieces_.size()));
  }
  const int n = static_cast<int>(pieces_.size());
  if (bos_id_ < 0 || bos_id_ >= n) throw Error(fmt::format("tokenizer: bos id {} out of range", bos_id_));
  if (eos_id_ < 0 || eos_id_ >= n) throw Error(fmt::format("tokenizer: eos id {} out of range", eos_id_));
  for (const int id : end_ids_) {
    if (id < 0 || id >= n) throw Error(fmt::format("tokenizer: end-of-generation id {} out of range", id));
  }
  std::fill(std::begin(byte_ids_), std::end(byte_ids_), -1);
  byte_value_.assign(pieces_.size(), -1);
  mergeable_.assign(pieces_.size(), true);
  if (!token_types.empty()) specials_ = std::make_unique<SpecialTokenMatcher>();
  index_.reserve(pieces_.size());
  for (int id = 0; id < n; ++id) {
    const std::string& p = pieces_[id];
    index_.emplace(std::string_view(p), id);  // first id wins on duplicates
    max_piece_length_ = std::max(max_piece_length_, static_cast<int>(p.size()));
    const int byte = parse_byte_piece(p);
    if (byte >= 0) {
      byte_value_[id] = static_cast<int16_t>(byte);
      if (byte_ids_[byte] < 0) byte_ids_[byte] = id;
    }
    if (token_types.empty()) continue;
    const auto type = static_cast<TokenType>(token_types[id]);
    // 0 is "undefined", read as normal; user-defined pieces are text too (Gemma's runs of spaces)
    mergeable_[id] = type == TokenType::Normal || type == TokenType::UserDefined || token_types[id] == 0;
    if (type == TokenType::Control || type == TokenType::Unknown || type == TokenType::UserDefined) {
      specials_->add(p, id, type == TokenType::UserDefined);
    }
    if (type == TokenType::Control && is_end_of_turn_spelling(p)) end_ids_.push_back(id);
  }
}

SentencePieceTokenizer::~SentencePieceTokenizer() = default;

bool SentencePieceTokenizer::is_end_of_generation(int id) const {
  return id == eos_id_ || (bos_ends_generation_ && id == bos_id_) ||
         std::find(end_ids_.begin(), end_ids_.end(), id) != end_ids_.end();
}

int SentencePieceTokenizer::find_mergeable(std::string_view piece) const {
  const int id = find(piece);
  return id >= 0 && mergeable_[id] ? id : -1;
}

void SentencePieceTokenizer::check_id(int id) const {
  if (id < 0 || id >= vocab_size()) {
    throw Error(fmt::format("tokenizer: token id {} outside vocabulary of {}", id, vocab_size()));
  }
}

const std::string& SentencePieceTokenizer::piece(int id) const {
  check_id(id);
  return pieces_[id];
}

float SentencePieceTokenizer::score(int id) const {
  check_id(id);
  return scores_[id];
}

int SentencePieceTokenizer::find(std::string_view piece) const {
  const auto it = index_.find(piece);
  return it == index_.end() ? -1 : it->second;
}

std::vector<int> SentencePieceTokenizer::encode(std::string_view text, bool bos, bool eos) const {
  std::vector<int> out = encode_marked(text, bos, {});
  if (eos) out.push_back(eos_id_);
  return out;
}

std::vector<int> SentencePieceTokenizer::encode_marked(std::string_view text, bool bos,
                                                       std::span<const TextRange> literal) const {
  std::vector<int> out;
  if (bos) out.push_back(bos_id_);
  if (specials_ == nullptr) {
    encode_fragment(text, add_dummy_prefix_, out);
    return out;
  }
  // llama.cpp's rule: the dummy prefix goes on the first fragment and on each one right after
  // a special token.
  bool after_special = true;
  specials_->split(
      text, literal,
      [&](std::string_view fragment) {
        encode_fragment(fragment, add_dummy_prefix_ && after_special, out);
        after_special = false;
      },
      [&](int id) {
        out.push_back(id);
        after_special = true;
      });
  return out;
}

void SentencePieceTokenizer::encode_fragment(std::string_view text, bool dummy_prefix, std::vector<int>& out) const {
  // Symbols form a doubly linked list so each merge is O(log n) via a heap, instead of
  // llama2.c's rescan; the heap orders candidates exactly as llama2.c's scan picks them
  // (highest score, then leftmost), so the ids are identical.
  std::vector<int> ids;
  if (dummy_prefix && !text.empty()) {
    const int space = find_mergeable(" ");
    if (space >= 0) ids.push_back(space);
  }
  // Whole UTF-8 code points (at most 4 bytes) as one lookup, else one token per byte.
  size_t i = 0;
  while (i < text.size()) {
    size_t len = 1;
    while (i + len < text.size() && len < 4 &&
           (static_cast<unsigned char>(text[i + len]) & 0xC0) == 0x80) {
      ++len;
    }
    // GGUF vocabularies spell a space U+2581, so a typed U+2581 is a space to them (as to
    // llama.cpp and Hugging Face, whose normalizers turn spaces into it).
    const bool u2581 = specials_ != nullptr && text.substr(i, len) == "\xE2\x96\x81";
    const int id = find_mergeable(u2581 ? std::string_view(" ") : text.substr(i, len));
    if (id >= 0) {
      ids.push_back(id);
    } else {
      for (size_t b = 0; b < len; ++b) {
        const auto byte = static_cast<unsigned char>(text[i + b]);
        // llama2.c assumes byte token = byte + 3; a vocabulary without that byte piece
        // falls back to the same rule if the id exists, else to <unk> (0).
        int byte_id = byte_ids_[byte];
        if (byte_id < 0) byte_id = (byte + 3 < vocab_size()) ? byte + 3 : 0;
        ids.push_back(byte_id);
      }
    }
    i += len;
  }
  const int n = static_cast<int>(ids.size());
  std::vector<int> next(n), prev(n);
  for (int k = 0; k < n; ++k) {
    next[k] = k + 1 < n ? k + 1 : -1;
    prev[k] = k - 1;
  }
  struct Candidate {
    float score;
    int left;
    int left_id;
    int right;
    int right_id;
    int merged_id;
  };
  auto worse = [](const Candidate& a, const Candidate& b) {
    if (a.score != b.score) return a.score < b.score;
    return a.left > b.left;
  };
  std::priority_queue<Candidate, std::vector<Candidate>, decltype(worse)> heap(worse);
  std::string joined;
  auto push_pair = [&](int left) {
    const int right = next[left];
    if (left < 0 || right < 0) return;
    joined = pieces_[ids[left]];
    joined += pieces_[ids[right]];
    const int merged = find_mergeable(joined);
    if (merged >= 0) heap.push({scores_[merged], left, ids[left], right, ids[right], merged});
  };
  for (int k = 0; k + 1 < n; ++k) push_pair(k);
  while (!heap.empty()) {
    const Candidate c = heap.top();
    heap.pop();
    // Stale if either side changed since the candidate was pushed.
    if (ids[c.left] != c.left_id || next[c.left] != c.right || ids[c.right] != c.right_id) continue;
    ids[c.left] = c.merged_id;
    ids[c.right] = -1;
    next[c.left] = next[c.right];
    if (next[c.right] >= 0) prev[next[c.right]] = c.left;
    if (prev[c.left] >= 0) push_pair(prev[c.left]);
    push_pair(c.left);
  }

  for (int k = n > 0 ? 0 : -1; k >= 0; k = next[k]) out.push_back(ids[k]);
}

std::string SentencePieceTokenizer::decode(int id) const {
  check_id(id);
  if (byte_value_[id] >= 0) return std::string(1, static_cast<char>(byte_value_[id]));
  return pieces_[id];
}

std::string SentencePieceTokenizer::decode(int prev, int id) const {
  std::string text = decode(id);
  // The dummy prefix's space is not part of the text (without one, as in Gemma, it is).
  if (add_dummy_prefix_ && prev == bos_id_ && byte_value_[id] < 0 && !text.empty() && text[0] == ' ') {
    text.erase(0, 1);
  }
  return text;
}

std::unique_ptr<SentencePieceTokenizer> load_llama2c_tokenizer(const std::string& path,
                                                               int expected_vocab) {
  const MappedFile file(path);
  auto read_i32 = [&](size_t offset, const char* what) {
    int32_t v;
    std::memcpy(&v, file.bytes(offset, 4, what), 4);
    return v;
  };
  const int32_t max_len = read_i32(0, "tokenizer max_token_length");
  if (max_len <= 0 || max_len > 65536) {
    throw Error(fmt::format("tokenizer '{}': max_token_length {} out of range [1, 65536]", path, max_len));
  }
  if (expected_vocab < 0 || expected_vocab > (1 << 24)) {
    throw Error(fmt::format("tokenizer '{}': expected vocabulary size {} out of range", path, expected_vocab));
  }
  std::vector<std::string> pieces;
  std::vector<float> scores;
  size_t offset = 4;
  while (expected_vocab > 0 ? static_cast<int>(pieces.size()) < expected_vocab : offset < file.size()) {
    const std::string what = fmt::format("token {} score/length", pieces.size());
    float score;
    std::memcpy(&score, file.bytes(offset, 4, what.c_str()), 4);
    const int32_t len = read_i32(offset + 4, what.c_str());
    if (len < 0 || len > max_len) {
      throw Error(fmt::format("tokenizer '{}': token {} length {} outside [0, max_token_length {}]",
                              path, pieces.size(), len, max_len));
    }
    offset += 8;
    const std::string piece_what = fmt::format("token {} text", pieces.size());
    const auto* bytes = file.bytes(offset, static_cast<size_t>(len), piece_what.c_str());
    pieces.emplace_back(reinterpret_cast<const char*>(bytes), static_cast<size_t>(len));
    scores.push_back(score);
    offset += static_cast<size_t>(len);
    if (pieces.size() > (1u << 24)) throw Error(fmt::format("tokenizer '{}': too many tokens", path));
  }
  if (offset != file.size()) {
    throw Error(fmt::format("tokenizer '{}': {} trailing bytes after {} tokens", path,
                            file.size() - offset, pieces.size()));
  }
  if (pieces.size() < 3) throw Error(fmt::format("tokenizer '{}': only {} tokens", path, pieces.size()));
  return std::make_unique<SentencePieceTokenizer>(std::move(pieces), std::move(scores), 1, 2);
}

}  // namespace turbokv::engine
