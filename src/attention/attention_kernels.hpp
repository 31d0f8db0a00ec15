// Internal interface between the attention drivers (src/attention/) and the per-ISA block
// kernels (src/kernels/attention_*.cpp).
//
// A driver walks the keys of one kv head in blocks of at most kBlockTokens tokens and keeps,
// for a tile of at most kMaxRows query rows, the online-softmax state (running max m, running
// sum l, weighted value sum acc). Per block it calls three kernels:
//   1. dots:      scores[r][t] = <q_r, k_t>                       (format specific)
//   2. softmax:   scale, soft-cap, causal mask, max/exp update, rescale acc (generic)
//   3. accumulate acc[r][:] += sum_t w[r][t] * v_t                (format specific)
// Each key/value block is decoded once per call and used for every row of the tile, which is
// how grouped-query attention reuses it: a tile holds the query heads of one kv-head group.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>

namespace turbokv::attn {

inline constexpr int kBlockTokens = 64;
inline constexpr int kMaxRows = 8;
// Rows of a prefill tile (a call with more than one query): many rows share each block's loads,
// conversion and transposition, which makes the prompt's attention compute-bound.
inline constexpr int kPrefillRows = 32;

// One run of packed b-bit codes inside a fixed-size record (see packing.hpp for the LSB-first
// bit order): `dims` codes starting at byte `offset`, decoded through `table` (2^bits floats).
// The kernels read the codes in chunks of 8 (8 codes = `bits` bytes, byte aligned); query rows
// and accumulators for a group are padded to padded_dims() with zeros so a partial last chunk
// contributes nothing. safe_chunks: leading chunks whose 4-byte loads stay inside the record;
// the rest are read through a bounce buffer so no kernel reads past a record.
struct CodeGroup {
  int bits = 0;
  int dims = 0;
  size_t offset = 0;
  const float* table = nullptr;  // 2^bits entries
  int safe_chunks = 0;
  // The integer path's table (see int8_dots): the centroids rounded to int8, 16 entries; for
  // 8-bit groups table16, 256 entries rounded to [-kInt16Max, kInt16Max].
  const int8_t* table8 = nullptr;
  const int16_t* table16 = nullptr;
  int chunks() const { return (dims + 7) / 8; }
  int padded_dims() const { return chunks() * 8; }
};

// Fills safe_chunks for a record of code_size bytes.
void finish_code_group(CodeGroup& group, size_t code_size);

struct KernelTable {
  const char* name;
  // scores[r * ld + t] = <q_r, k_t> for r < rows, t < n; q row r at q + r * q_stride; key t at
  // keys + t * dim (fp16 bits or float).
  void (*dots_f16)(const float* q, size_t q_stride, int rows, const uint16_t* keys, size_t n,
                   int dim, float* scores, size_t ld);
  void (*dots_f32)(const float* q, size_t q_stride, int rows, const float* keys, size_t n,
                   int dim, float* scores, size_t ld);
  // acc[r * acc_stride + j] += sum_t w[r * ld + t] * v_t[j].
  void (*accumulate_f16)(const float* w, size_t ld, int rows, const uint16_t* values, size_t n,
                         int dim, float* acc, size_t acc_stride);
  void (*accumulate_f32)(const float* w, size_t ld, int rows, const float* values, size_t n,
                         int dim, float* acc, size_t acc_stride);
  // Packed records (record t at records + t * code_size):
  // scores[r * ld + t] (+)= sum_j q_r[j] * table[code_t[j]] over the group's codes; q row r
  // holds group.padded_dims() floats (zero padded). add: accumulate into scores.
  void (*group_dots)(const float* q, size_t q_stride, int rows, const uint8_t* records,
                     size_t code_size, size_t n, const CodeGroup& group, float* scores,
                     size_t ld, bool add);
  // acc[r * acc_stride + j] += sum_t w[r * ld + t] * table[code_t[j]], j < padded_dims().
  void (*group_accumulate)(const float* w, size_t ld, int rows, const uint8_t* records,
                           size_t code_size, size_t n, const CodeGroup& group, float* acc,
                           size_t acc_stride);
  // Online softmax step for one block. scores[r * ld + t], t < n, are raw dot products; only
  // hidden[r] <= t < visible[r] are seen (hidden: nullptr for none hidden; a sliding window's
  // start). Turns them into s = softcap(scale * dot) and then into the weights
  // p = exp(s - m_new) (0 where masked), updates m[r], l[r] and scales acc row r (acc_width
  // floats) by exp(m_old - m_new). A row that sees none of the block is left alone (weights 0).
  void (*softmax_update)(float* scores, size_t ld, int rows, size_t n, const size_t* visible,
                         const size_t* hidden, float scale, float softcap, float* m, float* l,
                         float* acc, size_t acc_stride, size_t acc_width);
  // out[t] = load_norm(records + t * stride, fp32) (turbokv/codec.hpp), t < n: the per-token
  // norms inside the packed records; the AVX2 table converts 8 fp16 norms at a time.
  void (*load_norms)(const uint8_t* records, size_t stride, size_t n, bool fp32, float* out);
  // scores[r * ld + t] = fma(scores[r * ld + t], norm[t], shift[r]) for r < rows, t < n: a
  // code's dot product with the rotated query turned into the key's score (times the key's
  // norm, plus the query's dot with a centered cache's key mean). One fused operation so that
  // every table rounds alike (a compiler may fuse a multiply and an add in SIMD code).
  void (*scale_scores)(float* scores, size_t ld, int rows, size_t n, const float* norm, const float* shift);
  // Layout of 4-bit code groups in prepared query rows and value accumulators: nullptr for
  // coordinate order; otherwise position p of every chunk of 8 holds coordinate
  // chunk_order4[p] of that chunk (the order a table's fast decode produces; see
  // attention_avx2.cpp). Sources permute queries in and un-permute accumulators out.
  const uint8_t* chunk_order4;

