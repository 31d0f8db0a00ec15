// Fuzzes the shared prefix store's value decoder (server/prefix/prefix_value.hpp): a value read from
// Redis is untrusted input. The first input byte picks how the rest is checked, so the fuzzer
// gets past the outer checksum and identity to the token list and the payload:
//   bit 0: rewrite the trailing checksum to match (a forged or self-consistent value);
//   bit 1: expect the identity, tokens and shapes the value's own header claims (when they are
//          plausible), instead of a fixed expectation.
// A value that decodes must hold what was expected and serialize back to the payload it came
// with (no state lost or invented).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "server/prefix/prefix_value.hpp"
#include "turbokv/checksum.hpp"
#include "turbokv/error.hpp"

namespace {

uint64_t le(const std::string& s, size_t at, int n) {
  uint64_t v = 0;
  for (int i = 0; i < n; ++i) v |= static_cast<uint64_t>(static_cast<uint8_t>(s[at + i])) << (8 * i);
  return v;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace turbokv::server;
  if (size == 0) return 0;
  const uint8_t mode = data[0];
  std::string value(reinterpret_cast<const char*>(data) + 1, size - 1);
  if ((mode & 1) != 0 && value.size() >= 8) {
    const uint64_t sum = turbokv::checksum64(std::string_view(value).substr(0, value.size() - 8));
    for (int i = 0; i < 8; ++i) value[value.size() - 8 + i] = static_cast<char>((sum >> (8 * i)) & 0xFF);
  }
  PrefixExpectation expect;
  expect.id = {7, 9, 16};
  expect.n_layers = 2;
  expect.kv_heads = 2;
  expect.head_dim = 8;
  std::vector<int> tokens(32, 5);
  if ((mode & 2) != 0 && value.size() >= kPrefixValueHeaderBytes) {
    const uint64_t n = le(value, 32, 4);
    if (n <= 4096 && kPrefixValueHeaderBytes + 4 * n <= value.size()) {
      tokens.resize(n);
      for (size_t i = 0; i < n; ++i) tokens[i] = static_cast<int>(static_cast<uint32_t>(le(value, kPrefixValueHeaderBytes + 4 * i, 4)));
    }
    expect.id = {le(value, 16, 8), le(value, 24, 8), static_cast<uint32_t>(le(value, 12, 4))};
    expect.n_layers = static_cast<int>(le(value, 36, 4) & 0xFF);
    expect.kv_heads = 1 + (mode >> 4);
    expect.head_dim = 8 << ((mode >> 2) & 3);
  }
  expect.tokens = tokens;
  try {
    turbokv::PromptCache cache = decode_prefix_value(value, expect);
    if (cache.n_layers() != static_cast<size_t>(expect.n_layers)) std::abort();
    for (size_t l = 0; l < cache.n_layers(); ++l) {
      if (cache.layer(l).size() != tokens.size()) std::abort();
    }
    // The payload a decoded value came with is what its caches serialize to.
    const std::vector<uint8_t> again = turbokv::serialize_prompt_cache(cache);
    const std::string re = encode_prefix_value(expect.id, expect.tokens, cache);
    if (turbokv::serialize_prompt_cache(decode_prefix_value(re, expect)) != again) std::abort();
  } catch (const turbokv::Error&) {
  }
  return 0;
}
