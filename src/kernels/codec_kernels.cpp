// Highway SIMD kernels of the codec's hot loops, compiled for every attainable x86 target and
// chosen at runtime (HWY_DYNAMIC_DISPATCH, once per call). Each kernel performs exactly the float
// operations of its scalar reference (src/core/codec_reference.cpp) in the same per-element
// order, so results are bit-identical; tests/core/test_codec_simd.cpp checks this on every target.
//
// Vectors are capped at 8 lanes: a group of 8 codes then fills whole vectors, so packing and
// unpacking (bits <= 4: one 32-bit word per group of 8 codes) need no cross-group shuffles.
#include "kernels/codec_kernels.hpp"

#include <algorithm>
#include <cstring>

#include "turbokv/packing.hpp"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/codec_kernels.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace turbokv::kernels {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::CappedTag<float, 8>;
using DI = hn::RebindToSigned<DF>;
using DU = hn::RebindToUnsigned<DF>;
using DU8 = hn::Rebind<uint8_t, DF>;

constexpr size_t kChunk = 256;  // codes per staging buffer; 256 codes fill whole bytes

// Butterflies at distance h < N inside one vector: partner lane = lane ^ h; lanes with bit h set
// compute partner - self (= lo - hi), the others self + partner (= lo + hi).
template <class V>
HWY_INLINE V ButterflyInVector(DF df, V v, int h) {
  const DI di;
  const auto lane = hn::Iota(di, 0);
  const auto partner_index = hn::Xor(lane, hn::Set(di, h));
  const V partner = hn::TableLookupLanes(v, hn::IndicesFromVec(df, partner_index));
  const auto is_hi = hn::RebindMask(df, hn::Ne(hn::And(lane, hn::Set(di, h)), hn::Zero(di)));
  return hn::IfThenElse(is_hi, hn::Sub(partner, v), hn::Add(v, partner));
}

void FwhtBlocks(float* HWY_RESTRICT x, int log2_blocks, int block, float scale) {
  const DF df;
  const size_t N = hn::Lanes(df);
  const size_t blocks = size_t{1} << log2_blocks;
  const size_t m = static_cast<size_t>(block);
  const size_t total = blocks * m;
  size_t h = 1;
  if (m == 1 && total >= N && N > 1) {
    // All stages with h < N in registers, one vector at a time.
    for (size_t i = 0; i < total; i += N) {
      auto v = hn::LoadU(df, x + i);
      for (size_t hh = 1; hh < N; hh *= 2) v = ButterflyInVector(df, v, static_cast<int>(hh));
      hn::StoreU(v, df, x + i);
    }
    h = N;
  }
  for (; h < blocks; h *= 2) {
    const size_t stride = h * m;  // contiguous run of lo values, partner run `stride` later
    for (size_t start = 0; start < total; start += 2 * stride) {
      float* lo = x + start;
      float* hi = lo + stride;
      size_t j = 0;
      for (; j + N <= stride; j += N) {
        const auto u = hn::LoadU(df, lo + j);
        const auto v = hn::LoadU(df, hi + j);
        hn::StoreU(hn::Add(u, v), df, lo + j);
        hn::StoreU(hn::Sub(u, v), df, hi + j);
      }
      for (; j < stride; ++j) {
        const float u = lo[j];
        const float v = hi[j];
        lo[j] = u + v;
        hi[j] = u - v;
      }
    }
  }
  const auto vscale = hn::Set(df, scale);
  size_t i = 0;
  for (; i + N <= total; i += N) hn::StoreU(hn::Mul(hn::LoadU(df, x + i), vscale), df, x + i);
  for (; i < total; ++i) x[i] *= scale;
}

// Codes (as int32 lanes) of the N floats at y: the number of boundaries below y * inv_norm.
HWY_INLINE hn::Vec<DI> CodesOf(DF df, const float* HWY_RESTRICT y, hn::Vec<DF> vinv,
                               const float* HWY_RESTRICT boundaries, int bits) {
  const DI di;
  const auto u = hn::Mul(hn::LoadU(df, y), vinv);
  auto idx = hn::Zero(di);
  const int n_boundaries = (1 << bits) - 1;
  if (bits <= 4) {
    for (int j = 0; j < n_boundaries; ++j) {
      // A true mask is all ones, i.e. -1 as int32: subtracting it counts the boundary.
      idx = hn::Sub(idx, hn::BitCast(di, hn::VecFromMask(df, hn::Gt(u, hn::Set(df, boundaries[j])))));
    }
  } else {
    // Branchless binary search: after the loop idx = #{boundaries < u}, like std::lower_bound.
    for (int step = 1 << (bits - 1); step >= 1; step >>= 1) {
      const auto probe = hn::GatherIndex(df, boundaries, hn::Add(idx, hn::Set(di, step - 1)));
      idx = hn::IfThenElse(hn::RebindMask(di, hn::Gt(u, probe)), hn::Add(idx, hn::Set(di, step)), idx);
    }
  }
  return idx;
}

