#include "core/codec_reference.hpp"

#include <algorithm>

#include "turbokv/packing.hpp"

namespace turbokv::reference {

void fwht_blocks(float* x, int log2_blocks, int block, float scale) {
  const size_t blocks = size_t{1} << log2_blocks;
  const size_t m = static_cast<size_t>(block);
  for (size_t h = 1; h < blocks; h *= 2) {
    for (size_t start = 0; start < blocks; start += 2 * h) {
      for (size_t a = start; a < start + h; ++a) {
        float* lo = x + a * m;
        float* hi = x + (a + h) * m;
        for (size_t j = 0; j < m; ++j) {
          const float u = lo[j];
          const float v = hi[j];
          lo[j] = u + v;
          hi[j] = u - v;
        }
      }
    }
  }
  for (size_t i = 0; i < blocks * m; ++i) x[i] *= scale;
}

void quantize_pack(const float* y, size_t n, float inv_norm, const float* boundaries, int bits,
                   uint8_t* packed) {
  const int n_boundaries = (1 << bits) - 1;
  uint8_t codes[256];
  for (size_t start = 0; start < n; start += 256) {
    const size_t count = std::min<size_t>(256, n - start);
    for (size_t i = 0; i < count; ++i) {
      const float u = y[start + i] * inv_norm;
      codes[i] = static_cast<uint8_t>(std::lower_bound(boundaries, boundaries + n_boundaries, u) -
                                      boundaries);
    }
    // 256 codes fill whole bytes at every width, so chunks pack independently.
    pack_codes(codes, count, bits, packed + start / 8 * bits);
  }
}

void unpack_dequantize(const uint8_t* packed, size_t n, int bits, const float* centroids,
                       float scale, float* y) {
  uint8_t codes[256];
  for (size_t start = 0; start < n; start += 256) {
    const size_t count = std::min<size_t>(256, n - start);
    unpack_codes(packed + start / 8 * bits, count, bits, codes);
    for (size_t i = 0; i < count; ++i) y[start + i] = scale * centroids[codes[i]];
  }
}

void fwht_blocks_batch(float* x, size_t n, int log2_blocks, int block, float scale) {
  const size_t dim = (size_t{1} << log2_blocks) * static_cast<size_t>(block);
  for (size_t v = 0; v < n; ++v) fwht_blocks(x + v * dim, log2_blocks, block, scale);
}

void quantize_pack_records(const float* y, size_t y_stride, const float* inv_norms,
                           const float* boundaries, const GroupBatch& batch, uint8_t* records) {
  if (batch.n_codes == 0) return;
  for (size_t v = 0; v < batch.n_records; ++v) {
    quantize_pack(y + v * y_stride, batch.n_codes, inv_norms[v], boundaries, batch.bits,
                  records + v * batch.record_stride + batch.offset);
  }
}

void unpack_dequantize_records(const uint8_t* records, const float* scales, const float* centroids,
                               const GroupBatch& batch, float* y, size_t y_stride) {
  if (batch.n_codes == 0) return;
  for (size_t v = 0; v < batch.n_records; ++v) {
    unpack_dequantize(records + v * batch.record_stride + batch.offset, batch.n_codes, batch.bits,
                      centroids, scales[v], y + v * y_stride);
  }
}

}  // namespace turbokv::reference
