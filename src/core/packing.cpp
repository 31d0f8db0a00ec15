// Scalar bit packing: the reference for the SIMD kernels. Whole groups of 8 codes fill exactly
// `bits` bytes, so the main loop assembles one 64-bit word per group; the tail goes bit by bit.
#include "turbokv/packing.hpp"


#include "core/check.hpp"

namespace turbokv {
namespace {

void check_bits(int bits) {
  TURBOKV_CHECK(bits >= 1 && bits <= 8, "bit packing: bits must be in [1, 8], got {}", bits);
}

}  // namespace

size_t packed_size(size_t n_values, int bits) {
  check_bits(bits);
  return (n_values * static_cast<size_t>(bits) + 7) / 8;
}

void pack_codes(const uint8_t* codes, size_t n, int bits, uint8_t* out) {
  check_bits(bits);
  const uint32_t mask = (1u << bits) - 1u;
  const size_t groups = n / 8;
  for (size_t g = 0; g < groups; ++g) {
    uint64_t word = 0;
    for (int j = 0; j < 8; ++j) {
      word |= static_cast<uint64_t>(codes[g * 8 + j] & mask) << (j * bits);
    }
    for (int byte = 0; byte < bits; ++byte) {
      out[g * bits + byte] = static_cast<uint8_t>(word >> (8 * byte));
    }
  }
  // Tail: fewer than 8 codes, fewer than `bits` bytes.
  const size_t done = groups * 8;
  const size_t tail_bytes = packed_size(n, bits) - groups * bits;
  uint64_t word = 0;
  for (size_t i = done; i < n; ++i) {
    word |= static_cast<uint64_t>(codes[i] & mask) << ((i - done) * bits);
  }
  for (size_t byte = 0; byte < tail_bytes; ++byte) {
    out[groups * bits + byte] = static_cast<uint8_t>(word >> (8 * byte));
  }
}

void unpack_codes(const uint8_t* packed, size_t n, int bits, uint8_t* codes) {
  check_bits(bits);
  const uint64_t mask = (1u << bits) - 1u;
  const size_t groups = n / 8;
  for (size_t g = 0; g < groups; ++g) {
    uint64_t word = 0;
    for (int byte = 0; byte < bits; ++byte) {
      word |= static_cast<uint64_t>(packed[g * bits + byte]) << (8 * byte);
    }
    for (int j = 0; j < 8; ++j) codes[g * 8 + j] = static_cast<uint8_t>((word >> (j * bits)) & mask);
  }
  const size_t done = groups * 8;
  const size_t tail_bytes = packed_size(n, bits) - groups * bits;
  uint64_t word = 0;
  for (size_t byte = 0; byte < tail_bytes; ++byte) {
    word |= static_cast<uint64_t>(packed[groups * bits + byte]) << (8 * byte);
  }
  for (size_t i = done; i < n; ++i) {
    codes[i] = static_cast<uint8_t>((word >> ((i - done) * bits)) & mask);
  }
}

}  // namespace turbokv
