// A small deterministic 64-bit hash (FNV-1a over bytes, finished with a SplitMix64 mix), for
// checksums of codebooks and rotation matrices that a saved cache stores and verifies.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace turbokv::detail {

class Hasher {
 public:
  void add_bytes(const void* data, size_t size) {
    const auto* bytes = static_cast<const uint8_t*>(data);
    for (size_t i = 0; i < size; ++i) {
      state_ = (state_ ^ bytes[i]) * 0x100000001b3ULL;
    }
  }
  template <typename T>
  void add(const T& value) {
    add_bytes(&value, sizeof value);
  }
  uint64_t finish() const {
    uint64_t z = state_ + 0x9e3779b97f4a7c15ULL;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }

 private:
  uint64_t state_ = 0xcbf29ce484222325ULL;
};

}  // namespace turbokv::detail
