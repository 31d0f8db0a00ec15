// Weight tensor types (the ggml/GGUF numbering) and the matrix kernels of the forward pass.
//
// Byte layouts (little-endian, blocks packed back to back along a row, no padding):
//   F32   4 bytes per value.
//   F16   IEEE binary16, 2 bytes per value.       BF16  bfloat16, 2 bytes per value.
//   Q8_0  blocks of 32 values, 34 bytes: fp16 d, int8 q[32];      x[i] = d * q[i].
//   Q4_0  blocks of 32 values, 18 bytes: fp16 d, uint8 qs[16];
//         x[i] = d * ((qs[i] & 15) - 8), x[i + 16] = d * ((qs[i] >> 4) - 8)  for i < 16.
//   Q4_1  blocks of 32, 20 bytes: fp16 d, fp16 m, uint8 qs[16]; as Q4_0 but x = d * code + m.
//   Q5_0  blocks of 32, 22 bytes: fp16 d, uint8 qh[4], uint8 qs[16]: a 5-bit code per value,
//         its low 4 bits as in Q4_0 and bit 4 of value i is bit i of qh (a little-endian
//         uint32); x = d * (code - 16).
//   Q5_1  blocks of 32, 24 bytes: fp16 d, fp16 m, uint8 qh[4], uint8 qs[16]; as Q5_0 but
//         x = d * code + m.
//   IQ4_NL blocks of 32, 18 bytes: fp16 d, uint8 qs[16]; nibbles ordered as Q4_0, each an index
//         into the 16-entry non-linear table kIq4nlValues; x = d * table[code].
//   Q2_K  super-blocks of 256, 84 bytes: uint8 scales[16], uint8 qs[64], fp16 d, fp16 dmin.
//         Value e (0..255) has the 2-bit code (qs[32 * (e / 128) + e % 32] >> (2 * ((e / 32) % 4)))
//         & 3; its sub-block of 16 has scale byte s = scales[e / 16]:
//         x = d * (s & 15) * code - dmin * (s >> 4).
//   Q3_K  super-blocks of 256, 110 bytes: uint8 hmask[32], uint8 qs[64], uint8 scales[12],
//         fp16 d. Value e has the 2-bit code as Q2_K's, and its third bit is bit e / 32 of
//         hmask[e % 32]; the signed code is code2 - 4 where that bit is clear, code2 where set.
//         16 six-bit scales (one per 16 values), stored + 32: scale j has low 4 bits
//         scales[j % 8] >> (4 * (j / 8)) & 15 and high 2 bits scales[8 + j % 4] >> (2 * (j / 4)) & 3;
//         x = d * (scale - 32) * signed code.
//   Q4_K  super-blocks of 256 values, 144 bytes: fp16 d, fp16 dmin, uint8 scales[12],
//         uint8 qs[128]. Eight sub-blocks of 32 have a 6-bit scale sc[j] and 6-bit min m[j]
//         packed in scales[12]: for j < 4, sc[j] = scales[j] & 63, m[j] = scales[j + 4] & 63;
//         for j >= 4, sc[j] = (scales[j + 4] & 15) | (scales[j - 4] >> 6) << 4 and
//         m[j] = (scales[j + 4] >> 4) | (scales[j] >> 6) << 4. Values come in 4 chunks of 64:
//         chunk c uses qs[32c .. 32c + 31]; its low nibbles are sub-block 2c, its high nibbles
//         sub-block 2c + 1; x = d * sc[j] * q - dmin * m[j].
//   Q5_K  super-blocks of 256, 176 bytes: fp16 d, fp16 dmin, uint8 scales[12], uint8 qh[32],
//         uint8 qs[128]: Q4_K's layout plus a fifth bit, bit e / 32 of qh[e % 32] (value 16).
//   Q6_K  super-blocks of 256 values, 210 bytes: uint8 ql[128], uint8 qh[64], int8 scales[16],
//         fp16 d. Two halves of 128 values; half h uses ql[64h ..], qh[32h ..], scales[8h ..].
//         Within a half, for l < 32 the four 6-bit values at l, l + 32, l + 64, l + 96 are
//         (ql[l] & 15), (ql[l + 32] & 15), (ql[l] >> 4), (ql[l + 32] >> 4), each with 2 high bits
//         from qh[l] bits (0,1), (2,3), (4,5), (6,7); x = d * scales[l / 16 + 2k] * (q - 32) for
//         the k-th of the four (k = 0..3).
//   IQ4_XS super-blocks of 256, 136 bytes: fp16 d, uint16 scales_h, uint8 scales_l[4],
//         uint8 qs[128]. Sub-block j (32 values) has the 6-bit scale
//         ls = (scales_l[j / 2] >> (4 * (j % 2)) & 15) | ((scales_h >> 2j) & 3) << 4 and the 16
//         bytes qs[16j ..] ordered as IQ4_NL; x = d * (ls - 32) * kIq4nlValues[code].
// A row's length must be a whole number of blocks (row_bytes() throws otherwise).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "turbokv/thread_pool.hpp"

