// The orders of coordinates the SIMD integer kernels work in (attention_int8_simd.hpp): what
// codes32<B> puts in byte i of a chunk of 32, and where interleave4 then puts it.
#include <array>
#include <cstdint>

#include "kernels/attention_int8_kernels.hpp"

namespace turbokv::attn {
namespace {

using Order = std::array<uint8_t, 32>;

Order key_order(int bits) {
  Order o{};
  for (int i = 0; i < 32; ++i) {
    if (bits == 4) o[i] = static_cast<uint8_t>(i < 16 ? 2 * i : 2 * (i - 16) + 1);  // low nibbles, then high
    if (bits == 2) o[i] = static_cast<uint8_t>(4 * (i % 8) + i / 8);  // 64-bit lane k: codes 4j + k
    if (bits == 3) {
      // Groups of 8 codes in the order 0, 2, 1, 3.
      static const int kGroup[4] = {0, 2, 1, 3};
      o[i] = static_cast<uint8_t>(8 * kGroup[i / 8] + i % 8);
    }
  }
  return o;
}

// 32-bit lane d of interleaved vector k holds byte 16 * (d / 4) + 4k + d % 4 of the codes.
Order value_order(int bits) {
  const Order key = key_order(bits);
  Order o{};
  for (int k = 0; k < 4; ++k) {
    for (int d = 0; d < 8; ++d) o[8 * k + d] = key[16 * (d / 4) + 4 * k + d % 4];
  }
  return o;
}

struct Orders {
  Order key[3], value[3];
  const uint8_t* key_by_bits[9] = {};
  const uint8_t* value_by_bits[9] = {};
  Orders() {
    for (int bits = 2; bits <= 4; ++bits) {
      key[bits - 2] = key_order(bits);
      value[bits - 2] = value_order(bits);
      key_by_bits[bits] = key[bits - 2].data();
      value_by_bits[bits] = value[bits - 2].data();
    }
  }
};

const Orders& orders() {
  static const Orders o;
  return o;
}

}  // namespace

const uint8_t* const* int8_key_orders() { return orders().key_by_bits; }
const uint8_t* const* int8_value_orders() { return orders().value_by_bits; }

}  // namespace turbokv::attn
