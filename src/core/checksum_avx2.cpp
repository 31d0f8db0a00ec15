// XXH3-64 compiled for AVX2, chosen at run time by checksum.cpp when the CPU has it. Debian
// builds libxxhash for baseline x86-64 (SSE2): about 11 GB/s here, against 28 GB/s for the
// AVX2 loop, and verifying a loaded cache must stay within 10% of the load (docs/reliability.md).
// This is the same xxhash.h from libxxhash-dev, compiled inline (XXH_INLINE_ALL: every symbol
// static and renamed, so nothing clashes with the library) with its AVX2 code path. XXH3 is
// defined bit for bit whatever the vector width; test_cache_checksums compares the two.
#include "core/checksum_impl.hpp"
#include "turbokv/cpu_features.hpp"

#if TURBOKV_CHECKSUM_AVX2
#include <immintrin.h>

TURBOKV_TARGET_BEGIN("avx2")

#define XXH_INLINE_ALL
#define XXH_VECTOR XXH_AVX2
#include <xxhash.h>

namespace turbokv::detail {

uint64_t xxh3_avx2(const void* data, size_t size) { return XXH3_64bits(data, size); }

void* xxh3_avx2_create() {
  XXH3_state_t* state = XXH3_createState();
  if (state != nullptr) XXH3_64bits_reset(state);
  return state;
}

void xxh3_avx2_free(void* state) { XXH3_freeState(static_cast<XXH3_state_t*>(state)); }

void xxh3_avx2_update(void* state, const void* data, size_t size) {
  XXH3_64bits_update(static_cast<XXH3_state_t*>(state), data, size);
}

uint64_t xxh3_avx2_digest(const void* state) {
  return XXH3_64bits_digest(static_cast<const XXH3_state_t*>(state));
}

}  // namespace turbokv::detail

TURBOKV_TARGET_END

#endif  // TURBOKV_CHECKSUM_AVX2
