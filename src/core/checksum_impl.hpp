// Internals of turbokv/checksum.hpp: the two XXH3-64 implementations it picks from at run time
// (libxxhash as Debian builds it, and checksum_avx2.cpp), exposed for the test that compares them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define TURBOKV_CHECKSUM_AVX2 1
#else
#define TURBOKV_CHECKSUM_AVX2 0
#endif

namespace turbokv::detail {

// XXH3-64 by the shared library, whatever the CPU.
uint64_t checksum64_library(std::span<const uint8_t> bytes);
// True when checksum64 and ChecksumStream use the AVX2 build (x86-64 CPU with AVX2).
bool checksum_uses_avx2();

#if TURBOKV_CHECKSUM_AVX2
// checksum_avx2.cpp; call only when checksum_uses_avx2().
uint64_t xxh3_avx2(const void* data, size_t size);
void* xxh3_avx2_create();  // a reset XXH3 state, nullptr when out of memory
void xxh3_avx2_free(void* state);
void xxh3_avx2_update(void* state, const void* data, size_t size);
uint64_t xxh3_avx2_digest(const void* state);
#endif

}  // namespace turbokv::detail
