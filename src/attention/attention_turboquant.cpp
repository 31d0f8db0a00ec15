// Fused attention over a TurboQuantKVCache: reads the packed code pages in place and never
// materializes dequantized keys or values.
//
//   score(q, k)  = s_k <R q, c[idx_k]>                       (mse keys)
//                + gamma_k sqrt(pi/2)/d <S R q, sign_k>        (prod keys: the QJL term)
//   out          = R_v^T (sum_t p_t s_v,t c[idx_v,t]) / l      (+ exact window/sink terms)
// A centered cache stores k - mean_k and v - mean_v: compressed scores then get + <q, mean_k>,
// and mean_v is added to the original-basis accumulator with the compressed tokens' weight.
// Each query is rotated (and, for prod keys, projected by S) once; value codes are accumulated
// in the values' rotated basis with weight softmax * norm and un-rotated once per row at the
// end. Sinks and the recent window are float32 and attended exactly in the same online-softmax
// pass; their values accumulate in the original basis next to the rotated accumulator.
//
// Prepared query row (floats): [group0 q_rot | group1 q_rot | S q_rot (prod) | q (original)],
// each part zero padded to a multiple of 8. Accumulator row: [value group0 | value group1 |
// original-basis values].
//
// Integer arithmetic (AttentionArithmetic::int8, attention_kernels.hpp's int8_* kernels; int16_*
// for 8-bit groups): each key group's part of the row holds the rotated query as int8 (int16)
// values (dims / 4 or dims / 2 floats' room) plus one float, its scale (the row's max / levels
// times the codebook's integer scale); the compressed tokens' softmax weights times their value
// norms become 7-bit (12-bit) integers per row and block. Sinks and window stay float.
//
// Prefill (a call with several queries, mse keys): tiles of kPrefillRows rows. In exact
// arithmetic each block's codes are decoded once (group_decode) into centroid rows laid out as
// the prepared query rows (keys) and accumulators (values), which the blocked prefill kernels
// multiply by all the tile's rows; in int8 arithmetic the prefill_int8_* kernels do the same
// with integer centroids (the 8-row kernels' sums, so the same results per row); decode tiles of
// four rows or more take them too (see Int8Blocks).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <type_traits>
#include <vector>

#include "attention/attention_engine.hpp"
#include "attention/attention_paths.hpp"
#include "core/check.hpp"

