// The integer attention kernels (KernelTable::int8_dots / int8_accumulate), written once and
// compiled three times: by attention_int8_avx2.cpp (AVX2: maddubs + madd),
// attention_int8_avx_vnni.cpp (the same kernels, AVX-VNNI's vpdpbusd for the product: it also
// defines TURBOKV_INT8_AVX_VNNI) and attention_int8_vnni.cpp (AVX-512 VNNI/VBMI). The including
// file defines TURBOKV_INT8_VNNI (0 or 1), includes <immintrin.h>, <cstring> and
// attention_kernels.hpp, opens its target region and includes this file inside
// `namespace turbokv::attn { namespace {` so each copy stays local to its translation unit.
//
// Why integers: decoding a code to a float centroid costs shuffles per 8 codes and every code
// then costs one FMA lane per query row; as int8 centroids, one byte shuffle decodes 32 codes
// and one vpdpbusd (two AVX2 multiplies and an add) multiplies and sums 32 of them. Keys: the
// query rows are integers of int8_query_levels (a scale per row), the centroids int8 (a scale
// per codebook). Values: the softmax weights times the value norms become 7-bit integers per
// row and block. The sums are exact integers; only the roundings differ from the float path
// (tests and the kjv eval measure what that costs). 8-bit codes (VNNI build only, at the end)
// use 12-bit integers instead.
//
// Decode: codes32<B> turns the 4B bytes of 32 B-bit codes into 32 code bytes in a fixed order
// (at 4 bits, one 32-byte load gives 64: its low and its high nibbles), then one vpshufb turns
// codes into int8 centroids; attention_int8_orders.cpp spells the orders out. Values need the
// tokens, not the coordinates, next to each other (vpdpbusd sums four neighbouring byte
// products), so four tokens' code bytes are interleaved by two rounds of unpacks first.

#define TKV_INLINE inline __attribute__((always_inline))

// ---- 32 codes -> 32 code bytes ------------------------------------------------------------

// Byte i of the result holds the code of coordinate decode32(B, i) of the chunk
// (attention_int8_orders.cpp).
template <int B>
TKV_INLINE __m256i codes32(const uint8_t* p);

// 4 bits: 16 bytes; the low nibbles (even coordinates) in the low lane, the high nibbles in the
// high lane.
template <>
TKV_INLINE __m256i codes32<4>(const uint8_t* p) {
  const __m256i b = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return _mm256_and_si256(_mm256_blend_epi32(b, _mm256_srli_epi16(b, 4), 0xf0), _mm256_set1_epi8(0x0f));
}

// 2 bits: 8 bytes in each 64-bit lane, lane k shifted right by 2k: byte j of lane k holds code
// 4j + k.
template <>
TKV_INLINE __m256i codes32<2>(const uint8_t* p) {
  uint64_t u;
  std::memcpy(&u, p, sizeof u);
  const __m256i b = _mm256_set1_epi64x(static_cast<long long>(u));
  return _mm256_and_si256(_mm256_srlv_epi64(b, _mm256_setr_epi64x(0, 2, 4, 6)), _mm256_set1_epi8(0x03));
}

// 3 bits: 12 bytes = four groups of 8 codes in 3 bytes. A byte shuffle puts, in one 16-bit
// lane per code, the two bytes holding it; a multiply by 2^(8 - shift) and a shift right by 8
// leave it in the low bits (AVX2 has no per-lane 16-bit shift); a pack makes bytes.
// Output: groups 0, 2 in the low lane, 1, 3 in the high lane.
#if TURBOKV_INT8_VNNI
// 3 bits with AVX512VBMI: a masked load of the 12 bytes (no byte past them is touched), a byte
// permute giving each 64-bit lane one 3-byte group, and vpmultishiftqb pulling byte j of the
// lane from bit 3j: coordinate order.
template <>
TKV_INLINE __m256i codes32<3>(const uint8_t* p) {
  const __m256i bytes = _mm256_castsi128_si256(_mm_maskz_loadu_epi8(0x0fff, p));
  // The zero-masking forms with every lane kept: the plain intrinsics pass an undefined vector
  // through, which GCC 12 reports as possibly uninitialized.
  const __mmask32 all = 0xffffffffu;
  const __m256i groups = _mm256_maskz_permutexvar_epi8(
      all, _mm256_setr_epi8(0, 1, 2, 2, 2, 2, 2, 2, 3, 4, 5, 5, 5, 5, 5, 5, 6, 7, 8, 8, 8, 8, 8, 8, 9, 10, 11, 11, 11, 11, 11, 11),
      bytes);
  const __m256i shifts = _mm256_set1_epi64x(0x15120f0c09060300LL);  // 21, 18, ..., 3, 0
  return _mm256_and_si256(_mm256_maskz_multishift_epi64_epi8(all, shifts, groups), _mm256_set1_epi8(0x07));
}
#else
template <>
TKV_INLINE __m256i codes32<3>(const uint8_t* p) {
  uint64_t lo;
  uint32_t hi;
  std::memcpy(&lo, p, sizeof lo);
  std::memcpy(&hi, p + 8, sizeof hi);
  const __m128i x = _mm_insert_epi32(_mm_cvtsi64_si128(static_cast<long long>(lo)), static_cast<int>(hi), 2);
  const __m256i b = _mm256_broadcastsi128_si256(x);
  // Code k of a group starts at bit 3k: byte 3k / 8, shift 3k % 8; codes 6 and 7 lie in byte 2.
#define TKV_GROUP_WORDS(g) \
  3 * (g), 3 * (g) + 1, 3 * (g), 3 * (g) + 1, 3 * (g), 3 * (g) + 1, 3 * (g) + 1, 3 * (g) + 2, \
  3 * (g) + 1, 3 * (g) + 2, 3 * (g) + 1, 3 * (g) + 2, 3 * (g) + 2, -1, 3 * (g) + 2, -1
  const __m256i idx_a = _mm256_setr_epi8(TKV_GROUP_WORDS(0), TKV_GROUP_WORDS(1));
  const __m256i idx_b = _mm256_setr_epi8(TKV_GROUP_WORDS(2), TKV_GROUP_WORDS(3));
#undef TKV_GROUP_WORDS
  const __m256i mul = _mm256_setr_epi16(256, 32, 4, 128, 16, 2, 64, 8, 256, 32, 4, 128, 16, 2, 64, 8);
  const __m256i a = _mm256_srli_epi16(_mm256_mullo_epi16(_mm256_shuffle_epi8(b, idx_a), mul), 8);
  const __m256i c = _mm256_srli_epi16(_mm256_mullo_epi16(_mm256_shuffle_epi8(b, idx_b), mul), 8);
  return _mm256_and_si256(_mm256_packus_epi16(a, c), _mm256_set1_epi8(0x07));
}
#endif

// Four tokens' code bytes -> four vectors whose 32-bit lane d of vector k holds byte
// 16 * (d / 4) + 4k + d % 4 of each token, tokens 0..3 in its four bytes.
TKV_INLINE void interleave4(const __m256i* x, __m256i* y) {
  const __m256i l01 = _mm256_unpacklo_epi8(x[0], x[1]), h01 = _mm256_unpackhi_epi8(x[0], x[1]);
  const __m256i l23 = _mm256_unpacklo_epi8(x[2], x[3]), h23 = _mm256_unpackhi_epi8(x[2], x[3]);
  y[0] = _mm256_unpacklo_epi16(l01, l23);
  y[1] = _mm256_unpackhi_epi16(l01, l23);
  y[2] = _mm256_unpacklo_epi16(h01, h23);
  y[3] = _mm256_unpackhi_epi16(h01, h23);
}

TKV_INLINE __m256i table16(const int8_t* table, bool offset) {
  __m128i t = _mm_loadu_si128(reinterpret_cast<const __m128i*>(table));
  if (offset) t = _mm_xor_si128(t, _mm_set1_epi8(static_cast<char>(0x80)));
  return _mm256_broadcastsi128_si256(t);
}

// ---- products -------------------------------------------------------------------------------

// acc + sum of four (u8 a) * (s8 b) products per 32-bit lane. The AVX2 form's maddubs adds
// pairs of products in 16 bits with saturation: the callers keep each pair within 32767.
TKV_INLINE __m256i dot_u8s8(__m256i acc, __m256i a, __m256i b) {
#if TURBOKV_INT8_VNNI
  return _mm256_dpbusd_epi32(acc, a, b);
#elif defined(TURBOKV_INT8_AVX_VNNI)
  return _mm256_dpbusd_avx_epi32(acc, a, b);
#else
  return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(a, b), _mm256_set1_epi16(1)));
#endif
}

// Lane i: the sum of the lanes of a[i] (a[i] for i >= m count as zero).
TKV_INLINE __m256i reduce8_epi32(const __m256i* a) {
  const __m256i s01 = _mm256_hadd_epi32(a[0], a[1]);
  const __m256i s23 = _mm256_hadd_epi32(a[2], a[3]);
  const __m256i s45 = _mm256_hadd_epi32(a[4], a[5]);
  const __m256i s67 = _mm256_hadd_epi32(a[6], a[7]);
  const __m256i s0123 = _mm256_hadd_epi32(s01, s23);
  const __m256i s4567 = _mm256_hadd_epi32(s45, s67);
  return _mm256_add_epi32(_mm256_permute2x128_si256(s0123, s4567, 0x20),
                          _mm256_permute2x128_si256(s0123, s4567, 0x31));
}

