// Internal: the body of matmul_rowwise's four-activation Q8_0 kernel with vpdpbusd on 256-bit
// registers, included twice by matmul_rowwise_vnni.cpp inside a target region: once for the
// EVEX form (AVX512-VNNI with AVX512VL), once for the VEX form (AVX-VNNI). The includer defines
// TKV_DPBUSD (the intrinsic) and opens the namespace the functions go into. No include guard:
// each inclusion is a separate copy.

// acc += (dw * dx) * sum(x * w), as block_step in the AVX2 kernel (dw broadcast once per block,
// dx broadcast from memory).
inline __m256 block_step(__m256 acc, __m256i start, __m256i w, const uint8_t* xb, __m256 dw, const float* dx) {
  const __m256i x_offset = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb + 2));
  const __m256 d = _mm256_mul_ps(dw, _mm256_broadcast_ss(dx));
  return _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(TKV_DPBUSD(start, x_offset, w)), acc);
}

inline void block_x4(const uint8_t* row, int64_t blk, const uint8_t* const* xu, const float* const* xscale,
                     __m256& c0, __m256& c1, __m256& c2, __m256& c3) {
  const size_t o = static_cast<size_t>(blk) * 34;
  const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + o + 2));
  const __m256i offset_sums = TKV_DPBUSD(_mm256_setzero_si256(), _mm256_set1_epi8(static_cast<char>(0x80)), w);
  const __m256i start = _mm256_sub_epi32(_mm256_setzero_si256(), offset_sums);
  const __m256 dw = _mm256_set1_ps(avx2::load_half(row + o));
  c0 = block_step(c0, start, w, xu[0] + o, dw, xscale[0] + blk);
  c1 = block_step(c1, start, w, xu[1] + o, dw, xscale[1] + blk);
  c2 = block_step(c2, start, w, xu[2] + o, dw, xscale[2] + blk);
  c3 = block_step(c3, start, w, xu[3] + o, dw, xscale[3] + blk);
}

void dot_q8_x4_q8_0(const uint8_t* row, const uint8_t* const* xu, const float* const* xscale, int64_t cols,
                    float* out) {
  // Even and odd blocks in separate accumulators, as the AVX2 kernel and dot_q8_row_q8_0.
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  __m256 b0 = a0, b1 = a0, b2 = a0, b3 = a0;
  const int64_t blocks = cols / 32;
  int64_t blk = 0;
  for (; blk + 2 <= blocks; blk += 2) {
    avx2::prefetch_weights(row + blk * 34);
    block_x4(row, blk, xu, xscale, a0, a1, a2, a3);
    block_x4(row, blk + 1, xu, xscale, b0, b1, b2, b3);
  }
  if (blk < blocks) block_x4(row, blk, xu, xscale, a0, a1, a2, a3);
  out[0] = avx2::hsum(_mm256_add_ps(a0, b0));
  out[1] = avx2::hsum(_mm256_add_ps(a1, b1));
  out[2] = avx2::hsum(_mm256_add_ps(a2, b2));
  out[3] = avx2::hsum(_mm256_add_ps(a3, b3));
}