namespace turbokv::attn {

namespace {

const float kSignTable[2] = {-1.0f, 1.0f};

inline size_t pad8(size_t n) { return (n + 7) / 8 * 8; }

// The code groups of a record (1 or 2) as kernel descriptors.
int describe_groups(const CodeLayout& layout, const LloydMaxCodebook& hi,
                    const LloydMaxCodebook& lo, CodeGroup* groups) {
  int n = 0;
  groups[n].bits = layout.bits_hi;
  groups[n].dims = layout.dims_hi;
  groups[n].offset = layout.group0_offset;
  groups[n].table = hi.centroids().data();
  finish_code_group(groups[n], layout.code_size);
  ++n;
  if (layout.dims_lo > 0) {
    groups[n].bits = layout.bits_lo;
    groups[n].dims = layout.dims_lo;
    groups[n].offset = layout.group1_offset;
    groups[n].table = lo.centroids().data();
    finish_code_group(groups[n], layout.code_size);
    ++n;
  }
  return n;
}

// The codebook rounded to integers (the largest |centroid| becomes `levels`); returns the scale
// back. The int8 table holds 16 entries, the int16 one 256.
template <typename T>
float integer_table(const LloydMaxCodebook& book, T* table, size_t size, int levels) {
  const std::span<const float> c = book.centroids();
  float cmax = 0.0f;
  for (float v : c) cmax = std::max(cmax, std::fabs(v));
  std::fill(table, table + size, T{0});
  const float mul = cmax > 0.0f ? static_cast<float>(levels) / cmax : 0.0f;
  for (size_t i = 0; i < c.size() && i < size; ++i) table[i] = static_cast<T>(std::lrint(c[i] * mul));
  return cmax / static_cast<float>(levels);
}

// 8-bit groups take the int16 kernels, 2-4-bit ones the int8 kernels.
bool wide_group(int bits) { return bits == 8; }

// Whether the integer kernels take this cache: mse keys, every group of a supported shape.
bool int8_layout_supported(const TurboQuantKVCache& cache, const KernelTable& kernels) {
  if (kernels.int8_dots == nullptr || cache.key_prod() != nullptr) return false;
  const auto supported = [&](int bits, int dims) {
    return wide_group(bits) ? kernels.int16_dots != nullptr && int16_group_supported(bits, dims)
                            : int8_group_supported(bits, dims);
  };
  for (const CodeLayout* layout : {&cache.key_mse()->layout(), &cache.value_codec().layout()}) {
    if (!supported(layout->bits_hi, layout->dims_hi)) return false;
    if (layout->dims_lo > 0 && !supported(layout->bits_lo, layout->dims_lo)) return false;
  }
  return true;
}

class TurboQuantSource : public BlockSource {
 public:
  // prefill: tiles of kPrefillRows rows through the prefill kernels (mse keys only).
  TurboQuantSource(const TurboQuantKVCache& cache, const KernelTable& kernels, bool int8, bool prefill)
      : cache_(cache), dim_(cache.head_dim()), chunk_order4_(kernels.chunk_order4), int8_(int8), prefill_(prefill) {
    TURBOKV_CHECK(!(prefill && cache.key_prod() != nullptr), "TurboQuantSource: prefill tiles take mse keys");
    const TurboQuantMse* mse = cache.key_mse();
    const TurboQuantProd* prod = cache.key_prod();
    key_layout_ = prod != nullptr ? prod->layout() : mse->layout();
    n_key_groups_ = prod != nullptr ? describe_groups(key_layout_, prod->codebook(0), prod->codebook(1), key_groups_)
                                    : describe_groups(key_layout_, mse->codebook(0), mse->codebook(1), key_groups_);
    const TurboQuantMse& values = cache.value_codec();
    value_layout_ = values.layout();
    n_value_groups_ = describe_groups(value_layout_, values.codebook(0), values.codebook(1), value_groups_);
    size_t q = 0;
    for (int g = 0; g < n_key_groups_; ++g) {
      q_offset_[g] = q;
      if (int8_) {
        // dims int8 (or int16) values, then the scale.
        CodeGroup& group = key_groups_[g];
        const size_t room = wide_group(group.bits) ? group.dims / 2 : group.dims / 4;
        q_scale_[g] = q + room;
        q += room + 1;
        set_integer_table(cache.key_mse()->codebook(g), group, key_table8_[g], key_table16_[g], key_int8_scale_[g]);
        key_int8_order_[g] = int8_order(kernels, group, false);
      } else {
        q += key_groups_[g].padded_dims();
      }
    }
    q = pad8(q);
    if (prod != nullptr) {
      qjl_ = true;
      qjl_group_.bits = 1;
      qjl_group_.dims = dim_;
      qjl_group_.offset = key_layout_.qjl_offset;
      qjl_group_.table = kSignTable;
      finish_code_group(qjl_group_, key_layout_.code_size);
      qjl_coef_ = static_cast<float>(TurboQuantProd::qjl_scale(dim_));
      q_qjl_ = q;
      q += qjl_group_.padded_dims();
    }
    q_orig_ = q;
    q_width_ = q + pad8(dim_);
    size_t a = 0;
    for (int g = 0; g < n_value_groups_; ++g) {
      acc_offset_[g] = a;
      a += value_groups_[g].padded_dims();
      if (int8_) {
        set_integer_table(values.codebook(g), value_groups_[g], value_table8_[g], value_table16_[g],
                          value_int8_scale_[g]);
        value_int8_order_[g] = int8_order(kernels, value_groups_[g], true);
        (wide_group(value_groups_[g].bits) ? value_wide_ : value_narrow_) = true;
      }
    }
    acc_orig_ = a;
    acc_width_ = a + pad8(dim_);
  }

  size_t q_width() const { return q_width_; }
  size_t acc_width() const { return acc_width_; }