// dst[i] (+)= row_scale * f[i] for i < m <= 8.
TKV_INLINE void store_lanes(__m256 f, size_t m, float row_scale, bool add, float* dst) {
  const __m256 scale = _mm256_set1_ps(row_scale);
  if (m == 8) {
    _mm256_storeu_ps(dst, add ? _mm256_fmadd_ps(f, scale, _mm256_loadu_ps(dst)) : _mm256_mul_ps(f, scale));
    return;
  }
  alignas(32) float lanes[8];
  if (add) {
    float old[8] = {};
    std::memcpy(old, dst, m * sizeof(float));
    _mm256_store_ps(lanes, _mm256_fmadd_ps(f, scale, _mm256_loadu_ps(old)));
  } else {
    _mm256_store_ps(lanes, _mm256_mul_ps(f, scale));
  }
  std::memcpy(dst, lanes, m * sizeof(float));
}

// dst[i] (+)= row_scale * (sum of part[i]'s lanes + start) for the m <= 8 tokens of a group of
// eight (part[i] for i >= m is ignored): a multiply, or one fused multiply-add when adding,
// as the scalar kernels do.
TKV_INLINE void store_scores(__m256i (&part)[8], size_t m, int32_t start, float row_scale, bool add, float* dst) {
  for (size_t i = m; i < 8; ++i) part[i] = _mm256_setzero_si256();
  store_lanes(_mm256_cvtepi32_ps(_mm256_add_epi32(reduce8_epi32(part), _mm256_set1_epi32(start))), m, row_scale, add,
              dst);
}

// ---- keys -----------------------------------------------------------------------------------

// Whether a build's key kernels take the centroids as unsigned bytes offset by 128, each row's
// sum then starting at -128 * sum(q8): VNNI's vpdpbusd always; AVX2's maddubs against the 6-bit
// query rows of 2- and 3-bit groups (int8_query_levels: pairs within 2 * 255 * 63). Against
// 4-bit groups' 7-bit rows AVX2 multiplies |centroid| by the query byte with the centroid's
// sign (pairs within 2 * 127 * 127), one more instruction per row and chunk.
template <int B>
constexpr bool kOffsetKeys = TURBOKV_INT8_VNNI != 0 || int8_query_levels(B) <= 63;

// Where a row's sum of products with offset centroids starts: -128 * sum(q8 row).
TKV_INLINE int32_t offset_start(const int8_t* q8, int dims) {
  int32_t sum = 0;
  for (int j = 0; j < dims; ++j) sum += q8[j];
  return -128 * sum;
}

// R query rows against n tokens, two tokens per step (independent sums to overlap).
// kChunks > 0 fixes the chunks per token at compile time (head_dim 64, 128).
// acc[r] += the products of one chunk of 32 decoded centroids k (offset by 128 where
// kOffsetKeys<B>) with query bytes q8 + r * qs.
template <int B, int R>
TKV_INLINE void chunk_dots(const int8_t* q8, size_t qs, __m256i k, __m256i* acc) {
  if constexpr (kOffsetKeys<B>) {
    for (int r = 0; r < R; ++r) {
      acc[r] = dot_u8s8(acc[r], k, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q8 + r * qs)));
    }
  } else {
    const __m256i k_abs = _mm256_abs_epi8(k);
    for (int r = 0; r < R; ++r) {
      const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q8 + r * qs));
      acc[r] = dot_u8s8(acc[r], k_abs, _mm256_sign_epi8(q, k));
    }
  }
}

// One token's chunks. 4 bits: pairs of chunks from one 32-byte load (low nibbles = even
// coordinates, high = odd; attention_int8_orders.cpp), then a last single chunk if any.
template <int B, int R, int kChunks>
TKV_INLINE void token_dots(const int8_t* q8, size_t qs, const __m256i table, const uint8_t* rec, int chunks,
                           __m256i* acc) {
  const int nc = kChunks > 0 ? kChunks : chunks;
  int c = 0;
  if constexpr (B == 4) {
    const __m256i nibble = _mm256_set1_epi8(0x0f);
#pragma GCC unroll 4
    for (; c + 2 <= nc; c += 2) {
      const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rec + 16 * c));
      chunk_dots<B, R>(q8 + kInt8Chunk * c, qs, _mm256_shuffle_epi8(table, _mm256_and_si256(x, nibble)), acc);
      chunk_dots<B, R>(q8 + kInt8Chunk * (c + 1), qs,
                       _mm256_shuffle_epi8(table, _mm256_and_si256(_mm256_srli_epi16(x, 4), nibble)), acc);
    }
  }
#pragma GCC unroll 8
  for (; c < nc; ++c) chunk_dots<B, R>(q8 + kInt8Chunk * c, qs, _mm256_shuffle_epi8(table, codes32<B>(rec + c * 4 * B)), acc);
}

// Tokens per step of the key kernel: independent sums for the out-of-order core to overlap
// (VNNI's 32 registers hold four tokens' R sums and the query rows; AVX2's 16 two).
constexpr int kTokens = TURBOKV_INT8_VNNI ? 4 : 2;

template <int B, int R, int kChunks>
void int8_dots_tile(const int8_t* q8, size_t qs, const float* row_scale, const uint8_t* records,
                    size_t code_size, size_t n, const CodeGroup& g, float* scores, size_t ld, bool add) {
  const int chunks = g.dims / kInt8Chunk;
  const __m256i table = table16(g.table8, kOffsetKeys<B>);
  int32_t start[R] = {};
  if constexpr (kOffsetKeys<B>) {
    for (int r = 0; r < R; ++r) start[r] = offset_start(q8 + r * qs, g.dims);
  }
  // Each token leaves one vector of partial sums per row in part[r][t % 8]; every 8 tokens
  // one reduction per row turns them into 8 scores (lane = token).
  alignas(32) __m256i part[R][8];
  const uint8_t* base = records + g.offset;
  for (size_t t = 0; t < n;) {
    // kTokens tokens a step (t stays a multiple of kTokens until the last step, so they land
    // in one group of 8).
    const size_t lane = t & 7;
    const size_t here = n - t < static_cast<size_t>(kTokens) ? n - t : static_cast<size_t>(kTokens);
    __m256i acc[kTokens][R];
    for (int u = 0; u < kTokens; ++u) {
      for (int r = 0; r < R; ++r) acc[u][r] = _mm256_setzero_si256();
    }
    for (int u = 0; u < kTokens; ++u) {
      if (static_cast<size_t>(u) < here) token_dots<B, R, kChunks>(q8, qs, table, base + (t + u) * code_size, chunks, acc[u]);
    }
    for (int u = 0; u < kTokens; ++u) {
      if (static_cast<size_t>(u) < here) {
        for (int r = 0; r < R; ++r) part[r][lane + u] = acc[u][r];
      }
    }
    t += here;
    if ((t & 7) == 0 || t == n) {
      const size_t t0 = (t - 1) & ~size_t{7};
      const size_t m = t - t0;
      for (int r = 0; r < R; ++r) {
        store_scores(part[r], m, start[r], row_scale[r], add, scores + r * ld + t0);
      }
    }
  }
}

template <int B, int R>
void int8_dots_rows(const int8_t* q8, size_t qs, const float* row_scale, const uint8_t* records,
                    size_t code_size, size_t n, const CodeGroup& g, float* scores, size_t ld, bool add) {
  switch (g.dims) {
    case 64: int8_dots_tile<B, R, 2>(q8, qs, row_scale, records, code_size, n, g, scores, ld, add); break;
    case 128: int8_dots_tile<B, R, 4>(q8, qs, row_scale, records, code_size, n, g, scores, ld, add); break;
    default: int8_dots_tile<B, R, 0>(q8, qs, row_scale, records, code_size, n, g, scores, ld, add); break;
  }
}

template <int B>
void int8_dots_bits(const int8_t* q8, size_t qs, int rows, const float* row_scale, const uint8_t* records,
                    size_t code_size, size_t n, const CodeGroup& g, float* scores, size_t ld, bool add) {
  int r = 0;
  for (; r + 4 <= rows; r += 4) {
    int8_dots_rows<B, 4>(q8 + r * qs, qs, row_scale + r, records, code_size, n, g, scores + r * ld, ld, add);
  }
  for (; r + 2 <= rows; r += 2) {
    int8_dots_rows<B, 2>(q8 + r * qs, qs, row_scale + r, records, code_size, n, g, scores + r * ld, ld, add);
  }
  for (; r < rows; ++r) {
    int8_dots_rows<B, 1>(q8 + r * qs, qs, row_scale + r, records, code_size, n, g, scores + r * ld, ld, add);
  }
}

void int8_dots(const int8_t* q8, size_t qs, int rows, const float* row_scale, const uint8_t* records,
               size_t code_size, size_t n, const CodeGroup& g, float* scores, size_t ld, bool add) {
  switch (g.bits) {
    case 2: int8_dots_bits<2>(q8, qs, rows, row_scale, records, code_size, n, g, scores, ld, add); break;
    case 3: int8_dots_bits<3>(q8, qs, rows, row_scale, records, code_size, n, g, scores, ld, add); break;
    default: int8_dots_bits<4>(q8, qs, rows, row_scale, records, code_size, n, g, scores, ld, add); break;
  }
}