// Whole groups of 8 codes (bits <= 4): shift each code to its bit position, OR (= sum, the bits
// are disjoint) the lanes into one 32-bit word, store its kBits low bytes. Returns codes done.
template <int kBits>
HWY_INLINE size_t PackGroups(DF df, const float* HWY_RESTRICT ys, size_t count, hn::Vec<DF> vinv,
                             const float* HWY_RESTRICT boundaries, uint8_t* HWY_RESTRICT out) {
  const DU du;
  const size_t N = hn::Lanes(df);
  const auto lane_shift = hn::Mul(hn::And(hn::Iota(du, 0), hn::Set(du, 7u)), hn::Set(du, uint32_t{kBits}));
  size_t i = 0;
  for (; i + 8 <= count; i += 8) {
    uint32_t word = 0;
    for (size_t k = 0; k < 8; k += N) {
      const auto idx = hn::BitCast(du, CodesOf(df, ys + i + k, vinv, boundaries, kBits));
      const auto shifted = hn::Shl(idx, hn::Add(lane_shift, hn::Set(du, static_cast<uint32_t>(k * kBits))));
      word |= hn::GetLane(hn::SumOfLanes(du, shifted));
    }
    for (int b = 0; b < kBits; ++b) out[i / 8 * kBits + b] = static_cast<uint8_t>(word >> (8 * b));
  }
  return i;
}

void QuantizePack(const float* HWY_RESTRICT y, size_t n, float inv_norm,
                  const float* HWY_RESTRICT boundaries, int bits, uint8_t* HWY_RESTRICT packed) {
  const DF df;
  const DU8 du8;
  const size_t N = hn::Lanes(df);
  const auto vinv = hn::Set(df, inv_norm);
  HWY_ALIGN uint8_t codes[kChunk];
  for (size_t start = 0; start < n; start += kChunk) {
    const size_t count = std::min(kChunk, n - start);
    const float* ys = y + start;
    uint8_t* out = packed + start / 8 * bits;
    size_t i = 0;
    if (bits <= 4 && N > 1) {
      switch (bits) {
        case 1: i = PackGroups<1>(df, ys, count, vinv, boundaries, out); break;
        case 2: i = PackGroups<2>(df, ys, count, vinv, boundaries, out); break;
        case 3: i = PackGroups<3>(df, ys, count, vinv, boundaries, out); break;
        default: i = PackGroups<4>(df, ys, count, vinv, boundaries, out); break;
      }
      // The tail (< 8 codes) goes through the code buffer below.
      const size_t done = i;
      size_t t = done;
      for (; t < count; ++t) {
        const float u = ys[t] * inv_norm;
        codes[t - done] = static_cast<uint8_t>(
            std::lower_bound(boundaries, boundaries + ((1 << bits) - 1), u) - boundaries);
      }
      if (count > done) pack_codes(codes, count - done, bits, out + done / 8 * bits);
      continue;
    }
    for (; i + N <= count; i += N) {
      const auto idx = CodesOf(df, ys + i, vinv, boundaries, bits);
      hn::StoreU(hn::DemoteTo(du8, idx), du8, codes + i);
    }
    for (; i < count; ++i) {
      const float u = ys[i] * inv_norm;
      codes[i] = static_cast<uint8_t>(
          std::lower_bound(boundaries, boundaries + ((1 << bits) - 1), u) - boundaries);
    }
    pack_codes(codes, count, bits, out);
  }
}