  // ---- integer arithmetic (AttentionArithmetic::int8) ----
  // Groups of 2, 3 or 4 bits whose dims are a multiple of kInt8Chunk; table8 holds the int8
  // centroids (in [-127, 127]). Integer sums are exact, so every table gives the scalar table's
  // bits for the same integers (tables differ only in int8_weight_levels).
  // scores[r * ld + t] = (add ? scores[r * ld + t] + : ) row_scale[r] * sum_j q8_r[j] * table8[code_t[j]]
  // (fma when adding), q row r at q8 + r * q_stride (bytes, values within
  // +-int8_query_levels(bits)), in int8_order(bits, dims, false, ..) order.
  void (*int8_dots)(const int8_t* q8, size_t q_stride, int rows, const float* row_scale,
                    const uint8_t* records, size_t code_size, size_t n, const CodeGroup& group,
                    float* scores, size_t ld, bool add);
  // acc[r * acc_stride + p] = fma(row_scale[r], sum_t w8[r * ld + t] * table8[code_t[dim(p)]], acc[..])
  // for p < group.dims in int8_order(bits, dims, true, ..) order; w8 values in
  // [0, int8_weight_levels], and zero from t = n up to the next multiple of 4 (the kernels read
  // weights four tokens at a time).
  void (*int8_accumulate)(const uint8_t* w8, size_t ld, int rows, const float* row_scale,
                          const uint8_t* records, size_t code_size, size_t n,
                          const CodeGroup& group, float* acc, size_t acc_stride);
  // w8[r * ld + t] = trunc(fma(w, levels / max, 0.5)) with w = p[r * ld + t] * norm[t] for
  // t < n and max the largest w of the row (all zero if it is 0), zeros from n to the next
  // multiple of 4; scale[r] = max / levels, NaN if a weight is not finite (the row's output must
  // not look valid). p >= 0 (softmax weights), norm >= 0; levels <= 255 (the scalar kernel takes
  // any; a SIMD table is called with its own int8_weight_levels).
  void (*int8_weights)(const float* p, size_t ld, int rows, const float* norm, size_t n, int levels,
                       uint8_t* w8, float* scale);
  // order[p] = the coordinate at position p < dims of the kernels' query rows (values = false)
  // or accumulators (values = true) for a group of this width; nullptr: coordinate order.
  void (*int8_order)(int bits, int dims, bool values, uint16_t* order);