// ---- values ---------------------------------------------------------------------------------

// The code bytes of chunk c of the token at p (the group's codes): at 4 bits a chunk of a pair
// (see token_dots) is the low or high nibbles of the pair's 32 bytes.
template <int B>
TKV_INLINE __m256i chunk_codes_of(const uint8_t* p, int c, bool paired) {
  if constexpr (B == 4) {
    if (paired) {
      const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 16 * (c & ~1)));
      const __m256i nibbles = (c & 1) != 0 ? _mm256_srli_epi16(x, 4) : x;
      return _mm256_and_si256(nibbles, _mm256_set1_epi8(0x0f));
    }
  }
  return codes32<B>(p + c * 4 * B);
}

// R rows, one chunk of 32 coordinates at a time: the chunk's int32 sums stay in registers over
// the tokens (R x 4 vectors), four tokens per step. AVX2: weights are <= 127, so the maddubs
// pairs stay within 2 * 127 * 127; VNNI's vpdpbusd takes weights up to 255.
template <int B, int R>
void int8_accumulate_tile(const uint8_t* w8, size_t ld, const float* row_scale, const uint8_t* records,
                          size_t code_size, size_t n, const CodeGroup& g, float* acc, size_t as) {
  const int chunks = g.dims / kInt8Chunk;
  const __m256i table = table16(g.table8, false);
  const uint8_t* base = records + g.offset;
  for (int c = 0; c < chunks; ++c) {
    const bool paired = B == 4 && (c & ~1) + 2 <= chunks;
    __m256i sum[R][4];
    for (int r = 0; r < R; ++r) {
      for (int k = 0; k < 4; ++k) sum[r][k] = _mm256_setzero_si256();
    }
    for (size_t t = 0; t < n; t += 4) {
      __m256i x[4], y[4];
      for (int i = 0; i < 4; ++i) {
        x[i] = t + i < n ? chunk_codes_of<B>(base + (t + i) * code_size, c, paired) : _mm256_setzero_si256();
      }
      interleave4(x, y);
      for (int k = 0; k < 4; ++k) y[k] = _mm256_shuffle_epi8(table, y[k]);
      for (int r = 0; r < R; ++r) {
        int32_t w4;
        std::memcpy(&w4, w8 + r * ld + t, sizeof w4);
        const __m256i w = _mm256_set1_epi32(w4);
        for (int k = 0; k < 4; ++k) sum[r][k] = dot_u8s8(sum[r][k], w, y[k]);
      }
    }
    for (int r = 0; r < R; ++r) {
      const __m256 scale = _mm256_set1_ps(row_scale[r]);
      float* a = acc + r * as + kInt8Chunk * c;
      for (int k = 0; k < 4; ++k) {
        _mm256_storeu_ps(a + 8 * k, _mm256_fmadd_ps(scale, _mm256_cvtepi32_ps(sum[r][k]), _mm256_loadu_ps(a + 8 * k)));
      }
    }
  }
}

// AVX2 has 16 vector registers: two rows' 8 accumulators plus the decoded tokens fit; the VNNI
// build (AVX-512VL: 32 registers) takes four rows per pass, decoding each chunk once for them.
constexpr int kInt8ValueRows = TURBOKV_INT8_VNNI ? 4 : 2;

template <int B>
void int8_accumulate_bits(const uint8_t* w8, size_t ld, int rows, const float* row_scale,
                          const uint8_t* records, size_t code_size, size_t n, const CodeGroup& g,
                          float* acc, size_t as) {
  int r = 0;
  for (; r + kInt8ValueRows <= rows; r += kInt8ValueRows) {
    int8_accumulate_tile<B, kInt8ValueRows>(w8 + r * ld, ld, row_scale + r, records, code_size, n, g, acc + r * as, as);
  }
  if constexpr (kInt8ValueRows > 2) {
    for (; r + 2 <= rows; r += 2) {
      int8_accumulate_tile<B, 2>(w8 + r * ld, ld, row_scale + r, records, code_size, n, g, acc + r * as, as);
    }
  }
  for (; r < rows; ++r) {
    int8_accumulate_tile<B, 1>(w8 + r * ld, ld, row_scale + r, records, code_size, n, g, acc + r * as, as);
  }
}

void int8_accumulate(const uint8_t* w8, size_t ld, int rows, const float* row_scale, const uint8_t* records,
                     size_t code_size, size_t n, const CodeGroup& g, float* acc, size_t as) {
  switch (g.bits) {
    case 2: int8_accumulate_bits<2>(w8, ld, rows, row_scale, records, code_size, n, g, acc, as); break;
    case 3: int8_accumulate_bits<3>(w8, ld, rows, row_scale, records, code_size, n, g, acc, as); break;
    default: int8_accumulate_bits<4>(w8, ld, rows, row_scale, records, code_size, n, g, acc, as); break;
  }
}

// ---- weights --------------------------------------------------------------------------------

// As the scalar kernels: the same multiply, max and fused rounding step, so the same integers.
// `levels` steps (the table's int8_weight_levels, or kInt16Max for int16_weights), zeros to a
// multiple of kPad.
template <typename T, size_t kPad>
void integer_weights(const float* p, size_t ld, int rows, const float* norm, size_t n, int levels_in, T* w_out,
                     float* scale) {
  const float levels = static_cast<float>(levels_in);
  for (int r = 0; r < rows; ++r) {
    const float* pr = p + r * ld;
    T* out = w_out + r * ld;
    alignas(32) float w[kBlockTokens + 8];
    __m256 vmax = _mm256_setzero_ps();
    __m256 check = _mm256_setzero_ps();  // w * 0: NaN where w is not finite
    size_t t = 0;
    for (; t + 8 <= n; t += 8) {
      const __m256 v = _mm256_mul_ps(_mm256_loadu_ps(pr + t), _mm256_loadu_ps(norm + t));
      _mm256_store_ps(w + t, v);
      vmax = _mm256_max_ps(vmax, v);
      check = _mm256_add_ps(check, _mm256_mul_ps(v, _mm256_setzero_ps()));
    }
    // The lanes' max (exact in any order) and whether every check lane is 0 (not NaN).
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(vmax), _mm256_extractf128_ps(vmax, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_shuffle_ps(m4, m4, 1));
    float wmax = _mm_cvtss_f32(m4);
    bool finite = _mm256_movemask_ps(_mm256_cmp_ps(check, _mm256_setzero_ps(), _CMP_EQ_OQ)) == 0xff;
    for (; t < n; ++t) {
      w[t] = pr[t] * norm[t];
      finite = finite && std::isfinite(w[t]);
      wmax = std::max(wmax, w[t]);
    }
    const size_t padded = (n + kPad - 1) / kPad * kPad;
    if (!finite) {  // NaN or infinite weights: no integers, a NaN scale
      std::memset(out, 0, padded * sizeof(T));
      scale[r] = std::numeric_limits<float>::quiet_NaN();
      continue;
    }
    const float inv = wmax > 0.0f ? levels / wmax : 0.0f;
    const __m256 vinv = _mm256_set1_ps(inv), half = _mm256_set1_ps(0.5f);
    t = 0;
    for (; t + 8 <= n; t += 8) {
      const __m256i q = _mm256_cvttps_epi32(_mm256_fmadd_ps(_mm256_load_ps(w + t), vinv, half));
      const __m128i q16 = _mm_packus_epi32(_mm256_castsi256_si128(q), _mm256_extracti128_si256(q, 1));
      if constexpr (sizeof(T) == 1) {
        _mm_storel_epi64(reinterpret_cast<__m128i*>(out + t), _mm_packus_epi16(q16, q16));
      } else {
        _mm_storeu_si128(reinterpret_cast<__m128i*>(out + t), q16);
      }
    }
    for (; t < n; ++t) out[t] = static_cast<T>(std::trunc(std::fma(w[t], inv, 0.5f)));
    for (; t < padded; ++t) out[t] = 0;
    scale[r] = wmax / levels;
  }
}

void int8_weights(const float* p, size_t ld, int rows, const float* norm, size_t n, int levels, uint8_t* w8,
                  float* scale) {
  integer_weights<uint8_t, 4>(p, ld, rows, norm, n, levels, w8, scale);
}

// The weights' levels (KernelTable::int8_weight_levels). vpdpbusd could take 255, but on
// kjv-llama-3M 255 levels measured no better than 127 (tq4-plain KL +3.2% vs +1.8% over the
// exact path's, tq4 +1.3% vs +1.0%: the roundings' effect on KL is noise-sized), and 127 keeps
// the VNNI table's results bit-identical to the AVX2 and scalar tables'.
constexpr int kInt8WeightLevels = 127;

