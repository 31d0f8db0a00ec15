#include "server/prefix/prefix_value.hpp"

#include <fmt/format.h>

#include <cstring>

#include "turbokv/checksum.hpp"

namespace turbokv::server {

namespace {

constexpr char kMagic[8] = {'T', 'K', 'V', 'P', 'R', 'F', 'X', '1'};

void put_u32(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}
void put_u64(std::string& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}
uint64_t get_le(std::string_view bytes, size_t at, int n) {
  uint64_t v = 0;
  for (int i = 0; i < n; ++i) v |= static_cast<uint64_t>(static_cast<uint8_t>(bytes[at + i])) << (8 * i);
  return v;
}

}  // namespace

std::vector<uint64_t> prefix_chain(const PrefixIdentity& id, std::span<const int> prompt, size_t blocks) {
  if (id.block_tokens == 0 || blocks > prompt.size() / id.block_tokens) {
    throw Error(fmt::format("prefix_chain: {} blocks of {} tokens exceed a prompt of {}", blocks, id.block_tokens,
                            prompt.size()));
  }
  // Each link hashes (previous link, the block's token ids): the key of block b depends on every
  // token before its end and on the identity at the root.
  std::string link;
  put_u64(link, id.model);
  put_u64(link, id.config);
  put_u32(link, id.block_tokens);
  put_u32(link, kPrefixValueVersion);
  uint64_t h = checksum64(link);
  std::vector<uint64_t> chain(blocks);
  for (size_t b = 0; b < blocks; ++b) {
    link.clear();
    put_u64(link, h);
    for (size_t i = b * id.block_tokens; i < (b + 1) * id.block_tokens; ++i) put_u32(link, static_cast<uint32_t>(prompt[i]));
    h = checksum64(link);
    chain[b] = h;
  }
  return chain;
}

std::string prefix_key(uint64_t chain_hash) { return "tkv:p1:" + checksum_hex(chain_hash); }

std::string encode_prefix_value(const PrefixIdentity& id, std::span<const int> tokens, const PromptCache& cache) {
  const std::vector<uint8_t> payload = serialize_prompt_cache(cache);
  std::string out;
  out.reserve(kPrefixValueHeaderBytes + 4 * tokens.size() + payload.size() + 8);
  out.append(kMagic, sizeof kMagic);
  put_u32(out, kPrefixValueVersion);
  put_u32(out, id.block_tokens);
  put_u64(out, id.model);
  put_u64(out, id.config);
  put_u32(out, static_cast<uint32_t>(tokens.size()));
  put_u32(out, static_cast<uint32_t>(cache.n_layers()));
  put_u64(out, payload.size());
  for (const int t : tokens) put_u32(out, static_cast<uint32_t>(t));
  out.append(reinterpret_cast<const char*>(payload.data()), payload.size());
  put_u64(out, checksum64(out));
  return out;
}

PromptCache decode_prefix_value(std::string_view value, const PrefixExpectation& expect) {
  const size_t size = value.size();
  if (size < kPrefixValueHeaderBytes + 8) {
    throw PrefixValueError("truncated", fmt::format("prefix value: {} bytes, shorter than its header", size));
  }
  if (std::memcmp(value.data(), kMagic, sizeof kMagic) != 0) {
    throw PrefixValueError("foreign", "prefix value: not a turbokv prefix (bad magic)");
  }
  const auto version = static_cast<uint32_t>(get_le(value, 8, 4));
  if (version != kPrefixValueVersion) {
    throw PrefixValueError("foreign", fmt::format("prefix value: format version {}, this server reads {}", version,
                                                  kPrefixValueVersion));
  }
  const auto n_tokens = get_le(value, 32, 4);
  const auto n_layers = get_le(value, 36, 4);
  const auto payload_bytes = get_le(value, 40, 8);
  // Sizes first (in 64 bits, no overflow: n_tokens < 2^32, payload checked against size).
  const uint64_t body = size - kPrefixValueHeaderBytes - 8;
  if (payload_bytes > body || 4 * n_tokens > body - payload_bytes) {
    throw PrefixValueError("truncated", fmt::format("prefix value: {} tokens and {} payload bytes do not fit in {} bytes",
                                                    n_tokens, payload_bytes, size));
  }
  if (4 * n_tokens + payload_bytes != body) {
    throw PrefixValueError("mismatch", fmt::format("prefix value: {} bytes, its header says {}", size,
                                                   kPrefixValueHeaderBytes + 4 * n_tokens + payload_bytes + 8));
  }
  if (checksum64(value.substr(0, size - 8)) != get_le(value, size - 8, 8)) {
    throw PrefixValueError("checksum", "prefix value: checksum mismatch (damaged in the store or in transit)");
  }
  if (get_le(value, 12, 4) != expect.id.block_tokens || get_le(value, 16, 8) != expect.id.model ||
      get_le(value, 24, 8) != expect.id.config) {
    throw PrefixValueError("foreign", "prefix value: written for another model, cache configuration or block size");
  }
  if (n_tokens != expect.tokens.size() || n_layers != static_cast<uint64_t>(expect.n_layers)) {
    throw PrefixValueError("mismatch", fmt::format("prefix value: {} tokens x {} layers, expected {} x {}", n_tokens,
                                                   n_layers, expect.tokens.size(), expect.n_layers));
  }
  for (size_t i = 0; i < n_tokens; ++i) {
    if (static_cast<int>(static_cast<uint32_t>(get_le(value, kPrefixValueHeaderBytes + 4 * i, 4))) != expect.tokens[i]) {
      throw PrefixValueError("mismatch", fmt::format("prefix value: token {} differs from the prompt (hash collision)", i));
    }
  }
  const auto* payload = reinterpret_cast<const uint8_t*>(value.data()) + kPrefixValueHeaderBytes + 4 * n_tokens;
  PromptCache cache;
  try {
    cache = parse_prompt_cache(std::span<const uint8_t>(payload, payload_bytes), "<prefix store>");
  } catch (const Error& e) {
    throw PrefixValueError("mismatch", fmt::format("prefix value: payload does not load: {}", e.what()));
  }
  if (cache.n_layers() != n_layers) {
    throw PrefixValueError("mismatch", fmt::format("prefix value: payload has {} layers, header {}", cache.n_layers(), n_layers));
  }
  for (size_t l = 0; l < cache.n_layers(); ++l) {
    const KVCache& layer = cache.layer(l);
    if (layer.size() != n_tokens || layer.kv_heads() != expect.kv_heads || layer.head_dim() != expect.head_dim) {
      throw PrefixValueError("mismatch", fmt::format("prefix value: layer {} holds {} tokens of {}x{}, expected {} of {}x{}",
                                                     l, layer.size(), layer.kv_heads(), layer.head_dim(), n_tokens,
                                                     expect.kv_heads, expect.head_dim));
    }
  }
  return cache;
}

}  // namespace turbokv::server