// scale * centroids[idx] for N int32 indices, by in-register table lookup when the codebook
// fits in one or two vectors, else by gather.
// centroids[idx] for N int32 indices, by in-register table lookup when the codebook fits in one
// or two vectors, else by gather.
HWY_INLINE hn::Vec<DF> Lookup(DF df, hn::Vec<DI> idx, const float* HWY_RESTRICT table_lo,
                              const float* HWY_RESTRICT table_hi, const float* HWY_RESTRICT centroids,
                              int levels) {
  const DI di;
  const int N = static_cast<int>(hn::Lanes(df));
  if (levels <= N) {
    return hn::TableLookupLanes(hn::LoadU(df, table_lo), hn::IndicesFromVec(df, idx));
  }
  if (levels <= 2 * N) {
    const auto low_bits = hn::And(idx, hn::Set(di, N - 1));
    const auto lo = hn::TableLookupLanes(hn::LoadU(df, table_lo), hn::IndicesFromVec(df, low_bits));
    const auto hi = hn::TableLookupLanes(hn::LoadU(df, table_hi), hn::IndicesFromVec(df, low_bits));
    return hn::IfThenElse(hn::RebindMask(df, hn::Gt(idx, hn::Set(di, N - 1))), hi, lo);
  }
  return hn::GatherIndex(df, centroids, idx);
}

// Whole groups of 8 codes (bits <= 4): one 32-bit word holds a group; lane k of the group
// shifts it right by k * kBits. Returns codes done.
template <int kBits>
HWY_INLINE size_t UnpackGroups(DF df, const uint8_t* HWY_RESTRICT in, size_t count,
                               const float* HWY_RESTRICT table_lo, const float* HWY_RESTRICT table_hi,
                               const float* HWY_RESTRICT centroids, hn::Vec<DF> vscale,
                               float* HWY_RESTRICT ys) {
  const DI di;
  const DU du;
  const size_t N = hn::Lanes(df);
  const auto lane_shift = hn::Mul(hn::And(hn::Iota(du, 0), hn::Set(du, 7u)), hn::Set(du, uint32_t{kBits}));
  const auto mask = hn::Set(du, uint32_t{(1u << kBits) - 1});
  size_t i = 0;
  for (; i + 8 <= count; i += 8) {
    const uint8_t* group = in + i / 8 * kBits;
    uint32_t word = 0;
    for (int b = 0; b < kBits; ++b) word |= static_cast<uint32_t>(group[b]) << (8 * b);
    const auto vword = hn::Set(du, word);
    for (size_t k = 0; k < 8; k += N) {
      const auto shift = hn::Add(lane_shift, hn::Set(du, static_cast<uint32_t>(k * kBits)));
      const auto idx = hn::BitCast(di, hn::And(hn::Shr(vword, shift), mask));
      hn::StoreU(hn::Mul(vscale, Lookup(df, idx, table_lo, table_hi, centroids, 1 << kBits)), df, ys + i + k);
    }
  }
  return i;
}

void UnpackDequantize(const uint8_t* HWY_RESTRICT packed, size_t n, int bits,
                      const float* HWY_RESTRICT centroids, float scale, float* HWY_RESTRICT y) {
  const DF df;
  const DI di;
  const DU8 du8;
  const size_t N = hn::Lanes(df);
  const int levels = 1 << bits;
  HWY_ALIGN float table_lo[8] = {0};
  HWY_ALIGN float table_hi[8] = {0};
  // table_lo = centroids[0, N), table_hi = centroids[N, 2N) (zero-padded), for Lookup.
  const int lanes = static_cast<int>(N);
  for (int i = 0; i < std::min(levels, lanes); ++i) table_lo[i] = centroids[i];
  for (int i = lanes; i < std::min(levels, 2 * lanes); ++i) table_hi[i - lanes] = centroids[i];
  const auto vscale = hn::Set(df, scale);
  HWY_ALIGN uint8_t codes[kChunk];
  for (size_t start = 0; start < n; start += kChunk) {
    const size_t count = std::min(kChunk, n - start);
    const uint8_t* in = packed + start / 8 * bits;
    float* ys = y + start;
    size_t i = 0;
    if (bits <= 4 && N > 1) {
      switch (bits) {
        case 1: i = UnpackGroups<1>(df, in, count, table_lo, table_hi, centroids, vscale, ys); break;
        case 2: i = UnpackGroups<2>(df, in, count, table_lo, table_hi, centroids, vscale, ys); break;
        case 3: i = UnpackGroups<3>(df, in, count, table_lo, table_hi, centroids, vscale, ys); break;
        default: i = UnpackGroups<4>(df, in, count, table_lo, table_hi, centroids, vscale, ys); break;
      }
      if (i < count) {
        unpack_codes(in + i / 8 * bits, count - i, bits, codes);
        for (size_t t = i; t < count; ++t) ys[t] = scale * centroids[codes[t - i]];
      }
      continue;
    }
    unpack_codes(in, count, bits, codes);
    for (; i + N <= count; i += N) {
      const auto idx = hn::PromoteTo(di, hn::LoadU(du8, codes + i));
      hn::StoreU(hn::Mul(vscale, Lookup(df, idx, table_lo, table_hi, centroids, levels)), df, ys + i);
    }
    for (; i < count; ++i) ys[i] = scale * centroids[codes[i]];
  }
}