#if TURBOKV_INT8_VNNI
// ---- 8-bit codes in 16-bit integers (VNNI build: AVX512-VBMI byte permutes, vpdpwssd) ---------
//
// The 256 int16 centroids as two byte planes of four zmm registers (entries 64q .. 64q + 63);
// vpermi2b looks 64 codes up in 128 entries, two and a blend on the code's top bit give one
// plane, and byte unpacks rebuild the int16 values: per 128-bit lane L, `a` holds codes
// 16L + 0..7 and `b` codes 16L + 8..15 (attention_int8_orders.cpp).
struct Planes16 {
  __m512i lo[4], hi[4];
  // Built per kernel call, so in registers: each 32 entries' low and high bytes by narrowing
  // the words (vpmovwb), instead of a byte loop over the table in memory.
  explicit Planes16(const int16_t* table) {
    for (int q = 0; q < 4; ++q) {
      const __m512i w0 = _mm512_loadu_si512(table + 64 * q);
      const __m512i w1 = _mm512_loadu_si512(table + 64 * q + 32);
      lo[q] = join(_mm512_cvtepi16_epi8(w0), _mm512_cvtepi16_epi8(w1));
      hi[q] = join(_mm512_cvtepi16_epi8(_mm512_srli_epi16(w0, 8)), _mm512_cvtepi16_epi8(_mm512_srli_epi16(w1, 8)));
    }
  }
  static __m512i join(__m256i low, __m256i high) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(low), high, 1);
  }
};

TKV_INLINE void decode64_16(const Planes16& t, const uint8_t* p, __m512i& a, __m512i& b) {
  const __m512i idx = _mm512_loadu_si512(p);
  const __mmask64 high = _mm512_movepi8_mask(idx);
  const __m512i lo = _mm512_mask_blend_epi8(high, _mm512_permutex2var_epi8(t.lo[0], idx, t.lo[1]),
                                            _mm512_permutex2var_epi8(t.lo[2], idx, t.lo[3]));
  const __m512i hi = _mm512_mask_blend_epi8(high, _mm512_permutex2var_epi8(t.hi[0], idx, t.hi[1]),
                                            _mm512_permutex2var_epi8(t.hi[2], idx, t.hi[3]));
  a = _mm512_unpacklo_epi8(lo, hi);
  b = _mm512_unpackhi_epi8(lo, hi);
}

template <int R>
void int16_dots_tile(const int16_t* q16, size_t qs, const float* row_scale, const uint8_t* records,
                     size_t code_size, size_t n, const CodeGroup& g, float* scores, size_t ld, bool add) {
  const Planes16 planes(g.table16);
  const int chunks = g.dims / 64;
  alignas(32) __m256i part[R][8];
  const uint8_t* base = records + g.offset;
  for (size_t t = 0; t < n; ++t) {
    __m512i acc[R];
    for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_si512();
    for (int c = 0; c < chunks; ++c) {
      __m512i a, b;
      decode64_16(planes, base + t * code_size + 64 * c, a, b);
      for (int r = 0; r < R; ++r) {
        const int16_t* q = q16 + r * qs + 64 * c;
        acc[r] = _mm512_dpwssd_epi32(acc[r], a, _mm512_loadu_si512(q));
        acc[r] = _mm512_dpwssd_epi32(acc[r], b, _mm512_loadu_si512(q + 32));
      }
    }
    const size_t lane = t & 7;
    for (int r = 0; r < R; ++r) {
      part[r][lane] = _mm256_add_epi32(_mm512_castsi512_si256(acc[r]), _mm512_extracti64x4_epi64(acc[r], 1));
    }
    if (lane == 7 || t + 1 == n) {
      const size_t t0 = t - lane;
      const size_t m = lane + 1;
      for (int r = 0; r < R; ++r) {
        store_scores(part[r], m, 0, row_scale[r], add, scores + r * ld + t0);
      }
    }
  }
}

void int16_dots(const int16_t* q16, size_t qs, int rows, const float* row_scale, const uint8_t* records,
                size_t code_size, size_t n, const CodeGroup& g, float* scores, size_t ld, bool add) {
  int r = 0;
  for (; r + 4 <= rows; r += 4) {
    int16_dots_tile<4>(q16 + r * qs, qs, row_scale + r, records, code_size, n, g, scores + r * ld, ld, add);
  }
  for (; r < rows; ++r) {
    int16_dots_tile<1>(q16 + r * qs, qs, row_scale + r, records, code_size, n, g, scores + r * ld, ld, add);
  }
}

// Values: two tokens per step, their int16 values interleaved so vpdpwssd's pairs are the two
// tokens' products for one coordinate; accumulator vector k, 32-bit lane l holds coordinate
// 16 (l / 4) + 4k + l % 4 of the 64 (attention_int8_orders.cpp).
template <int R>
void int16_accumulate_tile(const uint16_t* w16, size_t ld, const float* row_scale, const uint8_t* records,
                           size_t code_size, size_t n, const CodeGroup& g, float* acc, size_t as) {
  const Planes16 planes(g.table16);
  const int chunks = g.dims / 64;
  const uint8_t* base = records + g.offset;
  for (int c = 0; c < chunks; ++c) {
    __m512i sum[R][4];
    for (int r = 0; r < R; ++r) {
      for (int k = 0; k < 4; ++k) sum[r][k] = _mm512_setzero_si512();
    }
    for (size_t t = 0; t < n; t += 2) {
      __m512i a0, b0, a1 = _mm512_setzero_si512(), b1 = _mm512_setzero_si512();
      decode64_16(planes, base + t * code_size + 64 * c, a0, b0);
      if (t + 1 < n) decode64_16(planes, base + (t + 1) * code_size + 64 * c, a1, b1);
      const __m512i y[4] = {_mm512_unpacklo_epi16(a0, a1), _mm512_unpackhi_epi16(a0, a1),
                            _mm512_unpacklo_epi16(b0, b1), _mm512_unpackhi_epi16(b0, b1)};
      for (int r = 0; r < R; ++r) {
        int32_t w2;
        std::memcpy(&w2, w16 + r * ld + t, sizeof w2);
        const __m512i w = _mm512_set1_epi32(w2);
        for (int k = 0; k < 4; ++k) sum[r][k] = _mm512_dpwssd_epi32(sum[r][k], w, y[k]);
      }
    }
    for (int r = 0; r < R; ++r) {
      const __m512 scale = _mm512_set1_ps(row_scale[r]);
      float* a = acc + r * as + 64 * c;
      for (int k = 0; k < 4; ++k) {
        _mm512_storeu_ps(a + 16 * k, _mm512_fmadd_ps(scale, _mm512_cvtepi32_ps(sum[r][k]), _mm512_loadu_ps(a + 16 * k)));
      }
    }
  }
}

void int16_accumulate(const uint16_t* w16, size_t ld, int rows, const float* row_scale, const uint8_t* records,
                      size_t code_size, size_t n, const CodeGroup& g, float* acc, size_t as) {
  // Four rows' 16 sums, the 8 plane registers and the decoded pair fill the 32 zmm registers:
  // each pair of tokens is decoded once for four rows.
  int r = 0;
  for (; r + 4 <= rows; r += 4) {
    int16_accumulate_tile<4>(w16 + r * ld, ld, row_scale + r, records, code_size, n, g, acc + r * as, as);
  }
  for (; r + 2 <= rows; r += 2) {
    int16_accumulate_tile<2>(w16 + r * ld, ld, row_scale + r, records, code_size, n, g, acc + r * as, as);
  }
  for (; r < rows; ++r) {
    int16_accumulate_tile<1>(w16 + r * ld, ld, row_scale + r, records, code_size, n, g, acc + r * as, as);
  }
}

void int16_weights(const float* p, size_t ld, int rows, const float* norm, size_t n, uint16_t* w16, float* scale) {
  integer_weights<uint16_t, 2>(p, ld, rows, norm, n, kInt16Max, w16, scale);
}

#endif  // TURBOKV_INT8_VNNI: 8-bit codes

// ---- prefill tiles: a block decoded once for up to kPrefillRows rows ----------------------------
//
// The 8-row kernels above decode a token's codes for every four rows (two for values on AVX2)
// and reduce each row's lanes to a score with horizontal adds, which costs more than the
// products. A prompt chunk's tile, or a decode step's GQA group of four rows or more, shares one
// decoded block among all its rows:
//  - values (both builds): the layout interleave4 makes (a lane is a coordinate, its four bytes
//    four tokens), stored once per block; per four tokens, one broadcast weight dword times the
//    coordinates (512-bit vpdpbusd on VNNI, maddubs + madd on AVX2);
//  - keys (VNNI build; AVX2 for 3-bit groups, whose per-token decode is its dearest): the
//    block's centroid bytes (the kernels' coordinate order, offset by 128 as above) are
//    transposed to [coordinate quad][token] dwords, so a lane is a token and a score needs no
//    reduction: per quad, one broadcast query dword times 16 tokens (8 on AVX2).
// The integer sums are the 8-row kernels', and so are the roundings after them: the same bits.
// Groups wider than kPrefillMaxDims take the 8-row kernels.
constexpr int kPrefillMaxDims = 256;

// R query rows against a block's transposed keys kt (transposed_key_block): scores as
// int8_dots_tile stores them. Each build defines it below.
template <int R>
void prefill_dots_rows(const int8_t* q8, size_t qs, const float* row_scale, const uint32_t* kt, int dims, size_t n,
                       float* scores, size_t ld, bool add);

