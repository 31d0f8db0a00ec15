// Dense bit packing of small integer codes (1 to 8 bits per code).
//
// Byte layout (part of the on-disk and in-cache format):
//   The codes form one LSB-first bit stream. Code i occupies stream bits [i*bits, (i+1)*bits),
//   its least significant bit first; stream bit k is bit (k % 8) of byte k / 8. A run of n codes
//   takes packed_size(n, bits) = ceil(n * bits / 8) bytes; unused high bits of the last byte are
//   written as zero. No alignment or padding: 3-bit codes cost exactly 3 bits each.
//   Example (bits = 3): codes a,b,c -> byte0 = a | b << 3 | (c & 3) << 6, byte1 = c >> 2 | ...
#pragma once

#include <cstddef>
#include <cstdint>

namespace turbokv {

// Bytes needed for n_values codes of `bits` bits: ceil(n_values * bits / 8).
// Throws turbokv::Error if bits is outside [1, 8].
size_t packed_size(size_t n_values, int bits);

// Packs codes[0..n) (each must be < 2^bits; higher bits are ignored) into
// out[0..packed_size(n, bits)). Throws turbokv::Error if bits is outside [1, 8].
void pack_codes(const uint8_t* codes, size_t n, int bits, uint8_t* out);

// Inverse of pack_codes: reads packed_size(n, bits) bytes, writes n codes.
void unpack_codes(const uint8_t* packed, size_t n, int bits, uint8_t* codes);

}  // namespace turbokv
