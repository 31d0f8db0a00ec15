// Special tokens spelled in a text: found before the vocabulary's own algorithm runs, the way
// Hugging Face tokenizers and llama.cpp split out added tokens. A byte trie gives the leftmost,
// longest match in time bounded by the longest spelling per position, however many specials the
// vocabulary has (Gemma's has 6,400: <unused0>..., HTML tags, runs of newlines, tabs, spaces).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "engine/tokenizer/tokenizer.hpp"

namespace turbokv::engine {

class SpecialTokenMatcher {
 public:
  // `text` becomes token `id`. A control token (`also_in_literal` false) matches only outside
  // the literal ranges of encode_marked (text a user wrote); a user-defined one, which is
  // ordinary text to its tokenizer ("\n\n", "<b>"), matches inside them too. The first spelling
  // added wins on duplicates; an empty spelling is ignored.
  void add(std::string_view text, int id, bool also_in_literal);
  bool empty() const { return nodes_.size() == 1; }

  // Splits `text` into plain fragments (passed to `on_text`, never empty) and special tokens
  // (passed to `on_token`), scanning left to right and taking the longest special that starts
  // at each position and lies wholly inside one region (a literal range, or the text between
  // two). `literal` is sorted and disjoint; ranges beyond the text are clipped.
  void split(std::string_view text, std::span<const TextRange> literal,
             const std::function<void(std::string_view)>& on_text, const std::function<void(int)>& on_token) const;

 private:
  struct Node {
    int id = -1;                   // token ending here, or -1
    bool also_in_literal = false;
  };
  // Length and id of the longest special starting at text[i] and ending by `limit`, or {0, -1}.
  std::pair<size_t, int> longest_at(std::string_view text, size_t i, size_t limit, bool in_literal) const;

  std::vector<Node> nodes_{Node{}};                   // node 0 is the root
  std::unordered_map<uint64_t, uint32_t> children_;  // (node << 8 | byte) -> child node
  bool first_byte_[256] = {};                        // a special starts with this byte
};

}  // namespace turbokv::engine
