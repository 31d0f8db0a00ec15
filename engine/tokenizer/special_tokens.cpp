#include "engine/tokenizer/special_tokens.hpp"

#include <algorithm>

namespace turbokv::engine {

void SpecialTokenMatcher::add(std::string_view text, int id, bool also_in_literal) {
  if (text.empty()) return;
  uint32_t node = 0;
  for (const char c : text) {
    const uint64_t key = (static_cast<uint64_t>(node) << 8) | static_cast<unsigned char>(c);
    const auto it = children_.find(key);
    if (it != children_.end()) {
      node = it->second;
    } else {
      nodes_.emplace_back();
      node = static_cast<uint32_t>(nodes_.size() - 1);
      children_.emplace(key, node);
    }
  }
  if (nodes_[node].id < 0) nodes_[node] = Node{id, also_in_literal};
  first_byte_[static_cast<unsigned char>(text[0])] = true;
}

std::pair<size_t, int> SpecialTokenMatcher::longest_at(std::string_view text, size_t i, size_t limit,
                                                       bool in_literal) const {
  std::pair<size_t, int> best{0, -1};
  uint32_t node = 0;
  for (size_t k = i; k < limit; ++k) {
    const auto it = children_.find((static_cast<uint64_t>(node) << 8) | static_cast<unsigned char>(text[k]));
    if (it == children_.end()) break;
    node = it->second;
    const Node& n = nodes_[node];
    if (n.id >= 0 && (!in_literal || n.also_in_literal)) best = {k + 1 - i, n.id};
  }
  return best;
}

void SpecialTokenMatcher::split(std::string_view text, std::span<const TextRange> literal,
                                const std::function<void(std::string_view)>& on_text,
                                const std::function<void(int)>& on_token) const {
  size_t start = 0;         // the plain fragment being collected begins here
  size_t next_literal = 0;  // the first literal range not wholly before i
  for (size_t i = 0; i < text.size();) {
    while (next_literal < literal.size() && literal[next_literal].end <= i) ++next_literal;
    const TextRange* range = next_literal < literal.size() ? &literal[next_literal] : nullptr;
    const bool in_literal = range != nullptr && range->begin <= i;
    // The region i lies in ends at its literal range's end, or where the next one begins.
    const size_t limit = std::min(text.size(), range == nullptr ? text.size() : in_literal ? range->end : range->begin);
    const auto [length, id] = first_byte_[static_cast<unsigned char>(text[i])] && !empty()
                                  ? longest_at(text, i, limit, in_literal)
                                  : std::pair<size_t, int>{0, -1};
    if (id < 0) {
      ++i;
      continue;
    }
    if (i > start) on_text(text.substr(start, i - start));
    on_token(id);
    i += length;
    start = i;
  }
  if (start < text.size()) on_text(text.substr(start));
}

}  // namespace turbokv::engine
