// Run-time CPU feature checks for the hand-written AVX2 kernels (attention, engine matmuls).
// Highway dispatches the codec kernels itself; these two families are plain intrinsics and ask
// here. cpuid rather than __builtin_cpu_supports: clang 14 (the fuzz toolchain) rejects the
// "f16c" feature string. The OS must also save the YMM registers on context switches (OSXSAVE
// and XCR0 bits 1-2), or AVX code faults even on a CPU that has it.
#pragma once

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#endif

// A target region: every function defined between TURBOKV_TARGET_BEGIN("avx2,fma") and
// TURBOKV_TARGET_END is compiled for those instruction sets (GCC's target pragma, clang's
// attribute push), so a kernel file builds for baseline x86-64 and its functions are called
// only after the matching cpu_has_* check.
#define TURBOKV_PRAGMA(text) _Pragma(#text)
#if defined(__clang__)
#define TURBOKV_TARGET_BEGIN(targets) \
  TURBOKV_PRAGMA(clang attribute push(__attribute__((target(targets))), apply_to = function))
#define TURBOKV_TARGET_END TURBOKV_PRAGMA(clang attribute pop)
#else
#define TURBOKV_TARGET_BEGIN(targets) TURBOKV_PRAGMA(GCC push_options) TURBOKV_PRAGMA(GCC target(targets))
#define TURBOKV_TARGET_END TURBOKV_PRAGMA(GCC pop_options)
#endif

namespace turbokv {

// True when the CPU and OS support AVX2, FMA and F16C together.
inline bool cpu_has_avx2_fma_f16c() {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  static const bool supported = [] {
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (__get_cpuid(1, &a, &b, &c, &d) == 0) return false;
    const bool f16c = (c & bit_F16C) != 0, fma = (c & bit_FMA) != 0, avx = (c & bit_AVX) != 0;
    const bool osxsave = (c & bit_OSXSAVE) != 0;
    if (!(f16c && fma && avx && osxsave)) return false;
    unsigned xcr0_lo = 0, xcr0_hi = 0;
    __asm__("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
    if ((xcr0_lo & 0x6u) != 0x6u) return false;  // XMM and YMM state saved by the OS
    if (__get_cpuid_count(7, 0, &a, &b, &c, &d) == 0) return false;
    return (b & bit_AVX2) != 0;
  }();
  return supported;
#else
  return false;
#endif
}

// True when, besides AVX2/FMA/F16C, the CPU has AVX512-VNNI with AVX512VL (vpdpbusd on 256-bit
// registers: Ice Lake and later Xeons, Zen 4) and the OS saves the AVX-512 state (XCR0 bits 5-7),
// which EVEX-encoded instructions need even on 256-bit registers.
inline bool cpu_has_avx512_vnni_vl() {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  static const bool supported = [] {
    if (!cpu_has_avx2_fma_f16c()) return false;
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (__get_cpuid_count(7, 0, &a, &b, &c, &d) == 0) return false;
    const bool vl = (b & (1u << 31)) != 0, vnni = (c & (1u << 11)) != 0;
    if (!(vl && vnni)) return false;
    unsigned xcr0_lo = 0, xcr0_hi = 0;
    __asm__("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
    return (xcr0_lo & 0xE6u) == 0xE6u;  // XMM, YMM, opmask, ZMM0-15 upper halves, ZMM16-31
  }();
  return supported;
#else
  return false;
#endif
}

// True when, besides cpu_has_avx512_vnni_vl(), the CPU has AVX512BW and AVX512VBMI (byte
// permutes and vpmultishiftqb: Ice Lake and later, Zen 4; not Cascade Lake).
inline bool cpu_has_avx512_vnni_vbmi_bw() {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  static const bool supported = [] {
    if (!cpu_has_avx512_vnni_vl()) return false;
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (__get_cpuid_count(7, 0, &a, &b, &c, &d) == 0) return false;
    return (b & (1u << 30)) != 0 && (c & (1u << 1)) != 0;  // AVX512BW, AVX512VBMI
  }();
  return supported;
#else
  return false;
#endif
}

// True when, besides AVX2/FMA/F16C, the CPU has AVX-VNNI: vpdpbusd on 256-bit registers in the
// VEX encoding (Alder Lake and later Intel cores, Zen 5), which needs no AVX-512 state; the
// client CPUs that have it mostly lack AVX-512.
inline bool cpu_has_avx_vnni() {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  static const bool supported = [] {
    if (!cpu_has_avx2_fma_f16c()) return false;
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (__get_cpuid_count(7, 1, &a, &b, &c, &d) == 0) return false;
    return (a & (1u << 4)) != 0;  // CPUID.(7,1):EAX[4] AVX-VNNI
  }();
  return supported;
#else
  return false;
#endif
}

}  // namespace turbokv