  // Fills the prepared rows from the original query rows ([n][dim]).
  void prepare_queries(const float* q, size_t n, float* rows) const {
    float* rotated = call_buffer(CallBuffer::rotated, n * dim_);
    float* projected = qjl_ ? call_buffer(CallBuffer::projected, n * dim_) : nullptr;
    const TurboQuantProd* prod = cache_.key_prod();
    if (prod != nullptr) prod->rotation().forward(q, rotated, n);
    else cache_.key_mse()->rotation().forward(q, rotated, n);
    if (qjl_) prod->qjl_project(rotated, projected, n);
    std::fill(rows, rows + n * q_width_, 0.0f);
    for (size_t i = 0; i < n; ++i) {
      float* row = rows + i * q_width_;
      const float* y = rotated + i * dim_;
      int first = 0;
      for (int g = 0; g < n_key_groups_; ++g) {
        const CodeGroup& group = key_groups_[g];
        if (int8_) {
          quantize_query(y + first, group, key_int8_order_[g], key_int8_scale_[g], row + q_offset_[g], row + q_scale_[g]);
          first += group.dims;
          continue;
        }
        const uint8_t* order = chunk_order(group);
        for (int j = 0; j < group.dims || (order != nullptr && j < group.padded_dims()); ++j) {
          const int source = order != nullptr ? j / 8 * 8 + order[j % 8] : j;
          if (source < group.dims) row[q_offset_[g] + j] = y[first + source];
        }
        first += group.dims;
      }
      if (qjl_) std::copy(projected + i * dim_, projected + (i + 1) * dim_, row + q_qjl_);
      std::copy(q + i * dim_, q + (i + 1) * dim_, row + q_orig_);
    }
  }

  // Un-rotates the value accumulators of n normalized rows and adds the exact part: out [n][dim].
  void finish_rows(const float* acc_rows, size_t n, float* out) const {
    float* rotated = call_buffer(CallBuffer::rotated, n * dim_);
    std::fill(rotated, rotated + n * dim_, 0.0f);
    for (size_t i = 0; i < n; ++i) {
      const float* a = acc_rows + i * acc_width_;
      int first = 0;
      for (int g = 0; g < n_value_groups_; ++g) {
        const CodeGroup& group = value_groups_[g];
        const uint8_t* order = int8_ ? nullptr : chunk_order(group);
        for (int j = 0; j < group.padded_dims(); ++j) {
          const int target = int8_ ? value_int8_order_[g][j] : order != nullptr ? j / 8 * 8 + order[j % 8] : j;
          if (target < group.dims) rotated[i * dim_ + first + target] = a[acc_offset_[g] + j];
        }
        first += group.dims;
      }
    }
    cache_.value_codec().rotation().inverse(rotated, out, n);
    for (size_t i = 0; i < n; ++i) {
      const float* exact = acc_rows + i * acc_width_ + acc_orig_;
      for (int j = 0; j < dim_; ++j) out[i * dim_ + j] += exact[j];
    }
  }

  void process(int head, size_t begin, size_t end, Tile& tile) const override {
    const size_t n_sinks = cache_.n_sinks();
    const size_t compressed_end = n_sinks + cache_.compressed_size();
    const bool f16 = cache_.exact_f16();
    if (begin < n_sinks) {
      if (f16) {
        exact_range(cache_.sink_keys_f16(head), cache_.sink_values_f16(head), 0, begin, std::min(end, n_sinks), tile);
      } else {
        exact_range(cache_.sink_keys(head), cache_.sink_values(head), 0, begin, std::min(end, n_sinks), tile);
      }
    }
    if (begin < compressed_end && end > n_sinks) {
      compressed_range(head, std::max(begin, n_sinks), std::min(end, compressed_end), tile);
    }
    if (end > compressed_end) {
      if (f16) {
        exact_range(cache_.window_keys_f16(head), cache_.window_values_f16(head), compressed_end,
                    std::max(begin, compressed_end), end, tile);
      } else {
        exact_range(cache_.window_keys(head), cache_.window_values(head), compressed_end,
                    std::max(begin, compressed_end), end, tile);
      }
    }
  }

 private:
  // Exact tokens [begin, end) of a region that starts at token `first` (rows of dim float32 or
  // fp16 values: the dense kernels of either type).
  template <typename T>
  void exact_range(const T* keys, const T* values, size_t first, size_t begin, size_t end, Tile& tile) const {
    const KernelTable& k = *tile.kernels;
    for (size_t t = begin; t < end;) {
      const size_t n = std::min<size_t>(kBlockTokens, end - t);
      const T* kb = keys + (t - first) * dim_;
      const T* vb = values + (t - first) * dim_;
      tile.step(
          n, t,
          [&](float* s) {
            if constexpr (std::is_same_v<T, float>) {
              (prefill_ ? k.prefill_dots_f32 : k.dots_f32)(tile.q + q_orig_, tile.q_width, tile.rows, kb, n, dim_, s,
                                                           kBlockTokens);
            } else {
              (prefill_ ? k.prefill_dots_f16 : k.dots_f16)(tile.q + q_orig_, tile.q_width, tile.rows, kb, n, dim_, s,
                                                           kBlockTokens);
            }
          },
          [&](const float* w) {
            float* acc = tile.acc.data() + acc_orig_;
            if constexpr (std::is_same_v<T, float>) {
              (prefill_ ? k.prefill_accumulate_f32 : k.accumulate_f32)(w, kBlockTokens, tile.rows, vb, n, dim_, acc,
                                                                       tile.acc_width);
            } else {
              (prefill_ ? k.prefill_accumulate_f16 : k.accumulate_f16)(w, kBlockTokens, tile.rows, vb, n, dim_, acc,
                                                                       tile.acc_width);
            }
          });
      t += n;
    }
  }

