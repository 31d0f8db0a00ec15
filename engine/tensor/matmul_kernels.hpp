// Internal: per-type row kernels behind matvec/matmul, one table per instruction set.
// Dispatch happens once per matvec/matmul call (kernels_for()), never per row.
#pragma once

#include <cstdint>

#include "engine/tensor/tensor_types.hpp"

namespace turbokv::engine::detail {

// Dot product of one encoded row (cols values) with x.
using RowDotFn = float (*)(const uint8_t* row, const float* x, int64_t cols);
// Decodes one encoded row into out[cols].
using RowDecodeFn = void (*)(const uint8_t* row, int64_t cols, float* out);
// out[r * 2 + t] = dot(w[r], x[t]) for r < 4, t < 2: the register tile of the batched product.
using Dot4x2Fn = void (*)(const float* const* w, const float* const* x, int64_t cols, float* out);

// Dot product of one encoded row with x given as Q8_0 blocks (x quantized once per matvec):
// integer products inside each block of 32, one float multiply-add per block.
using RowDotQ8Fn = float (*)(const uint8_t* row, const uint8_t* x_q8_0, int64_t cols);

// The same with each activation block's scale dx_b (as float) and dx_b * sum of its 32 int8
// values, computed once per activation row: what a kernel needs for a weight format with
// per-sub-block minimums (w = d * q - m), whose m term is m * dx_b * sum(xq_b) for any row.
using RowDotQ8SumsFn = float (*)(const uint8_t* row, const uint8_t* x_q8_0, const float* x_scale, const float* x_sum,
                                 int64_t cols);

struct RowKernels {
  RowDotFn dot = nullptr;
  RowDotQ8Fn dot_q8 = nullptr;  // the quantized types on AVX2 (at most one of dot_q8, dot_q8_sums)
  RowDotQ8SumsFn dot_q8_sums = nullptr;
  RowDecodeFn decode = nullptr;
  Dot4x2Fn dot4x2 = nullptr;
  float (*dot_f32)(const float* a, const float* b, int64_t n) = nullptr;
};

RowKernels scalar_kernels(GgmlType type);

// One Q8_0 weight row against four Q8_0 activation rows (matmul_rowwise_avx2.cpp): out[t] is
// bit for bit the AVX2 dot_q8 kernel's result for xq[t]; xscale[t][b] is block b's fp16 scale of
// xq[t] as float. AVX2 machines only.
void dot_q8_x4_q8_0(const uint8_t* row, const uint8_t* const* xq, const float* const* xscale, int64_t cols,
                    float* out);
// One Q4_K weight row against four Q8_0 activation rows, with their block scales and sums (the
// dot_q8_sums inputs): out[t] is bit for bit the AVX2 Q4_K dot_q8_sums kernel's result for t.
void dot_q8_x4_q4_k(const uint8_t* row, const uint8_t* const* xq, const float* const* x_scale,
                    const float* const* x_sum, int64_t cols, float* out);
// The same with vpdpbusd (matmul_rowwise_vnni.cpp), bit for bit the same results; xu[t] is xq[t]
// with every byte XOR 0x80 (the values offset by 128; scale bytes unused).
using DotQ8x4Fn = void (*)(const uint8_t* row, const uint8_t* const* xu, const float* const* xscale, int64_t cols,
                           float* out);
// This CPU's form of it: the EVEX one (AVX512-VNNI with AVX512VL) where `evex` allows AVX-512
// instructions and the CPU has them, else the VEX one (AVX-VNNI), else nullptr.
DotQ8x4Fn vnni_x4_kernel(bool evex);
// Whether the CPU has AVX512-VNNI with AVX512VL.
bool vnni_available();
// matmul_rowwise for Q8_0 weights with AVX-512 (F, BW, VNNI) register tiles of 4 rows x 4
// activations (matmul_rowwise_avx512.cpp): y[t * rows + r] for all t < n, bit for bit
// dot_q8_row_q8_0's result for row r and activation t (given as Q8_0 rows xq, xq_stride bytes
// apart). Splits the rows over the pool itself. Only where avx512_tile_available().
void matmul_q8_0_avx512(const uint8_t* w, size_t w_stride, size_t rows, int64_t cols, const uint8_t* xq,
                        size_t xq_stride, size_t n, float* y, ThreadPool& pool);
bool avx512_tile_available();
// The same product (y[t * rows + r] for all t < n, bit for bit dot_q8_row_q8_0's result) on
// 512-bit VNNI vectors, a block pair per step, each weight row read once for up to four
// activations (matvec_q8_0_avx512.cpp): matvec, and matmul_rowwise's batches below the tiles' 8.
// Splits the rows over the pool, at least min_chunk a task. Only where avx512_tile_available().
void matvec_q8_0_avx512(const uint8_t* w, size_t w_stride, size_t rows, int64_t cols, const uint8_t* xq,
                        size_t xq_stride, size_t n, float* y, ThreadPool& pool, size_t min_chunk);
// One row of cols floats to Q8_0 blocks, bit for bit quantize_row(Q8_0) (quantize_q8_0_avx2.cpp).
// AVX2 machines only.
void quantize_row_q8_0_avx2(const float* x, int64_t cols, uint8_t* dst);
// Returns false if this CPU (or build) has no AVX2/FMA/F16C.
bool avx2_available();
RowKernels avx2_kernels(GgmlType type);
// The AVX2 kernels of Q4_1, Q5_0, Q5_1, IQ4_NL, Q2_K, Q3_K, Q5_K and IQ4_XS
// (matmul_avx2_quants.cpp), set into k; other types leave k as it is.
void add_avx2_quant_kernels(GgmlType type, RowKernels& k);

}  // namespace turbokv::engine::detail
