// The fuzz input format of fuzz_cache_roundtrip (shared with the seed generator):
//   byte 0: which original cache file to damage, modulo kCacheOriginals
//   then:   4-byte records: a little-endian 24-bit position (modulo the file's size) and a byte
//           XORed into the file there (a trailing partial record is ignored)
// So every input is "a known good file plus some damage", and the target can tell whether what
// loaded is what was saved.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace turbokv::fuzz {

inline constexpr size_t kCacheOriginals = 5;

struct CacheDamage {
  size_t original = 0;
  std::vector<std::pair<uint32_t, uint8_t>> flips;  // (position before the modulo, xor mask)

  static CacheDamage parse(const uint8_t* data, size_t size) {
    CacheDamage d;
    if (size == 0) return d;
    d.original = data[0] % kCacheOriginals;
    for (size_t i = 1; i + 4 <= size; i += 4) {
      const uint32_t pos = data[i] | (uint32_t{data[i + 1]} << 8) | (uint32_t{data[i + 2]} << 16);
      d.flips.emplace_back(pos, data[i + 3]);
    }
    return d;
  }

  void apply(std::vector<uint8_t>& bytes) const {
    if (bytes.empty()) return;
    for (const auto& [pos, mask] : flips) bytes[pos % bytes.size()] ^= mask;
  }
};

}  // namespace turbokv::fuzz
