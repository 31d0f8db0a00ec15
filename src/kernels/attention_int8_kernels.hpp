// The SIMD integer attention kernels and their orders of coordinates, shared by the kernel
// tables (attention_avx2.cpp) and their translation units (attention_int8_avx2.cpp,
// attention_int8_vnni.cpp).
#pragma once

#include <cstdint>

#include "attention/attention_kernels.hpp"

namespace turbokv::attn {

struct Int8Kernels {
  decltype(KernelTable::int8_dots) dots;
  decltype(KernelTable::int8_accumulate) accumulate;
  decltype(KernelTable::int8_weights) weights;
  decltype(KernelTable::int8_order) order;
};

// Only on x86-64 GCC/Clang builds; callers check the CPU first.
const Int8Kernels& int8_kernels_avx2();
const Int8Kernels& int8_kernels_vnni();

// KernelTable::int8_order of the SIMD tables: keys in the order the code decoders produce,
// values in the order interleave4 then makes of it (attention_int8_simd.hpp). The VNNI build
// decodes 3-bit chunks in coordinate order (vpmultishiftqb), the AVX2 build in its own.
void int8_avx2_order(int bits, int dims, bool values, uint16_t* order);
void int8_vnni_order(int bits, int dims, bool values, uint16_t* order);

}  // namespace turbokv::attn
