// matmul_rowwise's four-activation Q8_0 kernel with vpdpbusd on 256-bit registers, for CPUs that
// have it (chosen at run time): in the EVEX encoding of AVX512-VNNI with AVX512VL (Ice Lake and
// later Xeons, Zen 4 and 5) and in the VEX encoding of AVX-VNNI (Alder Lake and later Intel
// client cores, which lack AVX-512). One body (matmul_rowwise_vnni_x4.hpp), compiled for each.
//
// Same bits as the AVX2 kernel (matmul_rowwise_avx2.cpp): there, each block yields eight int32
// sums of four byte products (maddubs then madd); here vpdpbusd yields the same eight sums, and
// integer sums are exact either way. The float operations after them are the AVX2 kernel's, in
// its order. So which kernel a machine runs changes no result (tests/engine/test_batch_forward.cpp
// and test_matmul_rowwise_tiles.cpp compare them bit for bit).
//
// vpdpbusd multiplies unsigned by signed bytes. The activations come offset by 128 (x ^ 0x80,
// made once per call), and each block's accumulators start at -128 * (sum of each group of four
// weights), made once per weight block for the four activations:
// sum((x + 128) * w) - 128 * sum(w) = sum(x * w), one instruction per block and activation
// where AVX2 needs three (two sign flips folded into maddubs, then madd).
#include "engine/tensor/matmul_kernels.hpp"

#include "engine/tensor/matmul_avx2_common.hpp"
#include "turbokv/cpu_features.hpp"

#if TURBOKV_HAVE_AVX2_KERNELS

// Each copy is compiled for its own instruction set only: the VEX copy must not pick up
// EVEX-only instructions or registers, which an AVX-VNNI CPU without AVX-512 lacks. The AVX2
// helpers (narrower target attribute) inline into both.
TURBOKV_TARGET_BEGIN("avx2,fma,f16c,avx512f,avx512vl,avx512vnni")
namespace turbokv::engine::detail::evex_vnni {
#define TKV_DPBUSD _mm256_dpbusd_epi32
#include "engine/tensor/matmul_rowwise_vnni_x4.hpp"
#undef TKV_DPBUSD
}  // namespace turbokv::engine::detail::evex_vnni
TURBOKV_TARGET_END

TURBOKV_TARGET_BEGIN("avx2,fma,f16c,avxvnni")
namespace turbokv::engine::detail::avx_vnni {
#define TKV_DPBUSD _mm256_dpbusd_avx_epi32
#include "engine/tensor/matmul_rowwise_vnni_x4.hpp"
#undef TKV_DPBUSD
}  // namespace turbokv::engine::detail::avx_vnni
TURBOKV_TARGET_END

namespace turbokv::engine::detail {

bool vnni_available() { return cpu_has_avx512_vnni_vl(); }

DotQ8x4Fn vnni_x4_kernel(bool evex) {
  if (evex && cpu_has_avx512_vnni_vl()) return evex_vnni::dot_q8_x4_q8_0;
  if (cpu_has_avx_vnni()) return avx_vnni::dot_q8_x4_q8_0;
  return nullptr;
}

}  // namespace turbokv::engine::detail

#else

namespace turbokv::engine::detail {
bool vnni_available() { return false; }
DotQ8x4Fn vnni_x4_kernel(bool) { return nullptr; }
}  // namespace turbokv::engine::detail

#endif