  // One block of compressed tokens of a page: n records of keys and of values from token `first`.
  struct Block {
    const uint8_t* keys = nullptr;
    const uint8_t* values = nullptr;
    size_t n = 0;
    size_t first = 0;
  };

  // The compressed tokens [begin, end): the block pipeline, one for every arithmetic. For each
  // block: the key products into the scores, the key norms, the softmax (tile.step), the value
  // weights, the value products; the next block's keys and values prefetched in halves between
  // the phases (for_each_block). `Arithmetic` supplies the four arithmetic-specific parts:
  // keys(block, s), scale(block, s, key_norm, q_dot_center), weights(p, n, value_norm) and
  // values(block) (ExactBlocks, PrefillBlocks, Int8Blocks below).
  void compressed_range(int head, size_t begin, size_t end, Tile& tile) const {
    if (int8_) {
      Int8Blocks arithmetic(*this, tile);
      compressed_blocks(head, begin, end, tile, arithmetic);
    } else if (prefill_) {
      PrefillBlocks arithmetic(*this, tile);
      compressed_blocks(head, begin, end, tile, arithmetic);
    } else {
      ExactBlocks arithmetic(*this, tile);
      compressed_blocks(head, begin, end, tile, arithmetic);
    }
  }

  template <typename Arithmetic>
  void compressed_blocks(int head, size_t begin, size_t end, Tile& tile, Arithmetic& arithmetic) const {
    const KernelTable& k = *tile.kernels;
    const size_t kcs = key_layout_.code_size;
    const size_t vcs = value_layout_.code_size;
    float key_norm[kBlockTokens], value_norm[kBlockTokens];
    const float* value_center = cache_.value_center(head);
    float q_dot_center[kPrefillRows] = {};
    queries_dot_center(tile, cache_.key_center(head), q_dot_center);
    for_each_block(head, begin, end, [&](const Block& block, const Block& next) {
      const size_t n = block.n;
      const auto dots = [&](float* s) {
        prefetch_half(next.keys, next.n * kcs, 0);
        arithmetic.keys(block, s);
        prefetch_half(next.keys, next.n * kcs, 1);
        k.load_norms(block.keys + key_layout_.norm_offset, kcs, n, key_layout_.fp32_norm, key_norm);
        arithmetic.scale(block, s, key_norm, q_dot_center);
      };
      const auto accumulate = [&](const float* p) {
        prefetch_half(next.values, next.n * vcs, 0);
        k.load_norms(block.values + value_layout_.norm_offset, vcs, n, value_layout_.fp32_norm, value_norm);
        arithmetic.weights(p, n, value_norm);
        prefetch_half(next.values, next.n * vcs, 1);
        add_value_center(tile, p, n, value_center);
        arithmetic.values(block);
      };
      tile.step(n, block.first, dots, accumulate);
    });
  }

  // Float kernels straight over the codes (a decode step's tile; QJL keys in any call).
  struct ExactBlocks {
    const TurboQuantSource& src;
    Tile& tile;
    ExactBlocks(const TurboQuantSource& source, Tile& t) : src(source), tile(t) {}