  // The same for 8-bit codes in 16-bit integers (int16_group_supported shapes; table16 holds
  // the centroids rounded to [-kInt16Max, kInt16Max]): q16 values in [-kInt16Max, kInt16Max]
  // (q_stride in elements), w16 in [0, kInt16Max] zero from n to the next even count, and
  // int16_weights rounds to kInt16Max levels as int8_weights to 127. nullptr where the table
  // has no such kernels (8-bit caches then attend exactly).
  void (*int16_dots)(const int16_t* q16, size_t q_stride, int rows, const float* row_scale,
                     const uint8_t* records, size_t code_size, size_t n, const CodeGroup& group,
                     float* scores, size_t ld, bool add);
  void (*int16_accumulate)(const uint16_t* w16, size_t ld, int rows, const float* row_scale,
                           const uint8_t* records, size_t code_size, size_t n,
                           const CodeGroup& group, float* acc, size_t acc_stride);
  void (*int16_weights)(const float* p, size_t ld, int rows, const float* norm, size_t n,
                        uint16_t* w16, float* scale);
  void (*int16_order)(int dims, bool values, uint16_t* order);
  // The weights' levels int8_accumulate takes: at most 127 for AVX2, whose maddubs adds two
  // products in 16 bits (2 * 255 * 127 would saturate); vpdpbusd would take 255. Every table
  // uses 127 now (attention_int8_simd.hpp says why); the field keeps the kernels honest about it.
  int int8_weight_levels;

