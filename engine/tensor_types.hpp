// Weight tensor types (the ggml/GGUF numbering) and the matrix kernels of the forward pass.
//
// Byte layouts (little-endian, blocks packed back to back along a row, no padding):
//   F32   4 bytes per value.
//   F16   IEEE binary16, 2 bytes per value.       BF16  bfloat16, 2 bytes per value.
//   Q8_0  blocks of 32 values, 34 bytes: fp16 d, int8 q[32];      x[i] = d * q[i].
//   Q4_0  blocks of 32 values, 18 bytes: fp16 d, uint8 qs[16];
//         x[i] = d * ((qs[i] & 15) - 8), x[i + 16] = d * ((qs[i] >> 4) - 8)  for i < 16.
//   Q4_K  super-blocks of 256 values, 144 bytes: fp16 d, fp16 dmin, uint8 scales[12],
//         uint8 qs[128]. Eight sub-blocks of 32 have a 6-bit scale sc[j] and 6-bit min m[j]
//         packed in scales[12]: for j < 4, sc[j] = scales[j] & 63, m[j] = scales[j + 4] & 63;
//         for j >= 4, sc[j] = (scales[j + 4] & 15) | (scales[j - 4] >> 6) << 4 and
//         m[j] = (scales[j + 4] >> 4) | (scales[j] >> 6) << 4. Values come in 4 chunks of 64:
//         chunk c uses qs[32c .. 32c + 31]; its low nibbles are sub-block 2c, its high nibbles
//         sub-block 2c + 1; x = d * sc[j] * q - dmin * m[j].
//   Q6_K  super-blocks of 256 values, 210 bytes: uint8 ql[128], uint8 qh[64], int8 scales[16],
//         fp16 d. Two halves of 128 values; half h uses ql[64h ..], qh[32h ..], scales[8h ..].
//         Within a half, for l < 32 the four 6-bit values at l, l + 32, l + 64, l + 96 are
//         (ql[l] & 15), (ql[l + 32] & 15), (ql[l] >> 4), (ql[l + 32] >> 4), each with 2 high bits
//         from qh[l] bits (0,1), (2,3), (4,5), (6,7); x = d * scales[l / 16 + 2k] * (q - 32) for
//         the k-th of the four (k = 0..3).
// A row's length must be a whole number of blocks (row_bytes() throws otherwise).
#pragma once

#include <cstddef>
#include <cstdint>

#include "turbokv/thread_pool.hpp"

namespace turbokv::engine {

enum class GgmlType : uint32_t { F32 = 0, F16 = 1, Q4_0 = 2, Q8_0 = 8, Q4_K = 12, Q6_K = 14, BF16 = 30 };

// True if `raw` is one of the types above (a GGUF file may name others we do not support).
bool is_supported_type(uint32_t raw);
const char* type_name(GgmlType type);
// Values per block (1 for the float types).
size_t block_size(GgmlType type);
// Bytes per block.
size_t block_bytes(GgmlType type);
// Bytes of one row of `cols` values; throws turbokv::Error if cols < 0 or not a whole number of
// blocks, or if the size overflows.
size_t row_bytes(GgmlType type, int64_t cols);

// A row-major [rows][cols] matrix of one type, viewing memory it does not own.
struct WeightMatrix {
  GgmlType type = GgmlType::F32;
  int64_t rows = 0;
  int64_t cols = 0;
  const void* data = nullptr;
};

// Scalar reference decoder: out[cols] = row `row` of w as floats.
void dequantize_row(const WeightMatrix& w, int64_t row, float* out);
// Encodes in[cols] as one row of `type` (F32, F16, BF16, Q8_0, Q4_0; the K-quants throw).
// out must hold row_bytes(type, cols) bytes. Q8_0/Q4_0 use d = max|x| / 127 resp. the signed
// value of largest magnitude / -8, rounding to nearest, as ggml's reference quantizers do.
void quantize_row(GgmlType type, const float* in, int64_t cols, void* out);

// y[rows] = W x[cols]; SIMD dot products per type, rows split over the pool. For the quantized
// types (Q8_0, Q4_0, Q4_K, Q6_K) the AVX2 path first quantizes x to Q8_0 blocks (as llama.cpp
// does) and multiplies in integers: the result is exactly W times dequantize(Q8_0(x)) up to float summation order
// (set_q8_activations(false) keeps x in float instead).
void matvec(const WeightMatrix& w, const float* x, float* y, turbokv::ThreadPool& pool);
// Y[n][rows] = X[n][cols] W^T (batched prefill): each weight row is decoded once per call and
// used for all n inputs.
void matmul(const WeightMatrix& w, const float* x, int64_t n, float* y, turbokv::ThreadPool& pool);

// Y[n][rows] for a batch of n independent rows (the server's continuous batching): every row
// of Y is bit-for-bit what matvec(w, x + t*cols) computes for it alone (same kernel, same
// activation quantization, same summation order), whatever n and the other rows are, while each
// weight row is read from memory once for the whole batch. This is what makes a request's
// output independent of the batch it runs in (docs/architecture.md).
void matmul_rowwise(const WeightMatrix& w, const float* x, int64_t n, float* y, turbokv::ThreadPool& pool);

// The scalar reference product (one thread, dequantize_row then a double-precision dot):
// what the tests compare the fast paths with.
void matvec_reference(const WeightMatrix& w, const float* x, float* y);

// The instruction set the fast paths dispatch to on this machine ("avx2" or "scalar").
const char* kernel_isa();
// Tests: force the portable scalar kernels (true) or return to the best available (false).
void force_scalar_kernels(bool scalar);
// Whether matvec quantizes x to Q8_0 for quantized weights (default true; process-wide).
void set_q8_activations(bool enabled);
bool q8_activations();

}  // namespace turbokv::engine