    void keys(const Block& b, float* s) const {
      for (int g = 0; g < src.n_key_groups_; ++g) {
        tile.kernels->group_dots(tile.q + src.q_offset_[g], tile.q_width, tile.rows, b.keys,
                                 src.key_layout_.code_size, b.n, src.key_groups_[g], s, kBlockTokens, g > 0);
      }
    }
    // score = s_k <q, c> (+ gamma_k sqrt(pi/2)/d <S q, sign_k> for QJL keys) + <q, mean_k>.
    void scale(const Block& b, float* s, const float* key_norm, const float* q_dot_center) const {
      const KernelTable& k = *tile.kernels;
      const size_t n = b.n;
      if (!src.qjl_) {
        k.scale_scores(s, kBlockTokens, tile.rows, n, key_norm, q_dot_center);
        return;
      }
      float* correction = tile.weights;  // free until the softmax fills it
      float gamma[kBlockTokens];
      const size_t kcs = src.key_layout_.code_size;
      k.group_dots(tile.q + src.q_qjl_, tile.q_width, tile.rows, b.keys, kcs, n, src.qjl_group_, correction,
                   kBlockTokens, false);
      k.load_norms(b.keys + src.key_layout_.residual_norm_offset, kcs, n, src.key_layout_.fp32_norm, gamma);
      for (size_t i = 0; i < n; ++i) gamma[i] *= src.qjl_coef_;
      for (int r = 0; r < tile.rows; ++r) {
        for (size_t i = 0; i < n; ++i) {
          s[r * kBlockTokens + i] =
              s[r * kBlockTokens + i] * key_norm[i] + gamma[i] * correction[r * kBlockTokens + i] + q_dot_center[r];
        }
      }
    }
    void weights(const float* p, size_t n, const float* value_norm) const {
      scale_weights(tile, p, n, value_norm);
    }
    void values(const Block& b) const {
      for (int g = 0; g < src.n_value_groups_; ++g) {
        tile.kernels->group_accumulate(tile.weights, kBlockTokens, tile.rows, b.values, src.value_layout_.code_size,
                                       b.n, src.value_groups_[g], tile.acc.data() + src.acc_offset_[g],
                                       tile.acc_width);
      }
    }
  };

  // Prefill tiles in float: each block's codes decoded once to centroid rows (key groups side
  // by side as in the query rows, q_orig_ floats; value groups as in the accumulators, acc_orig_
  // floats), then the blocked prefill kernels.
  struct PrefillBlocks {
    const TurboQuantSource& src;
    Tile& tile;
    std::vector<float> decoded;
    PrefillBlocks(const TurboQuantSource& source, Tile& t)
        : src(source), tile(t), decoded(static_cast<size_t>(kBlockTokens) * std::max(source.q_orig_, source.acc_orig_)) {}

    void keys(const Block& b, float* s) {
      const KernelTable& k = *tile.kernels;
      for (int g = 0; g < src.n_key_groups_; ++g) {
        k.group_decode(b.keys, src.key_layout_.code_size, b.n, src.key_groups_[g], decoded.data() + src.q_offset_[g],
                       src.q_orig_);
      }
      k.prefill_dots_f32(tile.q, tile.q_width, tile.rows, decoded.data(), b.n, static_cast<int>(src.q_orig_), s,
                         kBlockTokens);
    }
    void scale(const Block& b, float* s, const float* key_norm, const float* q_dot_center) const {
      tile.kernels->scale_scores(s, kBlockTokens, tile.rows, b.n, key_norm, q_dot_center);
    }
    void weights(const float* p, size_t n, const float* value_norm) const {
      scale_weights(tile, p, n, value_norm);
    }
    void values(const Block& b) {
      const KernelTable& k = *tile.kernels;
      for (int g = 0; g < src.n_value_groups_; ++g) {
        k.group_decode(b.values, src.value_layout_.code_size, b.n, src.value_groups_[g],
                       decoded.data() + src.acc_offset_[g], src.acc_orig_);
      }
      k.prefill_accumulate_f32(tile.weights, kBlockTokens, tile.rows, decoded.data(), b.n,
                               static_cast<int>(src.acc_orig_), tile.acc.data(), tile.acc_width);
    }
  };

  // The integer kernels (mse keys only): int8 query rows against integer centroids, the value
  // weights as 7-bit (12-bit for 8-bit groups) integers per row and block.
  struct Int8Blocks {
    const TurboQuantSource& src;
    Tile& tile;
    decltype(KernelTable::int8_dots) int8_dots;
    decltype(KernelTable::int8_accumulate) int8_accumulate;
    size_t q_stride;
    float key_scale[2][kPrefillRows], value_scale[2][kPrefillRows];
    float weight_scale[kPrefillRows], weight_scale16[kPrefillRows];
    alignas(32) uint8_t w8[kPrefillRows * kBlockTokens];
    alignas(32) uint16_t w16[kPrefillRows * kBlockTokens];

