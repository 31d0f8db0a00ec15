// Force-included into the libraries of the fuzz build only (see CMakeLists.txt).
// clang 14 rejects __builtin_cpu_supports("f16c") ("invalid cpu feature string"), which the
// AVX2 kernels' runtime dispatch uses; gcc and clang >= 15 accept it. This maps the few feature
// names the project asks for to cpuid, so the fuzz build compiles without touching those files.
#pragma once
#if defined(__clang__) && __clang_major__ < 15 && defined(__x86_64__)
#include <cpuid.h>
#include <string.h>

static inline int turbokv_clang14_cpu_supports(const char* feature) {
  unsigned a = 0, b = 0, c = 0, d = 0;
  unsigned b7 = 0;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return 0;
  const unsigned c1 = c;
  if (__get_cpuid_count(7, 0, &a, &b, &c, &d)) b7 = b;
  if (strcmp(feature, "f16c") == 0) return (c1 & bit_F16C) != 0;
  if (strcmp(feature, "fma") == 0) return (c1 & bit_FMA) != 0;
  if (strcmp(feature, "avx") == 0) return (c1 & bit_AVX) != 0;
  if (strcmp(feature, "sse4.2") == 0) return (c1 & bit_SSE4_2) != 0;
  if (strcmp(feature, "avx2") == 0) return (b7 & bit_AVX2) != 0;
  if (strcmp(feature, "avx512f") == 0) return (b7 & bit_AVX512F) != 0;
  return 0;  // unknown to this shim: take the portable path
}
#define __builtin_cpu_supports(feature) turbokv_clang14_cpu_supports(feature)
#endif
