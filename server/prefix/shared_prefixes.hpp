// SharedPrefixes: a prefix tier below the in-process prefix cache, on a PrefixStore: this
// machine's disk (DiskPrefixStore) or Redis shared by replicas (RedisPrefixStore). The scheduler
// keeps one of each at most and looks them up in that order (RAM -> disk -> Redis -> compute).
//
// After a replica computes a prompt prefix that ends on a block boundary (a page: the points
// where the in-process prefix cache takes its snapshots), offer() serializes that prefix's
// caches (the compressed codes, with the window and sinks they hold) into one value
// (server/prefix/prefix_value.hpp) and queues it for the store under the key of its last block. A new
// request's lookup() asks for every block boundary of its prompt in one pipelined round trip,
// fetches the longest one present, checks it (checksum, identity, tokens, shapes, every layer's
// cache class and options) and returns it ready to run; the scheduler computes only the rest.
// Anything wrong (store down or slow, the key evicted between the two calls, a damaged or
// foreign value) gives no prefix, is counted, and the prompt is computed.
//
// lookup() runs on the HTTP thread that submits the request, so the engine loop never waits on
// the network; offer() runs on the engine loop but only serializes (memory copies) and queues.
//
// Thread-safety: every method may be called from any thread.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "engine/model/model.hpp"
#include "server/prefix/prefix_store.hpp"
#include "server/prefix/prefix_value.hpp"
#include "turbokv/prompt_cache.hpp"

namespace turbokv::server {

// Hash of the model's shape, weight types and samples of every tensor's bytes: tells apart
// two models (two checkpoints of one architecture differ in every tensor) without reading
// gigabytes at start-up.
uint64_t model_fingerprint(const engine::Model& model);
// Hash of the cache configuration's canonical string (format_cache_config).
uint64_t cache_config_hash(const CacheConfig& config);

struct SharedPrefixMetrics {
  uint64_t lookups_total = 0;
  uint64_t hits_total = 0;            // lookups that returned a prefix
  uint64_t unavailable_total = 0;     // lookups that found the store down, slow or failing
  uint64_t evicted_total = 0;         // a key present at EXISTS and gone at GET
  uint64_t rejected_total = 0;        // values refused (truncated, corrupt, foreign, mismatched)
  uint64_t offers_total = 0;          // prefixes queued for the store
  uint64_t offer_bytes_total = 0;     // their bytes
  StoreCounters store;
};

class SharedPrefixes {
 public:
  // `tier` names the tier in log lines ("store", "disk").
  SharedPrefixes(std::shared_ptr<PrefixStore> store, const engine::Model& model, const CacheConfig& config,
                 size_t block_tokens, std::string tier = "store");

  struct Lookup {
    std::optional<PromptCache> cache;  // the longest usable stored prefix
    size_t tokens = 0;                 // its length (0 without one)
    std::vector<bool> present;         // per block boundary up to the limit: the store holds it
  };
  // The longest stored prefix of prompt[0, limit) (limit rounded down to whole blocks) that is
  // longer than `longer_than` tokens (what a tier above already found: only longer ones are asked
  // for, and `present` is false for the blocks up to it).
  Lookup lookup(const std::vector<int>& prompt, size_t limit, size_t longer_than = 0);
  // Whether the store holds exactly the prefix `tokens` (whole blocks); false when it cannot say.
  bool holds(std::span<const int> tokens);
  // Queues the caches' state as the prefix prompt[0, cache.size()) (a whole number of blocks).
  void offer(const std::vector<int>& prompt, const PromptCache& cache) { put(encode(prompt, cache)); }
  // The same in two steps: encode now (the caches change later), queue when it is known to be
  // worth it (a generated answer's last whole block, when the answer ends).
  struct Encoded {
    std::string key, value;
    std::vector<std::string> shorter;  // the keys of its shorter whole-block prefixes (put_superseding)
  };
  Encoded encode(std::span<const int> tokens, const PromptCache& cache) const;
  void put(Encoded encoded);

  SharedPrefixMetrics metrics() const;
  size_t block_tokens() const { return id_.block_tokens; }
  const PrefixIdentity& identity() const { return id_; }
  PrefixStore& store() { return *store_; }

 private:
  // Whether every layer is of the configured class with the configured options.
  void check_layers(const PromptCache& cache) const;

  std::shared_ptr<PrefixStore> store_;
  std::string tier_;
  PrefixIdentity id_;
  int n_layers_, kv_heads_, head_dim_;
  // Per layer: the class and the metadata an empty cache of the configuration has and that
  // does not change with the token count (bits, codec, rotation seed, window, ...).
  std::vector<std::string> classes_;
  std::vector<std::map<std::string, std::string>> fixed_metadata_;
  mutable std::mutex mutex_;
  SharedPrefixMetrics metrics_;
};

}  // namespace turbokv::server