    Int8Blocks(const TurboQuantSource& source, Tile& t)
        : src(source),
          tile(t),
          int8_dots(takes_tiles(source, t) ? t.kernels->prefill_int8_dots : t.kernels->int8_dots),
          int8_accumulate(takes_tiles(source, t) ? t.kernels->prefill_int8_accumulate : t.kernels->int8_accumulate),
          q_stride(t.q_width * sizeof(float)) {
      for (int r = 0; r < tile.rows; ++r) {
        for (int g = 0; g < src.n_key_groups_; ++g) key_scale[g][r] = tile.q[r * tile.q_width + src.q_scale_[g]];
      }
    }

    // A decode step's tile (one query per head: the GQA group's rows) also takes the tile
    // kernels from four rows on: decoding and transposing a block once for four rows beats the
    // 8-row kernels' per-token reductions (attention-bench at 32K, head_dim 64 and 128, four
    // rows: int8 / fused exact 0.84-0.89 against 0.86-1.06); for one row it does not (1.07
    // against 1.01).
    static bool takes_tiles(const TurboQuantSource& source, const Tile& t) { return source.prefill_ || t.rows >= 4; }

    void keys(const Block& b, float* s) const {
      const size_t kcs = src.key_layout_.code_size;
      for (int g = 0; g < src.n_key_groups_; ++g) {
        const float* q = tile.q + src.q_offset_[g];
        if (wide_group(src.key_groups_[g].bits)) {
          tile.kernels->int16_dots(reinterpret_cast<const int16_t*>(q), q_stride / 2, tile.rows, key_scale[g],
                                   b.keys, kcs, b.n, src.key_groups_[g], s, kBlockTokens, g > 0);
        } else {
          int8_dots(reinterpret_cast<const int8_t*>(q), q_stride, tile.rows, key_scale[g], b.keys, kcs, b.n,
                    src.key_groups_[g], s, kBlockTokens, g > 0);
        }
      }
    }
    void scale(const Block& b, float* s, const float* key_norm, const float* q_dot_center) const {
      tile.kernels->scale_scores(s, kBlockTokens, tile.rows, b.n, key_norm, q_dot_center);
    }
    void weights(const float* p, size_t n, const float* value_norm) {
      const KernelTable& k = *tile.kernels;
      if (src.value_narrow_) {
        k.int8_weights(p, kBlockTokens, tile.rows, value_norm, n, k.int8_weight_levels, w8, weight_scale);
      }
      if (src.value_wide_) k.int16_weights(p, kBlockTokens, tile.rows, value_norm, n, w16, weight_scale16);
      for (int r = 0; r < tile.rows; ++r) {
        for (int g = 0; g < src.n_value_groups_; ++g) {
          const float ws = wide_group(src.value_groups_[g].bits) ? weight_scale16[r] : weight_scale[r];
          value_scale[g][r] = ws * src.value_int8_scale_[g];
        }
      }
    }
    void values(const Block& b) const {
      const size_t vcs = src.value_layout_.code_size;
      for (int g = 0; g < src.n_value_groups_; ++g) {
        float* acc = tile.acc.data() + src.acc_offset_[g];
        if (wide_group(src.value_groups_[g].bits)) {
          tile.kernels->int16_accumulate(w16, kBlockTokens, tile.rows, value_scale[g], b.values, vcs, b.n,
                                         src.value_groups_[g], acc, tile.acc_width);
        } else {
          int8_accumulate(w8, kBlockTokens, tile.rows, value_scale[g], b.values, vcs, b.n, src.value_groups_[g], acc,
                          tile.acc_width);
        }
      }
    }
  };

  // The float paths' value weights: softmax weight times value norm, into tile.weights.
  static void scale_weights(Tile& tile, const float* p, size_t n, const float* value_norm) {
    for (int r = 0; r < tile.rows; ++r) {
      for (size_t i = 0; i < n; ++i) tile.weights[r * kBlockTokens + i] = p[r * kBlockTokens + i] * value_norm[i];
    }
  }

