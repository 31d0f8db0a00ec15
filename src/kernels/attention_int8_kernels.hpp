// The kernels the SIMD tables (attention_avx2.cpp) take from other translation units: the
// integer kernels and their orders of coordinates (attention_int8_avx2.cpp,
// attention_int8_avx_vnni.cpp, attention_int8_vnni.cpp, attention_int8_orders.cpp) and the VBMI
// decode of 8-bit codes (attention_codes8_vbmi.cpp).
#pragma once

#include <cstdint>

#include "attention/attention_kernels.hpp"

namespace turbokv::attn {

struct Int8Kernels {
  decltype(KernelTable::int8_dots) dots;
  decltype(KernelTable::int8_accumulate) accumulate;
  decltype(KernelTable::int8_weights) weights;
  decltype(KernelTable::int8_order) order;
  // 8-bit codes in int16 (the VNNI build only; nullptr in the AVX2 one).
  decltype(KernelTable::int16_dots) dots16;
  decltype(KernelTable::int16_accumulate) accumulate16;
  decltype(KernelTable::int16_weights) weights16;
  decltype(KernelTable::int16_order) order16;
  int weight_levels;
  // KernelTable::prefill_int8_dots / prefill_int8_accumulate: a block decoded once for a tile's rows.
  decltype(KernelTable::int8_dots) prefill_dots;
  decltype(KernelTable::int8_accumulate) prefill_accumulate;
};

// Only on x86-64 GCC/Clang builds; callers check the CPU first.
const Int8Kernels& int8_kernels_avx2();
const Int8Kernels& int8_kernels_avx_vnni();
const Int8Kernels& int8_kernels_vnni();

// KernelTable::int8_order of the SIMD tables: keys in the order the code decoders produce,
// values in the order interleave4 then makes of it (attention_int8_simd.hpp). The VNNI build
// decodes 3-bit chunks in coordinate order (vpmultishiftqb), the AVX2 build in its own.
void int8_avx2_order(int bits, int dims, bool values, uint16_t* order);
void int8_vnni_order(int bits, int dims, bool values, uint16_t* order);
// KernelTable::int16_order of the VNNI table (8-bit codes in chunks of 64).
void int16_vnni_order(int dims, bool values, uint16_t* order);

// out[t * dims + j] = table[code j of record t] (8-bit codes at `offset` in each record of
// code_size bytes), t < n; table has 256 entries. Needs AVX512-VBMI/BW (the VNNI table's CPUs).
void decode_codes8_vbmi(const float* table, const uint8_t* records, size_t code_size, size_t offset,
                        size_t n, int dims, float* out);

}  // namespace turbokv::attn