// A tile's rows against kt: kRows at a time (as many as the build's registers hold sums for),
// the rest (fewer than kRows) in one narrower pass.
template <int kRows>
void prefill_dots_tile(const int8_t* q8, size_t qs, int rows, const float* row_scale, const uint32_t* kt, int dims,
                       size_t n, float* scores, size_t ld, bool add) {
  int r = 0;
  for (; r + kRows <= rows; r += kRows) {
    prefill_dots_rows<kRows>(q8 + r * qs, qs, row_scale + r, kt, dims, n, scores + r * ld, ld, add);
  }
  if constexpr (kRows > 1) {
    if (r < rows) {
      prefill_dots_tile<kRows - 1>(q8 + r * qs, qs, rows - r, row_scale + r, kt, dims, n, scores + r * ld, ld, add);
    }
  }
}

// The block's value centroids in int8_accumulate_tile's layout: chunk c, tokens 4i .. 4i + 3 at
// vb + (c * kBlockTokens / 4 + i) * 32 dwords, dword 8k + l = interleave4's y[k] lane l; one
// chunk of 32 coordinates at a time (the VNNI build decodes two at a time where it can).
template <int B>
void interleaved_value_block256(const uint8_t* records, size_t code_size, size_t n, const CodeGroup& g,
                                uint32_t* vb) {
  const int chunks = g.dims / kInt8Chunk;
  const __m256i table = table16(g.table8, false);
  const uint8_t* base = records + g.offset;
  for (int c = 0; c < chunks; ++c) {
    const bool paired = B == 4 && (c & ~1) + 2 <= chunks;
    for (size_t t = 0; t < n; t += 4) {
      __m256i x[4], y[4];
      for (int i = 0; i < 4; ++i) {
        x[i] = t + i < n ? chunk_codes_of<B>(base + (t + i) * code_size, c, paired) : _mm256_setzero_si256();
      }
      interleave4(x, y);
      uint32_t* out = vb + (static_cast<size_t>(c) * kBlockTokens / 4 + t / 4) * 32;
      for (int k = 0; k < 4; ++k) {
        _mm256_store_si256(reinterpret_cast<__m256i*>(out + 8 * k), _mm256_shuffle_epi8(table, y[k]));
      }
    }
  }
}

#if TURBOKV_INT8_VNNI

// The first two rounds of a 16x16 dword transpose of r (r[i] = row i): b[4g + k], 128-bit
// lane L, holds column 4L + k of rows 4g .. 4g + 3.
TKV_INLINE void transpose_within_lanes(const __m512i* r, __m512i* b) {
  __m512i a[16];
  for (int i = 0; i < 16; i += 2) {
    a[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
    a[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
  }
  for (int g = 0; g < 4; ++g) {
    b[4 * g + 0] = _mm512_unpacklo_epi64(a[4 * g], a[4 * g + 2]);
    b[4 * g + 1] = _mm512_unpackhi_epi64(a[4 * g], a[4 * g + 2]);
    b[4 * g + 2] = _mm512_unpacklo_epi64(a[4 * g + 1], a[4 * g + 3]);
    b[4 * g + 3] = _mm512_unpackhi_epi64(a[4 * g + 1], a[4 * g + 3]);
  }
}

// 16 rows of 16 dwords (r[i] = row i) -> their transpose, in place.
TKV_INLINE void transpose16x16_epi32(__m512i* r) {
  __m512i b[16];
  transpose_within_lanes(r, b);
  for (int k = 0; k < 4; ++k) {
    const __m512i c0 = _mm512_shuffle_i32x4(b[k], b[4 + k], 0x88), c1 = _mm512_shuffle_i32x4(b[k], b[4 + k], 0xdd);
    const __m512i c2 = _mm512_shuffle_i32x4(b[8 + k], b[12 + k], 0x88);
    const __m512i c3 = _mm512_shuffle_i32x4(b[8 + k], b[12 + k], 0xdd);
    r[k] = _mm512_shuffle_i32x4(c0, c2, 0x88);
    r[4 + k] = _mm512_shuffle_i32x4(c1, c3, 0x88);
    r[8 + k] = _mm512_shuffle_i32x4(c0, c2, 0xdd);
    r[12 + k] = _mm512_shuffle_i32x4(c1, c3, 0xdd);
  }
}

// The code bytes of chunks c and c + 1 (c even) of the token at p in one register: chunk c's
// in the low half, c + 1's in the high half, each as chunk_codes_of (paired) gives them. 3 bits:
// the 24 bytes in one masked load, one byte permute giving each 64-bit lane a 3-byte group and
// one vpmultishiftqb, where two codes32<3> take twice that.
template <int B>
TKV_INLINE __m512i codes64(const uint8_t* p, int c) {
  if constexpr (B == 3) {
    const __m512i bytes = _mm512_maskz_loadu_epi8(0xffffffull, p + c * 12);
    const __mmask64 all = ~0ull;
    const __m512i groups = _mm512_maskz_permutexvar_epi8(
        all,
        _mm512_set_epi8(23, 23, 23, 23, 23, 23, 22, 21, 20, 20, 20, 20, 20, 20, 19, 18, 17, 17, 17, 17, 17, 17, 16, 15,
                        14, 14, 14, 14, 14, 14, 13, 12, 11, 11, 11, 11, 11, 11, 10, 9, 8, 8, 8, 8, 8, 8, 7, 6, 5, 5, 5,
                        5, 5, 5, 4, 3, 2, 2, 2, 2, 2, 2, 1, 0),
        bytes);
    const __m512i shifts = _mm512_set1_epi64(0x15120f0c09060300LL);
    return _mm512_and_si512(_mm512_maskz_multishift_epi64_epi8(all, shifts, groups), _mm512_set1_epi8(0x07));
  } else if constexpr (B == 4) {
    const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 16 * c));
    const __m512i both = _mm512_inserti64x4(_mm512_castsi256_si512(x), _mm256_srli_epi16(x, 4), 1);
    return _mm512_and_si512(both, _mm512_set1_epi8(0x0f));
  } else {
    return _mm512_inserti64x4(_mm512_castsi256_si512(chunk_codes_of<B>(p, c, true)),
                              chunk_codes_of<B>(p, c + 1, true), 1);
  }
}

// table16 in every 128-bit lane of a 512-bit register.
TKV_INLINE __m512i table64(const int8_t* table, bool offset) {
  return _mm512_broadcast_i32x4(_mm256_castsi256_si128(table16(table, offset)));
}

// transposed_key_block for groups of whole 64-coordinate halves: each token's half decoded into
// one register (16 quads), sixteen tokens transposed in registers and stored, without the
// round trip through a row buffer.
template <int B>
void transposed_key_block64(const uint8_t* records, size_t code_size, size_t n, const CodeGroup& g, uint32_t* kt) {
  const __m512i table = table64(g.table8, true);
  const uint8_t* base = records + g.offset;
  for (int h = 0; h < g.dims / 64; ++h) {
    for (int t0 = 0; t0 < kBlockTokens; t0 += 16) {
      __m512i r[16];
      for (int i = 0; i < 16; ++i) {
        const size_t t = static_cast<size_t>(t0 + i);
        r[i] = t < n ? _mm512_shuffle_epi8(table, codes64<B>(base + t * code_size, 2 * h)) : _mm512_setzero_si512();
      }
      transpose16x16_epi32(r);
      for (int i = 0; i < 16; ++i) _mm512_store_si512(kt + (16 * h + i) * kBlockTokens + t0, r[i]);
    }
  }
}

// Rows 0..5 of the transpose of 16 rows of 16 dwords whose dwords 6..15 are zero
// (transpose16x16_epi32's first two rounds, then only the 128-bit lanes that hold them):
// r[j] = dword j of each row, j < 6.
TKV_INLINE void transpose16x6_epi32(__m512i* r) {
  __m512i b[16];
  transpose_within_lanes(r, b);  // only lanes 0 and 1 of b hold any dword below 6
  for (int k = 0; k < 4; ++k) {
    const __m512i d0 = _mm512_shuffle_i32x4(b[k], b[4 + k], 0x44);      // lanes 0, 1, 0, 1
    const __m512i d1 = _mm512_shuffle_i32x4(b[8 + k], b[12 + k], 0x44);
    r[k] = _mm512_shuffle_i32x4(d0, d1, 0x88);
    if (k < 2) r[4 + k] = _mm512_shuffle_i32x4(d0, d1, 0xdd);
  }
}

