#include "server/prefix/prefix_cache.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "turbokv/cache_io.hpp"
#include "turbokv/error.hpp"

namespace turbokv::server {

namespace {

// 64-bit FNV-1a step over one token id: enough to index; every hit is compared token for token.
uint64_t mix(uint64_t h, int token) {
  auto u = static_cast<uint32_t>(token);
  for (int i = 0; i < 4; ++i) {
    h ^= (u >> (8 * i)) & 0xFF;
    h *= 0x100000001b3ULL;
  }
  return h;
}

size_t state_bytes(const CacheState& state) {
  size_t bytes = 0;
  for (const auto& t : state.tensors) bytes += t.data.size() + t.name.size();
  for (const auto& [k, v] : state.metadata) bytes += k.size() + v.size();
  return bytes;
}

}  // namespace

PrefixCache::PrefixCache(size_t page_tokens) : page_tokens_(page_tokens) {
  if (page_tokens_ == 0) throw Error("PrefixCache: page_tokens must be >= 1");
}

std::vector<uint64_t> PrefixCache::page_hashes(const std::vector<int>& prompt, size_t pages) const {
  std::vector<uint64_t> hashes(pages);
  uint64_t h = 0xcbf29ce484222325ULL;
  for (size_t p = 0; p < pages; ++p) {
    for (size_t i = p * page_tokens_; i < (p + 1) * page_tokens_; ++i) h = mix(h, prompt[i]);
    hashes[p] = h;
  }
  return hashes;
}

PrefixCache::Entry* PrefixCache::find(const std::vector<int>& prompt, size_t length, uint64_t hash) const {
  const auto [first, last] = index_.equal_range(hash);
  for (auto it = first; it != last; ++it) {
    Entry& e = *it->second;
    if (e.tokens.size() == length && std::equal(e.tokens.begin(), e.tokens.end(), prompt.begin())) return &e;
  }
  return nullptr;
}

const PrefixCache::Entry* PrefixCache::lookup(const std::vector<int>& prompt, size_t limit) {
  const size_t pages = std::min(limit, prompt.size()) / page_tokens_;
  if (pages == 0 || entries_.empty()) return nullptr;
  const auto hashes = page_hashes(prompt, pages);
  for (size_t p = pages; p-- > 0;) {
    const auto [first, last] = index_.equal_range(hashes[p]);
    for (auto it = first; it != last; ++it) {
      const Entry& e = *it->second;
      const size_t length = (p + 1) * page_tokens_;
      if (e.tokens.size() == length && std::equal(e.tokens.begin(), e.tokens.end(), prompt.begin())) {
        entries_.splice(entries_.begin(), entries_, it->second);  // iterators stay valid
        return &entries_.front();
      }
    }
  }
  return nullptr;
}

bool PrefixCache::contains(const std::vector<int>& prompt, size_t length) const {
  if (length == 0 || length % page_tokens_ != 0 || length > prompt.size()) return false;
  return find(prompt, length, page_hashes(prompt, length / page_tokens_).back()) != nullptr;
}

size_t PrefixCache::insert(const std::vector<int>& prompt, const PromptCache& cache) {
  const size_t length = cache.size();
  if (length == 0 || length % page_tokens_ != 0 || length > prompt.size()) {
    throw Error(fmt::format("PrefixCache: a prefix of {} tokens is not whole pages of {} within the prompt", length,
                            page_tokens_));
  }
  const uint64_t hash = page_hashes(prompt, length / page_tokens_).back();
  if (find(prompt, length, hash) != nullptr) return 0;
  Entry entry;
  entry.tokens.assign(prompt.begin(), prompt.begin() + static_cast<long>(length));
  for (size_t l = 0; l < cache.n_layers(); ++l) {
    entry.layers.push_back(cache.layer(l).save_state());
    entry.bytes += state_bytes(entry.layers.back());
  }
  entry.bytes += entry.tokens.size() * sizeof(int);
  const size_t bytes = entry.bytes;
  entries_.push_front(std::move(entry));
  index_.emplace(hash, entries_.begin());
  bytes_ += bytes;
  return bytes;
}

size_t PrefixCache::evict_one(Entry* evicted) {
  if (entries_.empty()) return 0;
  auto victim = std::prev(entries_.end());
  const uint64_t hash = page_hashes(victim->tokens, victim->tokens.size() / page_tokens_).back();
  const auto [first, last] = index_.equal_range(hash);
  for (auto it = first; it != last; ++it) {
    if (it->second == victim) {
      index_.erase(it);
      break;
    }
  }
  const size_t bytes = victim->bytes;
  bytes_ -= bytes;
  if (evicted != nullptr) *evicted = std::move(*victim);
  entries_.erase(victim);
  return bytes;
}

void PrefixCache::remember(const std::vector<int>& prompt) {
  for (const uint64_t h : page_hashes(prompt, prompt.size() / page_tokens_)) {
    if (!seen_.insert(h).second) continue;
    seen_order_.push_back(h);
    if (seen_order_.size() > kMaxSeen) {
      seen_.erase(seen_order_.front());
      seen_order_.pop_front();
    }
  }
}

size_t PrefixCache::longest_seen(const std::vector<int>& prompt, size_t limit) const {
  const auto hashes = page_hashes(prompt, std::min(limit, prompt.size()) / page_tokens_);
  for (size_t p = hashes.size(); p-- > 0;) {
    if (seen_.count(hashes[p]) != 0) return (p + 1) * page_tokens_;
  }
  return 0;
}

PromptCache PrefixCache::restore(const Entry& entry) {
  PromptCache cache;
  for (const auto& state : entry.layers) cache.add_layer(load_kv_cache(state));
  return cache;
}

}  // namespace turbokv::server
