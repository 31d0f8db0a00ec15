// PrefixCache: the in-process store of computed prompt prefixes (vLLM's prefix caching,
// llama.cpp's prompt cache), so a request that starts with tokens another request already
// computed (a shared system prompt, a conversation's earlier turns) restores them instead of
// recomputing them.
//
// An entry is the serialized state of every layer's cache (CacheState: the same bytes a saved
// prompt cache holds, so a shared tier between servers can carry them as they are) after exactly
// `tokens` were fed, where tokens.size() is a multiple of the page size. Keys chain-hash the
// token ids page by page; a hit is checked token for token. Entries live inside the server's KV
// budget and are evicted least recently used when running requests need the room.
//
// Thread-safety: none; the scheduler thread owns it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
#include <memory>
#include <deque>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "turbokv/kv_cache.hpp"
#include "turbokv/prompt_cache.hpp"

namespace turbokv::server {

class PrefixCache {
 public:
  explicit PrefixCache(size_t page_tokens);

  struct Entry {
    std::vector<int> tokens;
    std::vector<CacheState> layers;
    size_t bytes = 0;
  };

  // The longest stored prefix of prompt[0, limit) (limit rounded down to whole pages), or
  // nullptr. Marks it most recently used.
  const Entry* lookup(const std::vector<int>& prompt, size_t limit);
  bool contains(const std::vector<int>& prompt, size_t length) const;
  // Stores the state of `cache` as the prefix prompt[0, cache.size()) (a whole number of pages).
  // Returns the bytes added (0 if it was already there).
  size_t insert(const std::vector<int>& prompt, const PromptCache& cache);
  // Drops the least recently used entry (moved to *evicted when given: the disk tier keeps it);
  // returns its bytes (0 if empty).
  size_t evict_one(Entry* evicted = nullptr);

  // Prefixes recur before they are stored: a prompt that shares its first pages with an earlier
  // prompt (a system prompt, a document) marks where the two part, so that point is stored and
  // the next prompt with that start restores it. remember() notes a prompt's page hashes (the
  // most recent kMaxSeen); longest_seen() is the longest noted page-aligned prefix of prompt[0, limit).
  void remember(const std::vector<int>& prompt);
  size_t longest_seen(const std::vector<int>& prompt, size_t limit) const;
  static constexpr size_t kMaxSeen = 1 << 16;

  // A new PromptCache restored from an entry (bit-identical state).
  static PromptCache restore(const Entry& entry);

  size_t bytes() const { return bytes_; }
  size_t size() const { return entries_.size(); }
  size_t page_tokens() const { return page_tokens_; }

 private:
  // Hash of prompt[0, pages * page_tokens), chained page by page.
  std::vector<uint64_t> page_hashes(const std::vector<int>& prompt, size_t pages) const;
  Entry* find(const std::vector<int>& prompt, size_t length, uint64_t hash) const;

  size_t page_tokens_;
  size_t bytes_ = 0;
  std::list<Entry> entries_;  // most recently used first
  std::unordered_multimap<uint64_t, std::list<Entry>::iterator> index_;
  std::unordered_set<uint64_t> seen_;
  std::deque<uint64_t> seen_order_;  // oldest first, for the bound
};

}  // namespace turbokv::server
