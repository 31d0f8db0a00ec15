// 8-bit codes -> float centroids without gathers, for the exact fused path on CPUs with
// AVX512-VBMI (the avx2+vnni kernel table; attention_avx2.cpp's group_dots8 / group_accumulate8
// run the dense float kernels on the rows this decodes).
//
// Why: with 8-bit codes every coordinate is a lookup in a 256-entry table, and AVX2's gathers
// (16 per token and head at head_dim 128, for keys and again for values) made the 8-bit fused
// path twice as slow as fp16. Here the table is split into its four byte planes (256 bytes
// each, four zmm registers); vpermi2b looks up 64 codes in 128 entries, two of them and a blend
// on the code's top bit give one plane's bytes, and two rounds of unpacks plus a 128-bit lane
// transpose put the four planes back together as 64 floats in coordinate order: the same
// floats a gather gives, so results equal the AVX2 table's up to the kernels' summation order.
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "kernels/attention_int8_kernels.hpp"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

// GCC 12's AVX-512 intrinsics pass an undefined vector as the merge source of their unmasked
// forms (_mm512_shuffle_i32x4, _mm512_extracti64x4_epi64, ...), which -Wmaybe-uninitialized
// reports in every caller; nothing here reads an undefined lane.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#define TKV_VBMI __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vbmi")))

namespace turbokv::attn {
namespace {

// The table's byte planes: plane[b][q] holds byte b of entries 64q .. 64q + 63.
struct Planes {
  alignas(64) uint8_t bytes[4][256];
};

void make_planes(const float* table, Planes& planes) {
  for (int i = 0; i < 256; ++i) {
    uint32_t u;
    std::memcpy(&u, table + i, sizeof u);
    for (int b = 0; b < 4; ++b) planes.bytes[b][i] = static_cast<uint8_t>(u >> (8 * b));
  }
}

// The planes of the last two tables this thread decoded with (a key and a value codebook
// alternate); checked by content, so a new codebook at a reused address is never mistaken.
const Planes& planes_for(const float* table) {
  struct Slot {
    float table[256];
    Planes planes;
    bool used = false;
  };
  thread_local Slot slots[2];
  thread_local int next = 0;
  for (Slot& s : slots) {
    if (s.used && std::memcmp(s.table, table, sizeof s.table) == 0) return s.planes;
  }
  Slot& s = slots[next];
  next ^= 1;
  std::memcpy(s.table, table, sizeof s.table);
  make_planes(table, s.planes);
  s.used = true;
  return s.planes;
}

// 64 codes at p -> 64 floats at out, coordinate order.
TKV_VBMI inline void decode64(const __m512i (&plane)[4][4], const uint8_t* p, float* out) {
  const __m512i idx = _mm512_loadu_si512(p);
  const __mmask64 high = _mm512_movepi8_mask(idx);  // code >= 128
  __m512i b[4];
  for (int k = 0; k < 4; ++k) {
    const __m512i low_half = _mm512_permutex2var_epi8(plane[k][0], idx, plane[k][1]);
    const __m512i high_half = _mm512_permutex2var_epi8(plane[k][2], idx, plane[k][3]);
    b[k] = _mm512_mask_blend_epi8(high, low_half, high_half);
  }
  // Per 128-bit lane L (codes 16L .. 16L + 15): f[k] holds codes 16L + 4k .. 16L + 4k + 3.
  const __m512i l01 = _mm512_unpacklo_epi8(b[0], b[1]), h01 = _mm512_unpackhi_epi8(b[0], b[1]);
  const __m512i l23 = _mm512_unpacklo_epi8(b[2], b[3]), h23 = _mm512_unpackhi_epi8(b[2], b[3]);
  const __m512i f0 = _mm512_unpacklo_epi16(l01, l23), f1 = _mm512_unpackhi_epi16(l01, l23);
  const __m512i f2 = _mm512_unpacklo_epi16(h01, h23), f3 = _mm512_unpackhi_epi16(h01, h23);
  // Transpose the 4 x 4 grid of 128-bit lanes: output vector L = lane L of f0, f1, f2, f3.
  const __m512i t0 = _mm512_shuffle_i32x4(f0, f1, 0x44), t1 = _mm512_shuffle_i32x4(f2, f3, 0x44);
  const __m512i t2 = _mm512_shuffle_i32x4(f0, f1, 0xee), t3 = _mm512_shuffle_i32x4(f2, f3, 0xee);
  _mm512_storeu_si512(out, _mm512_shuffle_i32x4(t0, t1, 0x88));
  _mm512_storeu_si512(out + 16, _mm512_shuffle_i32x4(t0, t1, 0xdd));
  _mm512_storeu_si512(out + 32, _mm512_shuffle_i32x4(t2, t3, 0x88));
  _mm512_storeu_si512(out + 48, _mm512_shuffle_i32x4(t2, t3, 0xdd));
}

TKV_VBMI void decode_rows(const Planes& planes, const float* table, const uint8_t* records, size_t code_size,
                          size_t offset, size_t n, int dims, float* out) {
  __m512i plane[4][4];
  for (int b = 0; b < 4; ++b) {
    for (int q = 0; q < 4; ++q) plane[b][q] = _mm512_load_si512(planes.bytes[b] + 64 * q);
  }
  const int full = dims / 64 * 64;
  for (size_t t = 0; t < n; ++t) {
    const uint8_t* codes = records + t * code_size + offset;
    float* row = out + t * static_cast<size_t>(dims);
    for (int j = 0; j < full; j += 64) decode64(plane, codes + j, row + j);
    for (int j = full; j < dims; ++j) row[j] = table[codes[j]];
  }
}

}  // namespace

void decode_codes8_vbmi(const float* table, const uint8_t* records, size_t code_size, size_t offset,
                        size_t n, int dims, float* out) {
  decode_rows(planes_for(table), table, records, code_size, offset, n, dims, out);
}

}  // namespace turbokv::attn

#else

namespace turbokv::attn {
void decode_codes8_vbmi(const float*, const uint8_t*, size_t, size_t, size_t, int, float*) {}
}  // namespace turbokv::attn

#endif
