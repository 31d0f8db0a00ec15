// Temporary forwarding to the scalar reference until the Highway kernels land.
#include "kernels/codec_kernels.hpp"

#include "core/codec_reference.hpp"

namespace turbokv::kernels {

void fwht_blocks(float* x, int log2_blocks, int block, float scale) {
  reference::fwht_blocks(x, log2_blocks, block, scale);
}
void quantize_pack(const float* y, size_t n, float inv_norm, const float* boundaries, int bits,
                   uint8_t* packed) {
  reference::quantize_pack(y, n, inv_norm, boundaries, bits, packed);
}
void unpack_dequantize(const uint8_t* packed, size_t n, int bits, const float* centroids,
                       float scale, float* y) {
  reference::unpack_dequantize(packed, n, bits, centroids, scale, y);
}
std::vector<int64_t> codec_kernel_targets() { return {}; }
std::string codec_kernel_target_name() { return "scalar"; }

}  // namespace turbokv::kernels
