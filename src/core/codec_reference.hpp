// Plain scalar reference loops of the codec's hot paths. They are the correctness oracle for
// the SIMD kernels in src/kernels/codec_*.cpp, which must give bit-identical results (the
// kernels perform the same float operations in the same order per element).
#pragma once

#include <cstddef>
#include <cstdint>

namespace turbokv {

// One packed group in each of n_records fixed-size records: n_codes codes at `bits` bits, at
// byte `offset` of record v, which starts at v * record_stride.
struct GroupBatch {
  size_t n_records = 0;
  size_t record_stride = 0;
  size_t offset = 0;
  size_t n_codes = 0;
  int bits = 0;
};

}  // namespace turbokv

namespace turbokv::reference {

// In place: Walsh-Hadamard butterflies across 2^log2_blocks blocks of `block` contiguous floats
// (stages h = 1, 2, 4, ...; a' = a + b, b' = a - b on whole blocks), then every value *= scale.
void fwht_blocks(float* x, int log2_blocks, int block, float scale);

// codes[i] = number of boundaries strictly below (y[i] * inv_norm), computed in float; the
// n codes are written densely packed (packing.hpp layout) to packed[0..packed_size(n, bits)).
void quantize_pack(const float* y, size_t n, float inv_norm, const float* boundaries, int bits,
                   uint8_t* packed);

// y[i] = scale * centroids[code i] for the n codes packed at `packed`.
void unpack_dequantize(const uint8_t* packed, size_t n, int bits, const float* centroids,
                       float scale, float* y);

// Batches (one dispatch per call in the SIMD versions): n contiguous vectors of 2^k * m floats;
// quantize_pack / unpack_dequantize of one group of every record, vector v of y at v * y_stride.
void fwht_blocks_batch(float* x, size_t n, int log2_blocks, int block, float scale);
void quantize_pack_records(const float* y, size_t y_stride, const float* inv_norms,
                           const float* boundaries, const GroupBatch& batch, uint8_t* records);
void unpack_dequantize_records(const uint8_t* records, const float* scales, const float* centroids,
                               const GroupBatch& batch, float* y, size_t y_stride);

}  // namespace turbokv::reference