  // Calls fn(block, next) for each block of at most kBlockTokens compressed tokens of
  // [begin, end) (absolute positions) within one page; next is the block after it (n = 0 after
  // the last). fn prefetches next's keys and values in halves (prefetch_half) as its block's
  // phases go: a block's work takes far longer than a memory access, and without prefetching a
  // 32K decode step spent most of its key decoding waiting on each block's first code loads.
  template <typename Fn>
  void for_each_block(int head, size_t begin, size_t end, Fn&& fn) const {
    const size_t n_sinks = cache_.n_sinks();
    const size_t page_tokens = cache_.page_tokens();
    const size_t kcs = key_layout_.code_size;
    const size_t vcs = value_layout_.code_size;
    // The page's codes, looked up once per page, and the next page's record prefetched: the
    // cache's checked accessors, called for every block and waiting on each page's cold
    // record, took 1.65% of a 32K tq4-i8 decode step on a Zen 5.
    size_t page = SIZE_MAX, page_first = 0, page_end = 0;
    const uint8_t* page_keys = nullptr;
    const uint8_t* page_values = nullptr;
    // The block at compressed index c (c + n_sinks < end).
    const auto block_at = [&](size_t c) {
      if (c / page_tokens != page) {
        page = c / page_tokens;
        page_first = page * page_tokens;
        page_end = std::min(end - n_sinks, page_first + cache_.tokens_in_page(page));
        page_keys = cache_.key_codes(page, head);
        page_values = cache_.value_codes(page, head);
        cache_.prefetch_page(page + 1);
      }
      Block b;
      b.keys = page_keys + (c - page_first) * kcs;
      b.values = page_values + (c - page_first) * vcs;
      b.n = std::min<size_t>(kBlockTokens, page_end - c);
      b.first = n_sinks + c;
      return b;
    };
    if (begin >= end) return;
    Block block = block_at(begin - n_sinks);
    prefetch_bytes(block.values, block.n * vcs);  // the first block's values, read after its scores
    while (block.n > 0) {
      const size_t next_first = block.first + block.n;
      const Block next = next_first < end ? block_at(next_first - n_sinks) : Block{};
      fn(block, next);
      block = next;
    }
  }

  // q . mean_k of each row of the tile (centered caches; zeros otherwise).
  void queries_dot_center(const Tile& tile, const float* key_center, float* out) const {
    if (key_center == nullptr) return;
    for (int r = 0; r < tile.rows; ++r) {
      const float* q = tile.q + r * tile.q_width + q_orig_;
      double dot = 0.0;
      for (int j = 0; j < dim_; ++j) dot += static_cast<double>(q[j]) * key_center[j];
      out[r] = static_cast<float>(dot);
    }
  }

  // A centered cache's value mean, weighted by the block's softmax mass, into the exact part.
  void add_value_center(Tile& tile, const float* p, size_t n, const float* value_center) const {
    if (value_center == nullptr) return;
    for (int r = 0; r < tile.rows; ++r) {
      float mass = 0.0f;
      for (size_t i = 0; i < n; ++i) mass += p[r * kBlockTokens + i];
      float* exact = tile.acc.data() + r * tile.acc_width + acc_orig_;
      for (int j = 0; j < dim_; ++j) exact[j] += mass * value_center[j];
    }
  }

  // One group of a rotated query row -> int8 (int16 for 8-bit groups) values in the kernels'
  // key order at `room` and its scale (the row's max / levels times the codebook's integer
  // scale) at *scale. A row of zeros gets scale 0; a non-finite row a NaN scale, so its scores
  // are NaN, as the exact path's are.
  void quantize_query(const float* y, const CodeGroup& group, const std::vector<uint16_t>& order,
                      float codebook_scale, float* room, float* scale) const {
    float ymax = 0.0f;
    bool finite = true;
    for (int j = 0; j < group.dims; ++j) {
      finite = finite && std::isfinite(y[j]);
      ymax = std::max(ymax, std::fabs(y[j]));
    }
    const bool wide = wide_group(group.bits);
    const long levels = wide ? kInt16Max : int8_query_levels(group.bits);
    const float inv = finite && ymax > 0.0f ? static_cast<float>(levels) / ymax : 0.0f;
    for (int j = 0; j < group.dims; ++j) {
      const long v = std::clamp<long>(std::lrint(y[order[j]] * inv), -levels, levels);
      if (wide) reinterpret_cast<int16_t*>(room)[j] = static_cast<int16_t>(v);
      else reinterpret_cast<int8_t*>(room)[j] = static_cast<int8_t>(v);
    }
    *scale = finite ? ymax / static_cast<float>(levels) * codebook_scale : std::numeric_limits<float>::quiet_NaN();
  }

