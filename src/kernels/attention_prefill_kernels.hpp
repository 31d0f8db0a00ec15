// The blocked prefill kernels of the VNNI table (attention_prefill_avx512.cpp), taken by
// attention_avx2.cpp's make_table for head dims they support.
#pragma once

#include "attention/attention_kernels.hpp"

namespace turbokv::attn {

// Head dims the AVX-512 blocked kernels take: whole vectors of 16, a transposed slab of keys and
// a block of float values within their stack buffers. Other dims use the table's dots_* and
// accumulate_* for prefill tiles too.
inline constexpr int kPrefillMaxDim = 256;
inline bool prefill_avx512_dim(int dim) { return dim > 0 && dim % 16 == 0 && dim <= kPrefillMaxDim; }

struct PrefillKernels {
  decltype(KernelTable::prefill_dots_f16) dots_f16;
  decltype(KernelTable::prefill_dots_f32) dots_f32;
  decltype(KernelTable::prefill_accumulate_f16) accumulate_f16;
  decltype(KernelTable::prefill_accumulate_f32) accumulate_f32;
};

// Only on x86-64 GCC/Clang builds; callers check the CPU (AVX-512F/BW) first.
const PrefillKernels& prefill_kernels_avx512();

}  // namespace turbokv::attn