// transposed_key_block for 3-bit groups of whole 64-coordinate halves: sixteen tokens' 24 code
// bytes of a half are transposed as dwords first (6 rows, where their centroids would take 16),
// then each quad's four codes (bits 12q .. 12q + 11) come out of its dword, or of two
// neighbouring ones, with one vpmultishiftqb and the table's vpshufb: about 80 shuffles per
// sixteen tokens and half, where decoding each token and transposing its centroids takes 112.
void transposed_key_block3(const uint8_t* records, size_t code_size, size_t n, const CodeGroup& g, uint32_t* kt) {
  const __m512i table = table64(g.table8, true);
  const __m512i low3 = _mm512_set1_epi8(0x07);
  const __mmask64 all = ~0ull;
  const uint8_t* base = records + g.offset;
  for (int t0 = 0; t0 < kBlockTokens; t0 += 16) {
    const size_t live_tokens = n > static_cast<size_t>(t0) ? std::min<size_t>(16, n - t0) : 0;
    const __mmask16 live = static_cast<__mmask16>((1u << live_tokens) - 1);
    for (int h = 0; h < g.dims / 64; ++h) {
      __m512i r[16];
      for (int i = 0; i < 16; ++i) {
        const size_t t = static_cast<size_t>(t0 + i);
        r[i] = t < n ? _mm512_maskz_loadu_epi32(0x3f, base + t * code_size + 24 * h) : _mm512_setzero_si512();
      }
      transpose16x6_epi32(r);
#pragma GCC unroll 16
      for (int q = 0; q < 16; ++q) {
        const int bit = 12 * q, j = bit / 32;
        int shift = bit % 32;
        __m512i src = r[j];
        if (shift > 20) {  // the quad's 12 bits run into the next dword
          src = _mm512_or_si512(_mm512_srli_epi32(r[j], static_cast<unsigned>(shift)),
                                _mm512_slli_epi32(r[j + 1], static_cast<unsigned>(32 - shift)));
          shift = 0;
        }
        // Byte i of each 64-bit lane (two tokens): bits shift + 3i of the even token's dword,
        // then of the odd one's.
        uint64_t control = 0;
        for (int i = 0; i < 8; ++i) control |= static_cast<uint64_t>((i < 4 ? 0 : 32) + shift + 3 * (i % 4)) << (8 * i);
        const __m512i codes = _mm512_and_si512(
            _mm512_maskz_multishift_epi64_epi8(all, _mm512_set1_epi64(static_cast<long long>(control)), src), low3);
        _mm512_store_si512(kt + (16 * h + q) * kBlockTokens + t0,
                           _mm512_maskz_mov_epi32(live, _mm512_shuffle_epi8(table, codes)));
      }
    }
  }
}

// The block's key centroids (offset by 128) as kt[quad * kBlockTokens + t] dwords: token t's
// bytes 4 quad .. 4 quad + 3 in the order token_dots multiplies them; tokens from n on are zero.
template <int B>
void transposed_key_block(const uint8_t* records, size_t code_size, size_t n, const CodeGroup& g,
                          uint32_t* kt) {
  if (g.dims % 64 == 0) {
    if constexpr (B == 3) transposed_key_block3(records, code_size, n, g, kt);
    else transposed_key_block64<B>(records, code_size, n, g, kt);
    return;
  }
  const int chunks = g.dims / kInt8Chunk;
  const int row_bytes = (g.dims + 63) / 64 * 64;  // whole 16-dword rows for the transpose
  alignas(64) uint8_t rows[kBlockTokens * kPrefillMaxDims];
  const __m256i table = table16(g.table8, true);
  const uint8_t* base = records + g.offset;
  for (size_t t = 0; t < static_cast<size_t>(kBlockTokens); ++t) {
    uint8_t* out = rows + t * row_bytes;
    if (row_bytes > g.dims) std::memset(out + g.dims, 0, row_bytes - g.dims);
    if (t >= n) {
      std::memset(out, 0, g.dims);
      continue;
    }
    const uint8_t* rec = base + t * code_size;
    int c = 0;
    if constexpr (B == 4) {
      const __m256i nibble = _mm256_set1_epi8(0x0f);
      for (; c + 2 <= chunks; c += 2) {
        const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rec + 16 * c));
        _mm256_store_si256(reinterpret_cast<__m256i*>(out + kInt8Chunk * c),
                           _mm256_shuffle_epi8(table, _mm256_and_si256(x, nibble)));
        _mm256_store_si256(reinterpret_cast<__m256i*>(out + kInt8Chunk * (c + 1)),
                           _mm256_shuffle_epi8(table, _mm256_and_si256(_mm256_srli_epi16(x, 4), nibble)));
      }
    }
    for (; c < chunks; ++c) {
      _mm256_store_si256(reinterpret_cast<__m256i*>(out + kInt8Chunk * c),
                         _mm256_shuffle_epi8(table, codes32<B>(rec + c * 4 * B)));
    }
  }
  const int quads = g.dims / 4;
  for (int t0 = 0; t0 < kBlockTokens; t0 += 16) {
    for (int q0 = 0; q0 < quads; q0 += 16) {
      __m512i r[16];
      for (int i = 0; i < 16; ++i) r[i] = _mm512_load_si512(rows + (t0 + i) * row_bytes + 4 * q0);
      transpose16x16_epi32(r);
      for (int i = 0; i < 16 && q0 + i < quads; ++i) _mm512_store_si512(kt + (q0 + i) * kBlockTokens + t0, r[i]);
    }
  }
}

// R rows against the transposed block: scores as int8_dots_tile stores them (store_scores).
template <int R>
void prefill_dots_rows(const int8_t* q8, size_t qs, const float* row_scale, const uint32_t* kt, int dims, size_t n,
                       float* scores, size_t ld, bool add) {
  __m512i acc[R][4];
  for (int r = 0; r < R; ++r) {
    for (int v = 0; v < 4; ++v) acc[r][v] = _mm512_setzero_si512();
  }
  for (int j = 0; j < dims / 4; ++j) {
    const uint32_t* k = kt + j * kBlockTokens;
    const __m512i k0 = _mm512_load_si512(k), k1 = _mm512_load_si512(k + 16);
    const __m512i k2 = _mm512_load_si512(k + 32), k3 = _mm512_load_si512(k + 48);
    for (int r = 0; r < R; ++r) {
      int32_t q4;
      std::memcpy(&q4, q8 + r * qs + 4 * j, sizeof q4);
      const __m512i q = _mm512_set1_epi32(q4);
      acc[r][0] = _mm512_dpbusd_epi32(acc[r][0], k0, q);
      acc[r][1] = _mm512_dpbusd_epi32(acc[r][1], k1, q);
      acc[r][2] = _mm512_dpbusd_epi32(acc[r][2], k2, q);
      acc[r][3] = _mm512_dpbusd_epi32(acc[r][3], k3, q);
    }
  }
  for (int r = 0; r < R; ++r) {
    const __m512i start = _mm512_set1_epi32(offset_start(q8 + r * qs, dims));
    const __m512 scale = _mm512_set1_ps(row_scale[r]);
    for (size_t v = 0; v < 4 && 16 * v < n; ++v) {
      const size_t left = n - 16 * v;
      const __mmask16 mask = left >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << left) - 1);
      float* dst = scores + r * ld + 16 * v;
      const __m512 f = _mm512_cvtepi32_ps(_mm512_add_epi32(acc[r][v], start));
      _mm512_mask_storeu_ps(dst, mask, add ? _mm512_fmadd_ps(f, scale, _mm512_maskz_loadu_ps(mask, dst))
                                           : _mm512_mul_ps(f, scale));
    }
  }
}

template <int B>
void prefill_int8_dots_bits(const int8_t* q8, size_t qs, int rows, const float* row_scale, const uint8_t* records,
                            size_t code_size, size_t n, const CodeGroup& g, float* scores, size_t ld, bool add) {
  alignas(64) uint32_t kt[kPrefillMaxDims / 4 * kBlockTokens];
  transposed_key_block<B>(records, code_size, n, g, kt);
  // Six rows: 24 sums, 4 key registers and the broadcast query fill 29 of the 32 registers.
  prefill_dots_tile<6>(q8, qs, rows, row_scale, kt, g.dims, n, scores, ld, add);
}

void prefill_int8_dots(const int8_t* q8, size_t qs, int rows, const float* row_scale, const uint8_t* records,
                       size_t code_size, size_t n, const CodeGroup& g, float* scores, size_t ld, bool add) {
  if (g.dims > kPrefillMaxDims || n > static_cast<size_t>(kBlockTokens)) {
    int8_dots(q8, qs, rows, row_scale, records, code_size, n, g, scores, ld, add);
    return;
  }
  switch (g.bits) {
    case 2: prefill_int8_dots_bits<2>(q8, qs, rows, row_scale, records, code_size, n, g, scores, ld, add); break;
    case 3: prefill_int8_dots_bits<3>(q8, qs, rows, row_scale, records, code_size, n, g, scores, ld, add); break;
    default: prefill_int8_dots_bits<4>(q8, qs, rows, row_scale, records, code_size, n, g, scores, ld, add); break;
  }
}

