// Checksums of stored bytes: XXH3-64 (xxHash 0.8, seed 0) from the system's libxxhash.
//
// Saved prompt caches carry one per tensor and one per metadata key (docs/formats.md); a later
// tier that stores serialized blocks elsewhere (e.g. Redis) can checksum them with the same
// function. XXH3 is not cryptographic: it detects damage (bit flips, truncation, edits), not a
// deliberate forgery.
//
// Thread-safety: every function is pure.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace turbokv {

// XXH3-64 of the bytes (with AVX2 code when the CPU has it: src/core/checksum_avx2.cpp).
uint64_t checksum64(std::span<const uint8_t> bytes);
uint64_t checksum64(std::string_view bytes);

// Checksum of a (key, value) pair, unambiguous for any strings: the key's length goes in first,
// so ("ab", "c") and ("a", "bc") differ.
uint64_t checksum64_pair(std::string_view key, std::string_view value);

// The same XXH3-64 over bytes given in pieces: digest() equals checksum64() of their
// concatenation. Lets a reader hash each piece right after reading it, while it is in cache.
// Not copyable; one per thread.
class ChecksumStream {
 public:
  ChecksumStream();
  ~ChecksumStream();
  ChecksumStream(const ChecksumStream&) = delete;
  ChecksumStream& operator=(const ChecksumStream&) = delete;

  void update(std::span<const uint8_t> bytes);
  uint64_t digest() const;

 private:
  bool avx2_;     // which XXH3 build owns state_ (src/core/checksum_impl.hpp)
  void* state_;  // its XXH3_state_t, kept out of this header
};

// 16 lowercase hex digits, most significant first, and back (nullopt unless exactly that form).
std::string checksum_hex(uint64_t checksum);
std::optional<uint64_t> parse_checksum_hex(std::string_view text);

}  // namespace turbokv
