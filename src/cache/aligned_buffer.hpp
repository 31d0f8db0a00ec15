// 64-byte aligned byte buffers for cache pages (SIMD kernels read page slabs in place).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>

namespace turbokv::detail {

constexpr size_t kPageAlignment = 64;

struct AlignedDelete {
  void operator()(uint8_t* p) const { ::operator delete[](p, std::align_val_t(kPageAlignment)); }
};
using AlignedBytes = std::unique_ptr<uint8_t[], AlignedDelete>;

inline size_t round_up_to_alignment(size_t bytes) {
  return (bytes + kPageAlignment - 1) / kPageAlignment * kPageAlignment;
}

inline AlignedBytes allocate_aligned(size_t bytes) {
  return AlignedBytes(static_cast<uint8_t*>(
      ::operator new[](std::max<size_t>(bytes, 1), std::align_val_t(kPageAlignment))));
}

}  // namespace turbokv::detail