namespace turbokv::engine {

// The weight types this engine reads (ggml's numbering; a GGUF file may name others).
enum class GgmlType : uint32_t {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q4_1 = 3,
  Q5_0 = 6,
  Q5_1 = 7,
  Q8_0 = 8,
  Q2_K = 10,
  Q3_K = 11,
  Q4_K = 12,
  Q5_K = 13,
  Q6_K = 14,
  IQ4_NL = 20,
  IQ4_XS = 23,
  BF16 = 30
};

// IQ4_NL / IQ4_XS's 16 levels (ggml's kvalues_iq4nl): denser near zero, like weights are.
inline constexpr int8_t kIq4nlValues[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                            1,    13,   25,  38,  53,  69,  89,  113};

// True if `raw` is one of the types above (a GGUF file may name others we do not support).
bool is_supported_type(uint32_t raw);
const char* type_name(GgmlType type);
// ggml's name for any type number it has used ("IQ2_XXS" for 16), supported or not; nullptr for a
// number ggml never assigned. For error messages about files we cannot read.
const char* ggml_type_name(uint32_t raw);
// "IQ2_XXS (type 16) is not supported" / "type 99 is not a ggml type": the reader's error text.
std::string unsupported_type_message(uint32_t raw);
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

// Throws turbokv::Error naming the row and block of the first fp16 scale (d, m, dmin) of w that
// is NaN or infinite: such a block decodes to NaN or inf whatever its codes, so a file that has
// one is corrupt. Reads only the scale fields; the float types have none and always pass.
void check_scales_finite(const WeightMatrix& w);

// Scalar reference decoder: out[cols] = row `row` of w as floats.
void dequantize_row(const WeightMatrix& w, int64_t row, float* out);
// Encodes in[cols] as one row of `type` (every type above). out must hold row_bytes(type, cols)
// bytes. Q8_0/Q4_0 use d = max|x| / 127 resp. the signed value of largest magnitude / -8,
// rounding to nearest, as ggml's reference quantizers do; the other types use simple
// range-covering scales (quant_legacy.cpp, quant_kquants.cpp), not ggml's error-minimizing
// search: valid files, somewhat larger error than llama-quantize's. Those other encoders throw
// turbokv::Error on a non-finite input; Q8_0 and Q4_0 (Q8_0 also quantizes activations inside
// matvec) never throw and turn a NaN into a valid code.
void quantize_row(GgmlType type, const float* in, int64_t cols, void* out);

// y[rows] = W x[cols]; SIMD dot products per type, rows split over the pool. For the quantized
// types the AVX2 path first quantizes x to Q8_0 blocks (as llama.cpp
// does) and multiplies in integers: the result is exactly W times dequantize(Q8_0(x)) up to float summation order
// (set_q8_activations(false) keeps x in float instead).
void matvec(const WeightMatrix& w, const float* x, float* y, turbokv::ThreadPool& pool);
// Y[n][rows] = X[n][cols] W^T (batched prefill): each weight row is decoded once per call and
// used for all n inputs. Q8_0 weights on AVX2 take matmul_rowwise (faster, and matvec's bits).
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
// Benchmarks and tests: whether matmul_rowwise may use its VNNI Q8_0 kernels where the CPU has
// AVX512-VNNI or AVX-VNNI (default true, or false when TURBOKV_NO_VNNI is set in the environment; same results
// either way, only speed differs).
void use_vnni_kernels(bool enabled);
// Benchmarks and tests: whether matmul_rowwise may use AVX-512 instructions for Q8_0 weights: its
// tile kernel (4 rows x 4 activations over 512-bit registers) where the CPU has AVX-512
// F/BW/VNNI, and the EVEX form of its 256-bit VNNI kernel (false: the VEX form, AVX-VNNI, where
// the CPU has it), VNNI being enabled above (default true, or false when TURBOKV_NO_AVX512 is
// set; same results either way).
void use_avx512_tile_kernel(bool enabled);
// Benchmarks and tests: whether matvec, and matmul_rowwise below 8 activations, may use the
// 512-bit AVX512-VNNI kernel for Q8_0 weights where the CPU has AVX-512 F/BW/VL/VNNI and VNNI is
// enabled above (default true, or false when TURBOKV_NO_AVX512 is set; same results either way).
void use_avx512_matvec_kernel(bool enabled);
// Whether matvec quantizes x to Q8_0 for quantized weights (default true; process-wide).
void set_q8_activations(bool enabled);
bool q8_activations();

}  // namespace turbokv::engine