// interleaved_value_block256, two chunks at a time (one per 256-bit half) where the group has
// an even number of them.
template <int B>
void interleaved_value_block(const uint8_t* records, size_t code_size, size_t n, const CodeGroup& g, uint32_t* vb) {
  const int chunks = g.dims / kInt8Chunk;
  if (chunks % 2 == 0) {
    // Two chunks at a time, one per 256-bit half (the unpacks work within 128-bit lanes).
    const __m512i table = table64(g.table8, false);
    const uint8_t* base = records + g.offset;
    for (int c = 0; c < chunks; c += 2) {
      for (size_t t = 0; t < n; t += 4) {
        __m512i x[4];
        for (int i = 0; i < 4; ++i) {
          x[i] = t + i < n ? codes64<B>(base + (t + i) * code_size, c) : _mm512_setzero_si512();
        }
        const __m512i l01 = _mm512_unpacklo_epi8(x[0], x[1]), h01 = _mm512_unpackhi_epi8(x[0], x[1]);
        const __m512i l23 = _mm512_unpacklo_epi8(x[2], x[3]), h23 = _mm512_unpackhi_epi8(x[2], x[3]);
        const __m512i y[4] = {_mm512_unpacklo_epi16(l01, l23), _mm512_unpackhi_epi16(l01, l23),
                              _mm512_unpacklo_epi16(h01, h23), _mm512_unpackhi_epi16(h01, h23)};
        uint32_t* lo = vb + (static_cast<size_t>(c) * kBlockTokens / 4 + t / 4) * 32;
        uint32_t* hi = lo + kBlockTokens / 4 * 32;
        for (int k = 0; k < 4; ++k) {
          const __m512i v = _mm512_shuffle_epi8(table, y[k]);
          _mm256_store_si256(reinterpret_cast<__m256i*>(lo + 8 * k), _mm512_castsi512_si256(v));
          _mm256_store_si256(reinterpret_cast<__m256i*>(hi + 8 * k), _mm512_extracti64x4_epi64(v, 1));
        }
      }
    }
    return;
  }
  interleaved_value_block256<B>(records, code_size, n, g, vb);
}

// R rows: per chunk two vectors of sums per row over the block's tokens, then
// acc = fma(row_scale, sum, acc) as int8_accumulate_tile.
template <int R>
void prefill_accumulate_rows(const uint8_t* w8, size_t ld, const float* row_scale, const uint32_t* vb, int chunks,
                             size_t n, float* acc, size_t as) {
  const size_t quads = (n + 3) / 4;
  for (int c = 0; c < chunks; ++c) {
    __m512i sum[R][2];
    for (int r = 0; r < R; ++r) sum[r][0] = sum[r][1] = _mm512_setzero_si512();
    const uint32_t* v = vb + static_cast<size_t>(c) * kBlockTokens / 4 * 32;
    for (size_t i = 0; i < quads; ++i) {
      const __m512i v0 = _mm512_load_si512(v + 32 * i), v1 = _mm512_load_si512(v + 32 * i + 16);
      for (int r = 0; r < R; ++r) {
        int32_t w4;
        std::memcpy(&w4, w8 + r * ld + 4 * i, sizeof w4);
        const __m512i w = _mm512_set1_epi32(w4);
        sum[r][0] = _mm512_dpbusd_epi32(sum[r][0], w, v0);
        sum[r][1] = _mm512_dpbusd_epi32(sum[r][1], w, v1);
      }
    }
    for (int r = 0; r < R; ++r) {
      const __m512 scale = _mm512_set1_ps(row_scale[r]);
      float* a = acc + r * as + kInt8Chunk * c;
      for (int h = 0; h < 2; ++h) {
        _mm512_storeu_ps(a + 16 * h,
                         _mm512_fmadd_ps(scale, _mm512_cvtepi32_ps(sum[r][h]), _mm512_loadu_ps(a + 16 * h)));
      }
    }
  }
}

#else
// ---- AVX2 key tiles: 3-bit groups of whole 64-coordinate halves ----

// 8 rows of 8 dwords (r[i] = row i) -> their transpose, in place.
TKV_INLINE void transpose8x8_epi32(__m256i* r) {
  __m256i a[8], b[8];
  for (int i = 0; i < 8; i += 2) {
    a[i] = _mm256_unpacklo_epi32(r[i], r[i + 1]);
    a[i + 1] = _mm256_unpackhi_epi32(r[i], r[i + 1]);
  }
  for (int g = 0; g < 2; ++g) {  // b[4g + k], 128-bit lane L: column 4L + k of rows 4g .. 4g + 3
    b[4 * g + 0] = _mm256_unpacklo_epi64(a[4 * g], a[4 * g + 2]);
    b[4 * g + 1] = _mm256_unpackhi_epi64(a[4 * g], a[4 * g + 2]);
    b[4 * g + 2] = _mm256_unpacklo_epi64(a[4 * g + 1], a[4 * g + 3]);
    b[4 * g + 3] = _mm256_unpackhi_epi64(a[4 * g + 1], a[4 * g + 3]);
  }
  for (int k = 0; k < 4; ++k) {
    r[k] = _mm256_permute2x128_si256(b[k], b[4 + k], 0x20);
    r[4 + k] = _mm256_permute2x128_si256(b[k], b[4 + k], 0x31);
  }
}

// Eight tokens' 3-bit codes of one 64-coordinate half as table centroids, a lane a token, handed
// to emit(s, quad) as each is made (a callback, so that no array of all sixteen has to live on
// the stack): lane i of quad s holds token t0 + i's four centroids that int8_dots multiplies
// with query bytes 4s .. 4s + 3 of the half (codes32<3>'s order: in each chunk the groups of
// eight codes as 0, 2, 1, 3). Per token, two loads and a byte shuffle put its eight 3-byte groups in eight
// dwords; an 8x8 transpose gives each group's dword for eight tokens; per group, shifts and a
// word blend put each of its two quads' four codes in four bytes, and the table's vpshufb makes
// them centroids: ~20 instructions per token and half, where codes32<3>, the table and a
// transpose take ~30. Lanes of tokens from n on hold table[0].
template <typename Emit>
TKV_INLINE void centroid_quads3(const uint8_t* base, size_t code_size, size_t t0, size_t n, int h, __m256i table,
                                Emit&& emit) {
  // Low lane: bytes 0-15 of the 24, groups 0-3 at bytes 0, 3, 6, 9; high lane: bytes 8-23,
  // groups 4-7 at its bytes 4, 7, 10, 13. Each group to a dword, its top byte zero.
  const __m256i spread = _mm256_setr_epi8(0, 1, 2, -1, 3, 4, 5, -1, 6, 7, 8, -1, 9, 10, 11, -1,  //
                                          4, 5, 6, -1, 7, 8, 9, -1, 10, 11, 12, -1, 13, 14, 15, -1);
  const __m256i first = _mm256_set1_epi32(0x00070007), second = _mm256_set1_epi32(0x07000700);
  static constexpr int kGroupAt[4] = {0, 2, 1, 3};  // a chunk's group gc: its bytes 8 kGroupAt[gc] ..
  __m256i r[8];
  for (size_t i = 0; i < 8; ++i) {
    if (t0 + i >= n) {
      r[i] = _mm256_setzero_si256();
      continue;
    }
    const uint8_t* p = base + (t0 + i) * code_size + 24 * h;
    const __m256i bytes =
        _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))),
                                _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 8)), 1);
    r[i] = _mm256_shuffle_epi8(bytes, spread);
  }
  transpose8x8_epi32(r);  // r[G] lane i: group G's 24 bits of token t0 + i
#pragma GCC unroll 8
  for (int G = 0; G < 8; ++G) {
    const __m256i x = r[G];
    for (int a = 0; a < 2; ++a) {
      // Quad a: codes 4a .. 4a + 3 at bits 12a + 3i; two to each 16-bit word (bits 0-2 and 3-5),
      // then each to its own byte.
      const __m256i w = a == 0 ? _mm256_blend_epi16(x, _mm256_slli_epi32(x, 10), 0xaa)
                               : _mm256_blend_epi16(_mm256_srli_epi32(x, 12), _mm256_srli_epi32(x, 2), 0xaa);
      const __m256i codes =
          _mm256_or_si256(_mm256_and_si256(w, first), _mm256_and_si256(_mm256_slli_epi16(w, 5), second));
      emit(8 * (G / 4) + 2 * kGroupAt[G % 4] + a, _mm256_shuffle_epi8(table, codes));
    }
  }
}

// The block's key centroids (offset by 128) as kt[slot * kBlockTokens + t] dwords for the
// tokens t < n rounded up to 8: slot s holds token t's four centroids that int8_dots multiplies
// with query bytes 4s .. 4s + 3.
void transposed_key_block3_256(const uint8_t* records, size_t code_size, size_t n, const CodeGroup& g,
                               uint32_t* kt) {
  const __m256i table = table16(g.table8, true);
  for (size_t t0 = 0; t0 < n; t0 += 8) {
    for (int h = 0; h < g.dims / 64; ++h) {
      centroid_quads3(records + g.offset, code_size, t0, n, h, table, [&](int s, __m256i quad) {
        _mm256_store_si256(reinterpret_cast<__m256i*>(kt + (16 * h + s) * kBlockTokens + t0), quad);
      });
    }
  }
}

// R rows against the eight tokens from t0 of the transposed block: a lane is a token, so a
// score needs no reduction; stored as int8_dots_tile stores them (store_lanes). One group of
// eight at a time: with two (16 tokens a key load) GCC spilled two of the eight sums to the
// stack every quad and moved the rest between registers, and tq4-i8 / dense16 at 32K on the
// AVX2 table was lower in 15 of 16 interleaved pairs, by ~5% at the median (docs/history/
// benchmarks-notebook.md, "Issue 29 on a Zen 5").
template <int R>
TKV_INLINE void prefill_dots_tokens(const int8_t* q8, size_t qs, const float* row_scale, const int32_t* start,
                                    const uint32_t* kt, int dims, size_t t0, size_t n, float* scores, size_t ld,
                                    bool add) {
  __m256i acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_si256();
  for (int j = 0; j < dims / 4; ++j) {
    const __m256i k = _mm256_load_si256(reinterpret_cast<const __m256i*>(kt + j * kBlockTokens + t0));
    for (int r = 0; r < R; ++r) {
      int32_t q4;
      std::memcpy(&q4, q8 + r * qs + 4 * j, sizeof q4);
      acc[r] = dot_u8s8(acc[r], k, _mm256_set1_epi32(q4));
    }
  }
  for (int r = 0; r < R; ++r) {
    const __m256 f = _mm256_cvtepi32_ps(_mm256_add_epi32(acc[r], _mm256_set1_epi32(start[r])));
    store_lanes(f, std::min<size_t>(8, n - t0), row_scale[r], add, scores + r * ld + t0);
  }
}

