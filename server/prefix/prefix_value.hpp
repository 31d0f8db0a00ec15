// The keys and values of the shared prefix tier (server/prefix/shared_prefixes.hpp): what a replica
// writes to the store after computing a prompt prefix and what another replica reads back.
//
// Key: "tkv:p1:" + 16 hex digits of a chain hash. The chain starts from the identity (model
// fingerprint, cache configuration, block size) and folds in the token ids block by block, so
// the key of block b names exactly the prefix prompt[0, (b + 1) * block_tokens) under exactly
// one model and quantizer.
//
// Value (little-endian), format version 1:
//   0   8  magic "TKVPRFX1"
//   8   4  format version (1)
//   12  4  block tokens
//   16  8  model fingerprint
//   24  8  cache configuration hash
//   32  4  n_tokens (a multiple of block tokens)
//   36  4  n_layers
//   40  8  payload bytes P
//   48  4 * n_tokens  token ids (int32): checked against the prompt token for token
//   ..  P  payload: serialize_prompt_cache() of the prefix's caches (its own per-tensor checksums)
//   end 8  XXH3-64 of every byte before it
// A value is untrusted input: decode_prefix_value() checks every field and size before it reads
// past it, and throws PrefixValueError naming the problem (fuzz/fuzz_prefix_value.cpp).
//
// Thread-safety: every function is pure (parse_prompt_cache takes the registry's lock).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "turbokv/cache_io.hpp"
#include "turbokv/error.hpp"

namespace turbokv::server {

constexpr uint32_t kPrefixValueVersion = 1;
constexpr size_t kPrefixValueHeaderBytes = 48;

// What a key and a value commit to besides the tokens.
struct PrefixIdentity {
  uint64_t model = 0;         // model_fingerprint() of the weights and shape
  uint64_t config = 0;        // hash of the cache configuration's canonical string
  uint32_t block_tokens = 0;  // tokens per block (the server's page)
};

// Why a value was refused: kind is "truncated", "checksum", "foreign" (another model, cache
// configuration, block size or format version) or "mismatch" (other tokens, shapes or layers).
class PrefixValueError : public Error {
 public:
  PrefixValueError(std::string kind, const std::string& message) : Error(message), kind_(std::move(kind)) {}
  const std::string& kind() const { return kind_; }

 private:
  std::string kind_;
};

// Chain hashes of prompt[0, (b + 1) * block_tokens) for b < blocks (blocks * block_tokens <=
// prompt.size(), else turbokv::Error).
std::vector<uint64_t> prefix_chain(const PrefixIdentity& id, std::span<const int> prompt, size_t blocks);
std::string prefix_key(uint64_t chain_hash);

std::string encode_prefix_value(const PrefixIdentity& id, std::span<const int> tokens, const PromptCache& cache);

// What a decoded value must be: the same identity, exactly `tokens`, n_layers layers each
// holding tokens.size() tokens of kv_heads x head_dim.
struct PrefixExpectation {
  PrefixIdentity id;
  std::span<const int> tokens;
  int n_layers = 0;
  int kv_heads = 0;
  int head_dim = 0;
};
PromptCache decode_prefix_value(std::string_view value, const PrefixExpectation& expect);

}  // namespace turbokv::server
