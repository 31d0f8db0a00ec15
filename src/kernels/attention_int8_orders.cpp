// The order of coordinates the SIMD integer kernels work in (attention_int8_simd.hpp).
//
// A group is decoded in units: at 4 bits, 64 coordinates from one 32-byte load (its low nibbles
// = the even coordinates, then its high nibbles = the odd ones), and a last unit of 32 when the
// group has an odd number of 32s; at 2 and 3 bits, 32 coordinates (codes32<B>). For keys a
// unit's bytes are used in decode order; for values each 32 of them go through interleave4,
// whose 32-bit lane d of vector k holds byte 16 * (d / 4) + 4k + d % 4.
#include <cstdint>

#include "kernels/attention_int8_kernels.hpp"

namespace turbokv::attn {
namespace {

// Byte i of codes32<bits>'s output holds the code of coordinate decode32(bits, i).
int decode32(int bits, int i, bool vnni) {
  if (bits == 4) return i < 16 ? 2 * i : 2 * (i - 16) + 1;  // low nibbles, then high
  if (bits == 2) return 4 * (i % 8) + i / 8;                // 64-bit lane k: codes 4j + k
  if (vnni) return i;                                       // 3 bits, vpmultishiftqb
  static const int kGroup[4] = {0, 2, 1, 3};                // 3 bits: groups of 8 as 0, 2, 1, 3
  return 8 * kGroup[i / 8] + i % 8;
}

// Where interleave4 puts byte positions: accumulator position p <- byte interleaved(p).
int interleaved(int p) {
  const int k = p / 8, d = p % 8;
  return 16 * (d / 4) + 4 * k + d % 4;
}

void simd_order(int bits, int dims, bool values, bool vnni, uint16_t* order) {
  int first = 0;
  if (bits == 4) {
    for (; first + 64 <= dims; first += 64) {
      for (int p = 0; p < 64; ++p) {
        const int byte = values ? interleaved(p % 32) : p % 32;  // byte of the 32 nibbles' bytes
        order[first + p] = static_cast<uint16_t>(first + 2 * byte + p / 32);
      }
    }
  }
  for (; first + 32 <= dims; first += 32) {
    for (int p = 0; p < 32; ++p) {
      order[first + p] = static_cast<uint16_t>(first + decode32(bits, values ? interleaved(p) : p, vnni));
    }
  }
}

}  // namespace

void int8_avx2_order(int bits, int dims, bool values, uint16_t* order) {
  simd_order(bits, dims, values, false, order);
}

void int8_vnni_order(int bits, int dims, bool values, uint16_t* order) {
  simd_order(bits, dims, values, true, order);
}

// 8-bit codes in chunks of 64 (attention_int8_simd.hpp, decode64_16): keys as the two int16
// vectors a (per 128-bit lane L: codes 16L + 0..7) and b (16L + 8..15); values as four vectors
// whose 32-bit lane l of vector k holds code 16 (l / 4) + 4k + l % 4.
void int16_vnni_order(int dims, bool values, uint16_t* order) {
  for (int first = 0; first + 64 <= dims; first += 64) {
    for (int p = 0; p < 64; ++p) {
      int code;
      if (values) {
        const int k = p / 16, l = p % 16;
        code = 16 * (l / 4) + 4 * k + l % 4;
      } else {
        const int e = p % 32;
        code = 16 * (e / 8) + e % 8 + (p >= 32 ? 8 : 0);
      }
      order[first + p] = static_cast<uint16_t>(first + code);
    }
  }
}

}  // namespace turbokv::attn