template <int R>
void prefill_dots_rows(const int8_t* q8, size_t qs, const float* row_scale, const uint32_t* kt, int dims, size_t n,
                       float* scores, size_t ld, bool add) {
  int32_t start[R];
  for (int r = 0; r < R; ++r) start[r] = offset_start(q8 + r * qs, dims);
  for (size_t t0 = 0; t0 < n; t0 += 8) prefill_dots_tokens<R>(q8, qs, row_scale, start, kt, dims, t0, n, scores, ld, add);
}

// int8_dots for a tile's rows: 3-bit groups of whole 64-coordinate halves through the transposed
// block (four rows' sums, a key register and the broadcast query byte quads fit AVX2's 16
// registers); other groups take the per-token kernel, whose decode is cheap at 2 and 4 bits.
void prefill_int8_dots(const int8_t* q8, size_t qs, int rows, const float* row_scale, const uint8_t* records,
                       size_t code_size, size_t n, const CodeGroup& g, float* scores, size_t ld, bool add) {
  if (g.bits != 3 || g.dims % 64 != 0 || g.dims > kPrefillMaxDims || n > static_cast<size_t>(kBlockTokens)) {
    int8_dots(q8, qs, rows, row_scale, records, code_size, n, g, scores, ld, add);
    return;
  }
  alignas(32) uint32_t kt[kPrefillMaxDims / 4 * kBlockTokens];
  transposed_key_block3_256(records, code_size, n, g, kt);
  prefill_dots_tile<4>(q8, qs, rows, row_scale, kt, g.dims, n, scores, ld, add);
}

// ---- AVX2 value tiles ----

// interleaved_value_block256's layout; 3-bit groups of whole 64-coordinate halves from
// centroid_quads3: y[k] of four tokens holds, in its low half, quad k of their chunk's centroid
// bytes and in its high half quad k + 4, a 32-bit lane per coordinate and a byte per token: per
// quad one byte shuffle (a 4x4 transpose in each 128-bit lane), per y one lane permute. A
// chunk's quads come as 0, 1, 4, 5, 2, 3, 6, 7 (centroid_quads3's group order), so each pair is
// stored as soon as its second quad comes: with all sixteen kept first, GCC spilled them.
template <int B>
void interleaved_value_block(const uint8_t* records, size_t code_size, size_t n, const CodeGroup& g, uint32_t* vb) {
  if (B != 3 || g.dims % 64 != 0) {
    interleaved_value_block256<B>(records, code_size, n, g, vb);
    return;
  }
  const __m256i table = table16(g.table8, false);
  const __m256i transpose4x4 = _mm256_setr_epi8(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15,  //
                                                0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  for (size_t t0 = 0; t0 < n; t0 += 8) {
    for (int h = 0; h < g.dims / 64; ++h) {
      __m256i low[4];  // a chunk's quads 0..3 until quad k + 4 comes
      centroid_quads3(records + g.offset, code_size, t0, n, h, table, [&](int s, __m256i quad) {
        const int k = s % 8;
        quad = _mm256_shuffle_epi8(quad, transpose4x4);
        if (k < 4) {
          low[k] = quad;
          return;
        }
        const size_t c = static_cast<size_t>(2 * h + s / 8);
        uint32_t* out = vb + (c * kBlockTokens / 4 + t0 / 4) * 32 + 8 * (k - 4);  // tokens t0 .., then t0 + 4 ..
        _mm256_store_si256(reinterpret_cast<__m256i*>(out), _mm256_permute2x128_si256(low[k - 4], quad, 0x20));
        _mm256_store_si256(reinterpret_cast<__m256i*>(out + 32), _mm256_permute2x128_si256(low[k - 4], quad, 0x31));
      });
    }
  }
}

// R rows: per chunk four vectors of sums per row over the block's tokens (maddubs + madd, as
// dot_u8s8: the weights are <= 127), then acc = fma(row_scale, sum, acc) as int8_accumulate_tile.
template <int R>
void prefill_accumulate_rows(const uint8_t* w8, size_t ld, const float* row_scale, const uint32_t* vb, int chunks,
                             size_t n, float* acc, size_t as) {
  const size_t quads = (n + 3) / 4;
  for (int c = 0; c < chunks; ++c) {
    __m256i sum[R][4];
    for (int r = 0; r < R; ++r) {
      for (int k = 0; k < 4; ++k) sum[r][k] = _mm256_setzero_si256();
    }
    const uint32_t* v = vb + static_cast<size_t>(c) * kBlockTokens / 4 * 32;
    for (size_t i = 0; i < quads; ++i) {
      for (int r = 0; r < R; ++r) {
        int32_t w4;
        std::memcpy(&w4, w8 + r * ld + 4 * i, sizeof w4);
        const __m256i w = _mm256_set1_epi32(w4);
        for (int k = 0; k < 4; ++k) {
          sum[r][k] = dot_u8s8(sum[r][k], w, _mm256_load_si256(reinterpret_cast<const __m256i*>(v + 32 * i + 8 * k)));
        }
      }
    }
    for (int r = 0; r < R; ++r) {
      const __m256 scale = _mm256_set1_ps(row_scale[r]);
      float* a = acc + r * as + kInt8Chunk * c;
      for (int k = 0; k < 4; ++k) {
        _mm256_storeu_ps(a + 8 * k, _mm256_fmadd_ps(scale, _mm256_cvtepi32_ps(sum[r][k]), _mm256_loadu_ps(a + 8 * k)));
      }
    }
  }
}
#endif

template <int B>
void prefill_int8_accumulate_bits(const uint8_t* w8, size_t ld, int rows, const float* row_scale,
                                  const uint8_t* records, size_t code_size, size_t n, const CodeGroup& g,
                                  float* acc, size_t as) {
  alignas(64) uint32_t vb[kPrefillMaxDims / 4 * kBlockTokens];
  interleaved_value_block<B>(records, code_size, n, g, vb);
  const int chunks = g.dims / kInt8Chunk;
  // VNNI: twelve rows' 24 sums, two value registers and the broadcast weights fill the 32
  // registers. AVX2: two rows' 8 sums (its 16 registers; the values are read from L1).
  constexpr int kRows = TURBOKV_INT8_VNNI ? 12 : 2;
  int r = 0;
  for (; r + kRows <= rows; r += kRows) {
    prefill_accumulate_rows<kRows>(w8 + r * ld, ld, row_scale + r, vb, chunks, n, acc + r * as, as);
  }
  if constexpr (TURBOKV_INT8_VNNI) {
    for (; r + 4 <= rows; r += 4) {
      prefill_accumulate_rows<4>(w8 + r * ld, ld, row_scale + r, vb, chunks, n, acc + r * as, as);
    }
  }
  for (; r < rows; ++r) prefill_accumulate_rows<1>(w8 + r * ld, ld, row_scale + r, vb, chunks, n, acc + r * as, as);
}

void prefill_int8_accumulate(const uint8_t* w8, size_t ld, int rows, const float* row_scale, const uint8_t* records,
                             size_t code_size, size_t n, const CodeGroup& g, float* acc, size_t as) {
  if (g.dims > kPrefillMaxDims || n > static_cast<size_t>(kBlockTokens)) {
    int8_accumulate(w8, ld, rows, row_scale, records, code_size, n, g, acc, as);
    return;
  }
  switch (g.bits) {
    case 2: prefill_int8_accumulate_bits<2>(w8, ld, rows, row_scale, records, code_size, n, g, acc, as); break;
    case 3: prefill_int8_accumulate_bits<3>(w8, ld, rows, row_scale, records, code_size, n, g, acc, as); break;
    default: prefill_int8_accumulate_bits<4>(w8, ld, rows, row_scale, records, code_size, n, g, acc, as); break;
  }
}

// ---- this build's kernels, as the SIMD tables take them ------------------------------------

// The including file returns this from its int8_kernels_*(): the 8-bit (int16) kernels and the
// coordinate orders of the VNNI build, or the AVX2 orders and no int16 kernels.
inline Int8Kernels this_build_kernels() {
#if TURBOKV_INT8_VNNI
  return Int8Kernels{int8_dots,  int8_accumulate,  int8_weights,  int8_vnni_order,
                     int16_dots, int16_accumulate, int16_weights, int16_vnni_order,
                     kInt8WeightLevels, prefill_int8_dots, prefill_int8_accumulate};
#else
  return Int8Kernels{int8_dots, int8_accumulate, int8_weights, int8_avx2_order,
                     nullptr,   nullptr,         nullptr,      nullptr,
                     kInt8WeightLevels, prefill_int8_dots, prefill_int8_accumulate};
#endif
}

#undef TKV_INLINE
