// SIMD versions of the codec's hot loops (Highway, runtime dispatch once per call). Each has the
// same signature and the same results as its scalar reference in src/core/codec_reference.hpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/codec_reference.hpp"  // GroupBatch

namespace turbokv::kernels {

void fwht_blocks(float* x, int log2_blocks, int block, float scale);
void quantize_pack(const float* y, size_t n, float inv_norm, const float* boundaries, int bits,
                   uint8_t* packed);
void unpack_dequantize(const uint8_t* packed, size_t n, int bits, const float* centroids,
                       float scale, float* y);
void fwht_blocks_batch(float* x, size_t n, int log2_blocks, int block, float scale);
void quantize_pack_records(const float* y, size_t y_stride, const float* inv_norms,
                           const float* boundaries, const GroupBatch& batch, uint8_t* records);
void unpack_dequantize_records(const uint8_t* records, const float* scales, const float* centroids,
                               const GroupBatch& batch, float* y, size_t y_stride);

// Highway targets compiled into the codec kernels and supported by this CPU (HWY_* bits).
std::vector<int64_t> codec_kernel_targets();
// Name of the target the dispatcher picks now (e.g. "AVX2"); honours SetSupportedTargetsForTest.
std::string codec_kernel_target_name();

}  // namespace turbokv::kernels
