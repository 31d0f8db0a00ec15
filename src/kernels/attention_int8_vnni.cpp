// The integer attention kernels (attention_int8_simd.hpp) with AVX512-VNNI's vpdpbusd on 256-bit
// registers (Ice Lake and later Xeons, Zen 4), chosen at run time. vpdpbusd multiplies unsigned
// by signed bytes and sums four products into a 32-bit lane in one instruction, where AVX2 needs
// maddubs + madd (+ a sign flip against 4-bit keys): integer sums either way, so the same bits.
// 3-bit codes unpack with AVX512VBMI's vpmultishiftqb (every CPU with VNNI but Cascade Lake has
// it; the table asks for both).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "attention/attention_kernels.hpp"
#include "kernels/attention_int8_kernels.hpp"
#include "turbokv/cpu_features.hpp"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

// GCC 12's AVX-512 intrinsics pass an undefined vector as the merge source of their unmasked
// forms (_mm512_extracti64x4_epi64, _mm512_cvtepi16_epi8, _mm512_inserti64x4, ...), which
// -Wmaybe-uninitialized / -Wuninitialized report in every caller; nothing here reads an
// undefined lane.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

TURBOKV_TARGET_BEGIN("avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni,avx512vbmi")

namespace turbokv::attn {
namespace {
#define TURBOKV_INT8_VNNI 1
#include "kernels/attention_int8_simd.hpp"
#undef TURBOKV_INT8_VNNI
}  // namespace

const Int8Kernels& int8_kernels_vnni() {
  static const Int8Kernels kernels = this_build_kernels();
  return kernels;
}

}  // namespace turbokv::attn

TURBOKV_TARGET_END

#endif