  // The kernels' order of a group's coordinates (KernelTable::int8_order; identity if none).
  static std::vector<uint16_t> int8_order(const KernelTable& kernels, const CodeGroup& group, bool values) {
    std::vector<uint16_t> order(group.dims);
    for (int j = 0; j < group.dims; ++j) order[j] = static_cast<uint16_t>(j);
    if (wide_group(group.bits)) {
      if (kernels.int16_order != nullptr) kernels.int16_order(group.dims, values, order.data());
    } else if (kernels.int8_order != nullptr) {
      kernels.int8_order(group.bits, group.dims, values, order.data());
    }
    return order;
  }

  static void set_integer_table(const LloydMaxCodebook& book, CodeGroup& group, int8_t* table8, int16_t* table16,
                                float& scale) {
    if (wide_group(group.bits)) {
      scale = integer_table(book, table16, 256, kInt16Max);
      group.table16 = table16;
    } else {
      scale = integer_table(book, table8, 16, 127);
      group.table8 = table8;
    }
  }

  // Where a kernel table keeps 4-bit groups in its own chunk order (see KernelTable).
  const uint8_t* chunk_order(const CodeGroup& group) const {
    return group.bits == 4 ? chunk_order4_ : nullptr;
  }

  const TurboQuantKVCache& cache_;
  int dim_;
  const uint8_t* chunk_order4_;
  bool int8_;
  bool prefill_;
  std::vector<uint16_t> key_int8_order_[2], value_int8_order_[2];
  int8_t key_table8_[2][16] = {}, value_table8_[2][16] = {};
  int16_t key_table16_[2][256] = {}, value_table16_[2][256] = {};
  bool value_narrow_ = false, value_wide_ = false;  // value groups of each integer width
  float key_int8_scale_[2] = {}, value_int8_scale_[2] = {};
  size_t q_scale_[2] = {};
  CodeLayout key_layout_, value_layout_;
  CodeGroup key_groups_[2], value_groups_[2], qjl_group_;
  int n_key_groups_ = 0, n_value_groups_ = 0;
  bool qjl_ = false;
  float qjl_coef_ = 0.0f;
  size_t q_offset_[2] = {}, q_qjl_ = 0, q_orig_ = 0, q_width_ = 0;
  size_t acc_offset_[2] = {}, acc_orig_ = 0, acc_width_ = 0;
};

}  // namespace

void attend_turboquant(const AttentionRequest& request, const TurboQuantKVCache& cache) {
  const int kv_heads = cache.kv_heads();
  const int dim = cache.head_dim();
  const int group = request.n_q_heads / kv_heads;
  const size_t n_rows = static_cast<size_t>(request.n_q_heads) * request.n_queries;
  const KernelTable& kernels = active_kernel_table();
  const AttentionArithmetic arithmetic = request.options.arithmetic;
  const bool want_int8 = arithmetic == AttentionArithmetic::int8 ||
                         (arithmetic == AttentionArithmetic::cache_default && cache.options().int8_attention);
  // A prompt chunk of an mse-key cache attends in prefill tiles (see the top of this file), in
  // either arithmetic; one query (a decode step) and QJL keys keep the tiles of kMaxRows.
  const bool int8 = want_int8 && int8_layout_supported(cache, kernels);
  const bool prefill = prefill_tile_rows(request.n_queries) == kPrefillRows && cache.key_prod() == nullptr;
  const TurboQuantSource source(cache, kernels, int8, prefill);

  float* original = call_buffer(CallBuffer::queries, n_rows * dim);
  gather_query_rows(request.queries, kv_heads, group, request.n_queries, dim, original, dim, 0);
  float* rows = call_buffer(CallBuffer::prepared, n_rows * source.q_width());
  source.prepare_queries(original, n_rows, rows);

  Problem problem;
  problem.kv_heads = kv_heads;
  problem.group = group;
  problem.n_queries = request.n_queries;
  problem.n_tokens = cache.size();
  problem.q_width = source.q_width();
  problem.acc_width = source.acc_width();
  problem.rows = rows;
  problem.options = request.options;
  problem.scale = effective_scale(request.options, dim);
  problem.kernels = &kernels;
  problem.tile_rows = prefill ? kPrefillRows : kMaxRows;
  float* result = call_buffer(CallBuffer::result, n_rows * source.acc_width());
  run_attention(problem, source, result);

  source.finish_rows(result, n_rows, original);
  scatter_output_rows(original, dim, 0, kv_heads, group, request.n_queries, dim, request.out);
}

}  // namespace turbokv::attn
