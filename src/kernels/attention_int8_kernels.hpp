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
};

// Only on x86-64 GCC/Clang builds; callers check the CPU first.
const Int8Kernels& int8_kernels_avx2();
const Int8Kernels& int8_kernels_vnni();

// Position p of a chunk of 32 holds coordinate order[bits][p] (bits 2..4; the others nullptr):
// keys in the order codes32<bits> produces, values in the order interleave4 then makes of it
// (attention_int8_simd.hpp).
const uint8_t* const* int8_key_orders();
const uint8_t* const* int8_value_orders();

}  // namespace turbokv::attn
