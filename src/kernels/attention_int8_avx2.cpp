// The integer attention kernels (attention_int8_simd.hpp) for AVX2: products by maddubs + madd.
// Their order of coordinates: int8_avx2_order (attention_int8_orders.cpp).
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

TURBOKV_TARGET_BEGIN("avx2,fma,f16c")

namespace turbokv::attn {
namespace {
#define TURBOKV_INT8_VNNI 0
#include "kernels/attention_int8_simd.hpp"
#undef TURBOKV_INT8_VNNI
}  // namespace

const Int8Kernels& int8_kernels_avx2() {
  static const Int8Kernels kernels = this_build_kernels();
  return kernels;
}

}  // namespace turbokv::attn

TURBOKV_TARGET_END

#endif