  // ---- prefill tiles (kPrefillRows rows of a call with many queries; dense blocks) ----
  // The contracts of dots_f16 .. accumulate_f32, n <= kBlockTokens. The scalar table computes
  // each score as one fused multiply-add chain over j in order, and each accumulator lane as one
  // over t in order (zero weights included); the VNNI table's blocked AVX-512 kernels
  // (attention_prefill_avx512.cpp) perform exactly those operations, so they give the scalar
  // table's bits. The AVX2 table, and the VNNI table at head dims its blocked kernels do not take
  // (prefill_avx512_dim), point at their dots_* / accumulate_*.
  void (*prefill_dots_f16)(const float* q, size_t q_stride, int rows, const uint16_t* keys, size_t n,
                           int dim, float* scores, size_t ld);
  void (*prefill_dots_f32)(const float* q, size_t q_stride, int rows, const float* keys, size_t n,
                           int dim, float* scores, size_t ld);
  void (*prefill_accumulate_f16)(const float* w, size_t ld, int rows, const uint16_t* values, size_t n,
                                 int dim, float* acc, size_t acc_stride);
  void (*prefill_accumulate_f32)(const float* w, size_t ld, int rows, const float* values, size_t n,
                                 int dim, float* acc, size_t acc_stride);
  // Packed records decoded to centroids for the prefill kernels: out[t * ld + p] for t < n and
  // p < group.padded_dims(), in the layout of the table's prepared query rows and accumulators
  // (chunk_order4 for 4-bit groups). Positions past group.dims hold finite values that the
  // zero padding of query rows cancels and that no output reads.
  void (*group_decode)(const uint8_t* records, size_t code_size, size_t n, const CodeGroup& group,
                       float* out, size_t ld);
  // The contracts of int8_dots / int8_accumulate (the same integers, so every table's bits
  // equal the scalar table's) for prefill tiles of up to kPrefillRows rows, n <= kBlockTokens.
  // The VNNI table decodes each block once for all rows and multiplies on 512-bit registers
  // (attention_int8_simd.hpp, "prefill tiles"); the others point at int8_dots / int8_accumulate.
  void (*prefill_int8_dots)(const int8_t* q8, size_t q_stride, int rows, const float* row_scale,
                            const uint8_t* records, size_t code_size, size_t n, const CodeGroup& group,
                            float* scores, size_t ld, bool add);
  void (*prefill_int8_accumulate)(const uint8_t* w8, size_t ld, int rows, const float* row_scale,
                                  const uint8_t* records, size_t code_size, size_t n,
                                  const CodeGroup& group, float* acc, size_t acc_stride);
};

// 12-bit integers: sums of 256 products of two of them stay within int32, and their rounding
// is ~1% of 8-bit codes' own error (8-bit codes need more than int8's 7 bits).
inline constexpr int kInt16Max = 2047;
inline bool int16_group_supported(int bits, int dims) {
  return bits == 8 && dims % 64 == 0 && dims > 0 && dims <= 256;
}

inline constexpr int kInt8Chunk = 32;
// The levels of an int8 query row against key codes of this width: 127 against 4-bit codes, 63
// against 2- and 3-bit ones. With 6 bits and a sign, AVX2's maddubs can take the centroids as
// unsigned bytes (offset by 128: 2 * 255 * 63 fits its 16-bit pairs) instead of taking their
// signs out of the query row by row (attention_int8_simd.hpp); the coarser query's error is
// small beside 2- and 3-bit codes' own (kjv KL within 2% of the exact path's), not beside 4-bit
// codes' (tq4-plain +3.3% at 63 levels, +1.8% at 127; docs/history/benchmarks-notebook.md,
// "Issue 29: 3-bit int8 attention on the AVX2 table").
constexpr int int8_query_levels(int bits) { return bits == 4 ? 127 : 63; }
// The online softmax's rescale factor exp(m_old - m_new) for a row whose running max moves from
// m_old (-inf before its first token) to m_new: every table's softmax_update takes it from here.
// exp(0) is 1, so once a long context's max settles most blocks skip the call (a NaN or
// infinite difference still takes it).
inline float softmax_rescale(float m_old, float m_new) {
  if (m_old == -std::numeric_limits<float>::infinity()) return 0.0f;
  const float shift = m_old - m_new;
  return shift == 0.0f ? 1.0f : std::exp(shift);
}

// Whether the integer kernels take a group of this shape.
inline bool int8_group_supported(int bits, int dims) {
  return bits >= 2 && bits <= 4 && dims % kInt8Chunk == 0 && dims > 0 && dims <= 1024;
}

const KernelTable& scalar_kernel_table();
// nullptr when the build or the CPU lacks AVX2/FMA/F16C.
const KernelTable* avx2_kernel_table();
// The AVX2 table with AVX-VNNI's vpdpbusd (VEX, 256-bit) in its integer kernels; nullptr when
// the CPU lacks it. Same results as the AVX2 table, bit for bit.
const KernelTable* avx_vnni_kernel_table();
// The AVX2 table with AVX-512 VNNI/VBMI integer kernels and the blocked AVX-512 prefill kernels;
// nullptr when the CPU lacks them. Its int8 results are the AVX2 table's too, bit for bit.
const KernelTable* vnni_kernel_table();
// The fastest table this CPU supports (chosen once): VNNI, else AVX-VNNI, else AVX2, else scalar.
// TURBOKV_NO_VNNI=1 skips both VNNI tables (the AVX2 table), TURBOKV_NO_AVX512=1 the AVX-512 one
// (the AVX-VNNI table where the CPU has it: how an AVX-512 machine times an Alder Lake's).
const KernelTable& best_kernel_table();

// Which table the public attend() uses; tests force one to compare targets. nullptr: best.
void set_kernel_table_override(const KernelTable* table);
const KernelTable& active_kernel_table();

}  // namespace turbokv::attn
