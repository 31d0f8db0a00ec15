// The cpuid-based feature check that gates the hand-written AVX2 kernels agrees with the
// compiler's own (GCC's __builtin_cpu_supports), and the kernel tables follow it.
#include <gtest/gtest.h>

#include "attention/attention_kernels.hpp"
#include "turbokv/cpu_features.hpp"

TEST(CpuFeatures, AgreesWithCompilerBuiltin) {
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
  __builtin_cpu_init();
  const bool builtin = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                       __builtin_cpu_supports("f16c");
  EXPECT_EQ(turbokv::cpu_has_avx2_fma_f16c(), builtin);
#else
  GTEST_SKIP() << "no GCC __builtin_cpu_supports(\"f16c\") to compare with";
#endif
}

TEST(CpuFeatures, AttentionTableFollowsTheCheck) {
  EXPECT_EQ(turbokv::attn::avx2_kernel_table() != nullptr, turbokv::cpu_has_avx2_fma_f16c());
  EXPECT_EQ(turbokv::attn::avx_vnni_kernel_table() != nullptr, turbokv::cpu_has_avx_vnni());
}

// AVX-VNNI against the compiler's own check (GCC 11 and later know the name).
TEST(CpuFeatures, AvxVnniAgreesWithCompilerBuiltin) {
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 11
  __builtin_cpu_init();
  EXPECT_EQ(turbokv::cpu_has_avx_vnni(), __builtin_cpu_supports("avxvnni") != 0);
#else
  GTEST_SKIP() << "no GCC __builtin_cpu_supports(\"avxvnni\") to compare with";
#endif
}