void FwhtBlocksBatch(float* HWY_RESTRICT x, size_t n, int log2_blocks, int block, float scale) {
  const size_t dim = (size_t{1} << log2_blocks) * static_cast<size_t>(block);
  for (size_t v = 0; v < n; ++v) FwhtBlocks(x + v * dim, log2_blocks, block, scale);
}

void QuantizePackRecords(const float* HWY_RESTRICT y, size_t y_stride, const float* HWY_RESTRICT inv_norms,
                         const float* HWY_RESTRICT boundaries, const GroupBatch& batch,
                         uint8_t* HWY_RESTRICT records) {
  if (batch.n_codes == 0) return;
  for (size_t v = 0; v < batch.n_records; ++v) {
    QuantizePack(y + v * y_stride, batch.n_codes, inv_norms[v], boundaries, batch.bits,
                 records + v * batch.record_stride + batch.offset);
  }
}

void UnpackDequantizeRecords(const uint8_t* HWY_RESTRICT records, const float* HWY_RESTRICT scales,
                             const float* HWY_RESTRICT centroids, const GroupBatch& batch,
                             float* HWY_RESTRICT y, size_t y_stride) {
  if (batch.n_codes == 0) return;
  for (size_t v = 0; v < batch.n_records; ++v) {
    UnpackDequantize(records + v * batch.record_stride + batch.offset, batch.n_codes, batch.bits,
                     centroids, scales[v], y + v * y_stride);
  }
}

const char* TargetName() { return hwy::TargetName(HWY_TARGET); }

}  // namespace HWY_NAMESPACE
}  // namespace turbokv::kernels
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace turbokv::kernels {

HWY_EXPORT(FwhtBlocks);
HWY_EXPORT(QuantizePack);
HWY_EXPORT(UnpackDequantize);
HWY_EXPORT(TargetName);
HWY_EXPORT(FwhtBlocksBatch);
HWY_EXPORT(QuantizePackRecords);
HWY_EXPORT(UnpackDequantizeRecords);

void fwht_blocks_batch(float* x, size_t n, int log2_blocks, int block, float scale) {
  HWY_DYNAMIC_DISPATCH(FwhtBlocksBatch)(x, n, log2_blocks, block, scale);
}

void quantize_pack_records(const float* y, size_t y_stride, const float* inv_norms,
                           const float* boundaries, const GroupBatch& batch, uint8_t* records) {
  HWY_DYNAMIC_DISPATCH(QuantizePackRecords)(y, y_stride, inv_norms, boundaries, batch, records);
}

void unpack_dequantize_records(const uint8_t* records, const float* scales, const float* centroids,
                               const GroupBatch& batch, float* y, size_t y_stride) {
  HWY_DYNAMIC_DISPATCH(UnpackDequantizeRecords)(records, scales, centroids, batch, y, y_stride);
}

void fwht_blocks(float* x, int log2_blocks, int block, float scale) {
  HWY_DYNAMIC_DISPATCH(FwhtBlocks)(x, log2_blocks, block, scale);
}

void quantize_pack(const float* y, size_t n, float inv_norm, const float* boundaries, int bits,
                   uint8_t* packed) {
  HWY_DYNAMIC_DISPATCH(QuantizePack)(y, n, inv_norm, boundaries, bits, packed);
}

void unpack_dequantize(const uint8_t* packed, size_t n, int bits, const float* centroids,
                       float scale, float* y) {
  HWY_DYNAMIC_DISPATCH(UnpackDequantize)(packed, n, bits, centroids, scale, y);
}

std::vector<int64_t> codec_kernel_targets() {
  std::vector<int64_t> targets;
  for (int64_t left = hwy::SupportedTargets() & HWY_TARGETS; left != 0; left &= left - 1) {
    targets.push_back(left & ~(left - 1));
  }
  return targets;
}

std::string codec_kernel_target_name() { return HWY_DYNAMIC_DISPATCH(TargetName)(); }

}  // namespace turbokv::kernels
#endif  // HWY_ONCE
