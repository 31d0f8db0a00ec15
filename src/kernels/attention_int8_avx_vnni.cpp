// The integer attention kernels (attention_int8_simd.hpp) for AVX2 CPUs with AVX-VNNI (Alder
// Lake and later Intel cores without AVX-512): the AVX2 build's kernels, orders and limits, with
// each maddubs + madd + add replaced by one VEX vpdpbusd. The AVX2 callers keep every maddubs
// pair within 32767, so the sums, and the results, are the AVX2 table's bit for bit.
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

TURBOKV_TARGET_BEGIN("avx2,fma,f16c,avxvnni")

namespace turbokv::attn {
namespace {
#define TURBOKV_INT8_VNNI 0
#define TURBOKV_INT8_AVX_VNNI 1
#include "kernels/attention_int8_simd.hpp"
#undef TURBOKV_INT8_AVX_VNNI
#undef TURBOKV_INT8_VNNI
}  // namespace

const Int8Kernels& int8_kernels_avx_vnni() {
  static const Int8Kernels kernels = this_build_kernels();
  return kernels;
}

}  // namespace turbokv::attn

TURBOKV_TARGET_END

#endif
