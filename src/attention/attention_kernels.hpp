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

#include <cstddef>
#include <cstdint>

namespace turbokv::attn {

inline constexpr int kBlockTokens = 64;
inline constexpr int kMaxRows = 8;

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
  // t < visible[r] are seen. Turns them into s = softcap(scale * dot) and then into the
  // weights p = exp(s - m_new) (0 where masked), updates m[r], l[r] and scales acc row r
  // (acc_width floats) by exp(m_old - m_new).
  void (*softmax_update)(float* scores, size_t ld, int rows, size_t n, const size_t* visible,
                         float scale, float softcap, float* m, float* l, float* acc,
                         size_t acc_stride, size_t acc_width);
  // out[t] = load_norm(records + t * stride, fp32) (turbokv/codec.hpp), t < n: the per-token
  // norms inside the packed records; the AVX2 table converts 8 fp16 norms at a time.
  void (*load_norms)(const uint8_t* records, size_t stride, size_t n, bool fp32, float* out);
  // Layout of 4-bit code groups in prepared query rows and value accumulators: nullptr for
  // coordinate order; otherwise position p of every chunk of 8 holds coordinate
  // chunk_order4[p] of that chunk (the order a table's fast decode produces; see
  // attention_avx2.cpp). Sources permute queries in and un-permute accumulators out.
  const uint8_t* chunk_order4;
};

const KernelTable& scalar_kernel_table();
// nullptr when the build or the CPU lacks AVX2/FMA/F16C.
const KernelTable* avx2_kernel_table();
// The fastest table this CPU supports (chosen once).
const KernelTable& best_kernel_table();

// Which table the public attend() uses; tests force one to compare targets. nullptr: best.
void set_kernel_table_override(const KernelTable* table);
const KernelTable& active_kernel_table();

}  // namespace turbokv::attn
