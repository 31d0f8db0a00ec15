// TurboQuantMse and TurboQuantProd (see include/turbokv/codec.hpp for the math and byte layout).
// The per-coordinate loops go through codec_loops(), which picks the SIMD kernels or the scalar
// reference once per call.
#include "turbokv/codec.hpp"

#include <Eigen/Dense>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/check.hpp"
#include "core/codec_reference.hpp"
#include "kernels/codec_kernels.hpp"
#include "turbokv/half.hpp"
#include "turbokv/packing.hpp"
#include "turbokv/prng.hpp"

namespace turbokv {
namespace {

constexpr uint64_t kQjlTag = 0x514a4c0000000004ULL;
constexpr int kMaxProdDim = 4096;  // S is dense dim x dim
constexpr size_t kChunk = 64;      // vectors per batch through the rotation

// The per-coordinate loops over a batch of records: SIMD kernels or the scalar reference, chosen
// (and dispatched) once per call.
void quantize_pack_records(const float* y, size_t y_stride, const float* inv_norms,
                           const float* boundaries, const GroupBatch& batch, uint8_t* records) {
  if (force_scalar_kernels()) {
    reference::quantize_pack_records(y, y_stride, inv_norms, boundaries, batch, records);
  } else {
    kernels::quantize_pack_records(y, y_stride, inv_norms, boundaries, batch, records);
  }
}

void unpack_dequantize_records(const uint8_t* records, const float* scales, const float* centroids,
                               const GroupBatch& batch, float* y, size_t y_stride) {
  if (force_scalar_kernels()) {
    reference::unpack_dequantize_records(records, scales, centroids, batch, y, y_stride);
  } else {
    kernels::unpack_dequantize_records(records, scales, centroids, batch, y, y_stride);
  }
}

size_t norm_bytes(bool fp32) { return fp32 ? 4 : 2; }

// Copies a chunk, rejects non-finite values and returns the L2 norms (accumulated in double).
void load_chunk(const float* x, size_t n, int dim, float* buffer, float* norms) {
  for (size_t v = 0; v < n; ++v) {
    double sum = 0.0;
    for (int i = 0; i < dim; ++i) {
      const float value = x[v * dim + i];
      TURBOKV_CHECK(std::isfinite(value), "TurboQuant encode: non-finite value {} at vector {}, coordinate {}",
                    value, v, i);
      sum += static_cast<double>(value) * value;
      buffer[v * dim + i] = value;
    }
    const double norm = std::sqrt(sum);
    TURBOKV_CHECK(norm <= 3.0e38, "TurboQuant encode: vector {} has a norm too large for float", v);
    norms[v] = static_cast<float>(norm);
  }
}

void check_pointers(const void* in, const void* out, size_t n, const char* what) {
  TURBOKV_CHECK(n == 0 || (in != nullptr && out != nullptr), "{}: null buffer for {} vectors", what, n);
}

}  // namespace

float load_norm(const uint8_t* field, bool fp32) {
  if (fp32) {
    float value;
    std::memcpy(&value, field, sizeof value);
    return value;
  }
  uint16_t half;
  std::memcpy(&half, field, sizeof half);
  return half_to_float(half);
}

void store_norm(uint8_t* field, float value, bool fp32) {
  if (fp32) {
    std::memcpy(field, &value, sizeof value);
    return;
  }
  const uint16_t half = float_to_half(value);
  TURBOKV_CHECK(half_is_finite(half),
                "TurboQuant encode: norm {} exceeds the fp16 range (set fp32_norm)", value);
  std::memcpy(field, &half, sizeof half);
}

// ---------------------------------------------------------------------------------------------
// TurboQuantMse

TurboQuantMse::TurboQuantMse(const CodecOptions& options) : options_(options) {
  const int dim = options.dim;
  TURBOKV_CHECK(dim >= LloydMaxCodebook::kMinDim && dim <= LloydMaxCodebook::kMaxDim,
                "TurboQuantMse: dim must be in [2, {}], got {}", LloydMaxCodebook::kMaxDim, dim);
  const double bits = options.bits;
  TURBOKV_CHECK(std::isfinite(bits) && bits >= 1.0 && bits <= 8.0 && bits * 2 == std::floor(bits * 2),
                "TurboQuantMse: bits must be in [1, 8] in steps of 0.5, got {}", bits);
  layout_.dim = dim;
  layout_.bits_hi = static_cast<int>(std::ceil(bits));
  layout_.bits_lo = static_cast<int>(std::floor(bits));
  layout_.dims_hi = layout_.bits_hi == layout_.bits_lo ? dim : dim / 2;
  layout_.dims_lo = dim - layout_.dims_hi;
  TURBOKV_CHECK(layout_.dims_hi > 0, "TurboQuantMse: dim {} too small for fractional bits {}", dim, bits);
  layout_.fp32_norm = options.fp32_norm;
  layout_.group0_offset = 0;
  layout_.group1_offset = packed_size(layout_.dims_hi, layout_.bits_hi);
  layout_.norm_offset = layout_.group1_offset + packed_size(layout_.dims_lo, layout_.bits_lo);
  layout_.code_size = layout_.norm_offset + norm_bytes(options.fp32_norm);
  codebooks_[0] = &LloydMaxCodebook::get(dim, layout_.bits_hi);
  codebooks_[1] = &LloydMaxCodebook::get(dim, layout_.bits_lo);
  rotation_ = make_rotation(options.rotation, dim, options.seed);
}

const LloydMaxCodebook& TurboQuantMse::codebook(int group) const {
  TURBOKV_CHECK(group == 0 || group == 1, "TurboQuantMse::codebook: group must be 0 or 1, got {}", group);
  return *codebooks_[group];
}

double TurboQuantMse::effective_bits() const {
  return (static_cast<double>(layout_.bits_hi) * layout_.dims_hi +
          static_cast<double>(layout_.bits_lo) * layout_.dims_lo) / layout_.dim;
}

void TurboQuantMse::encode_rotated(const float* y, const float* norms, size_t n, uint8_t* codes,
                                   size_t record_stride) const {
  if (n == 0) return;
  const CodeLayout& L = layout_;
  std::vector<float> factors(n);  // 1/norm for quantizing, then the stored scale
  for (size_t v = 0; v < n; ++v) factors[v] = norms[v] > 0.0f ? static_cast<float>(1.0 / norms[v]) : 0.0f;
  const GroupBatch group0{n, record_stride, L.group0_offset, static_cast<size_t>(L.dims_hi), L.bits_hi};
  const GroupBatch group1{n, record_stride, L.group1_offset, static_cast<size_t>(L.dims_lo), L.bits_lo};
  quantize_pack_records(y, L.dim, factors.data(), codebooks_[0]->boundaries().data(), group0, codes);
  quantize_pack_records(y + L.dims_hi, L.dim, factors.data(), codebooks_[1]->boundaries().data(), group1,
                        codes);
  for (size_t v = 0; v < n; ++v) factors[v] = norms[v];
  if (options_.norm_correction) {
    // Scale so that ||scale * c[idx]|| == ||x||: decode the unit-scale centroids, take their norm.
    std::vector<float> decoded(n * L.dim);
    const std::vector<float> ones(n, 1.0f);
    unpack_dequantize_records(codes, ones.data(), codebooks_[0]->centroids().data(), group0,
                              decoded.data(), L.dim);
    unpack_dequantize_records(codes, ones.data(), codebooks_[1]->centroids().data(), group1,
                              decoded.data() + L.dims_hi, L.dim);
    for (size_t v = 0; v < n; ++v) {
      if (norms[v] == 0.0f) continue;
      double sum = 0.0;
      for (int i = 0; i < L.dim; ++i) sum += static_cast<double>(decoded[v * L.dim + i]) * decoded[v * L.dim + i];
      factors[v] = static_cast<float>(norms[v] / std::sqrt(sum));  // centroids are never all zero
    }
  }
  for (size_t v = 0; v < n; ++v) store_norm(codes + v * record_stride + L.norm_offset, factors[v], L.fp32_norm);
}

void TurboQuantMse::encode(const float* x, size_t n, uint8_t* codes) const {
  check_pointers(x, codes, n, "TurboQuantMse::encode");
  const int dim = layout_.dim;
  std::vector<float> buffer(kChunk * dim);
  float norms[kChunk];
  for (size_t start = 0; start < n; start += kChunk) {
    const size_t count = std::min(kChunk, n - start);
    load_chunk(x + start * dim, count, dim, buffer.data(), norms);
    rotation_->forward(buffer.data(), buffer.data(), count);
    encode_rotated(buffer.data(), norms, count, codes + start * code_size(), code_size());
  }
}

void TurboQuantMse::decode_rotated_strided(const uint8_t* codes, size_t n, size_t record_stride,
                                           float* y) const {
  if (n == 0) return;
  const CodeLayout& L = layout_;
  std::vector<float> scales(n);
  for (size_t v = 0; v < n; ++v) scales[v] = load_norm(codes + v * record_stride + L.norm_offset, L.fp32_norm);
  const GroupBatch group0{n, record_stride, L.group0_offset, static_cast<size_t>(L.dims_hi), L.bits_hi};
  const GroupBatch group1{n, record_stride, L.group1_offset, static_cast<size_t>(L.dims_lo), L.bits_lo};
  unpack_dequantize_records(codes, scales.data(), codebooks_[0]->centroids().data(), group0, y, L.dim);
  unpack_dequantize_records(codes, scales.data(), codebooks_[1]->centroids().data(), group1,
                            y + L.dims_hi, L.dim);
}

void TurboQuantMse::decode_rotated(const uint8_t* codes, size_t n, float* y) const {
  check_pointers(codes, y, n, "TurboQuantMse::decode_rotated");
  decode_rotated_strided(codes, n, code_size(), y);
}

void TurboQuantMse::decode(const uint8_t* codes, size_t n, float* x) const {
  check_pointers(codes, x, n, "TurboQuantMse::decode");
  decode_rotated_strided(codes, n, code_size(), x);
  rotation_->inverse(x, x, n);
}

namespace {

size_t checked_count(size_t floats, size_t bytes, int dim, size_t code_size, const char* what) {
  TURBOKV_CHECK(floats % dim == 0, "{}: {} floats is not a whole number of {}-dim vectors", what,
                floats, dim);
  const size_t n = floats / dim;
  TURBOKV_CHECK(bytes == n * code_size, "{}: {} vectors need {} code bytes, got {}", what, n,
                n * code_size, bytes);
  return n;
}

}  // namespace

void TurboQuantMse::encode(std::span<const float> x, std::span<uint8_t> codes) const {
  encode(x.data(), checked_count(x.size(), codes.size(), layout_.dim, code_size(), "TurboQuantMse::encode"),
         codes.data());
}
void TurboQuantMse::decode(std::span<const uint8_t> codes, std::span<float> x) const {
  decode(codes.data(), checked_count(x.size(), codes.size(), layout_.dim, code_size(), "TurboQuantMse::decode"),
         x.data());
}
void TurboQuantMse::decode_rotated(std::span<const uint8_t> codes, std::span<float> y) const {
  decode_rotated(codes.data(),
                 checked_count(y.size(), codes.size(), layout_.dim, code_size(), "TurboQuantMse::decode_rotated"),
                 y.data());
}

// ---------------------------------------------------------------------------------------------
// TurboQuantProd

namespace {

CodecOptions mse_options_for_prod(CodecOptions options) {
  TURBOKV_CHECK(std::isfinite(options.bits) && options.bits >= 2.0 && options.bits <= 8.0,
                "TurboQuantProd: bits must be in [2, 8] in steps of 0.5, got {}", options.bits);
  TURBOKV_CHECK(options.dim >= 2 && options.dim <= kMaxProdDim,
                "TurboQuantProd: dim must be in [2, {}], got {}", kMaxProdDim, options.dim);
  options.bits -= 1.0;
  return options;
}

using RowMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

}  // namespace

TurboQuantProd::TurboQuantProd(const CodecOptions& options)
    : options_(options), mse_(mse_options_for_prod(options)) {
  layout_ = mse_.layout();
  layout_.qjl_offset = mse_.code_size();
  layout_.residual_norm_offset = layout_.qjl_offset + packed_size(options.dim, 1);
  layout_.code_size = layout_.residual_norm_offset + norm_bytes(options.fp32_norm);
  SplitMix64 rng(derive_seed(options.seed, kQjlTag));
  qjl_.resize(static_cast<size_t>(options.dim) * options.dim);
  for (auto& s : qjl_) s = static_cast<float>(rng.normal());
}

void TurboQuantProd::qjl_project(const float* y, float* s, size_t n) const {
  check_pointers(y, s, n, "TurboQuantProd::qjl_project");
  if (n == 0) return;
  const int d = options_.dim;
  const Eigen::Map<const RowMatrix> m(qjl_.data(), d, d);
  const Eigen::Map<const RowMatrix> in(y, static_cast<Eigen::Index>(n), d);
  const RowMatrix out = in * m.transpose();
  std::memcpy(s, out.data(), n * static_cast<size_t>(d) * sizeof(float));
}

void TurboQuantProd::encode(const float* x, size_t n, uint8_t* codes) const {
  check_pointers(x, codes, n, "TurboQuantProd::encode");
  const int dim = options_.dim;
  const size_t cs = code_size();
  std::vector<float> y(kChunk * dim), residual(kChunk * dim), sketch(kChunk * dim);
  std::vector<uint8_t> sign_bits(dim);
  float norms[kChunk];
  for (size_t start = 0; start < n; start += kChunk) {
    const size_t count = std::min(kChunk, n - start);
    uint8_t* chunk_codes = codes + start * cs;
    load_chunk(x + start * dim, count, dim, y.data(), norms);
    mse_.rotation().forward(y.data(), y.data(), count);
    mse_.encode_rotated(y.data(), norms, count, chunk_codes, cs);
    mse_.decode_rotated_strided(chunk_codes, count, cs, residual.data());
    for (size_t i = 0; i < count * dim; ++i) residual[i] = y[i] - residual[i];
    qjl_project(residual.data(), sketch.data(), count);
    for (size_t v = 0; v < count; ++v) {
      double sum = 0.0;
      for (int i = 0; i < dim; ++i) {
        const float r = residual[v * dim + i];
        sum += static_cast<double>(r) * r;
        sign_bits[i] = sketch[v * dim + i] >= 0.0f ? 1 : 0;
      }
      uint8_t* record = chunk_codes + v * cs;
      pack_codes(sign_bits.data(), dim, 1, record + layout_.qjl_offset);
      store_norm(record + layout_.residual_norm_offset, static_cast<float>(std::sqrt(sum)),
                 layout_.fp32_norm);
    }
  }
}

void TurboQuantProd::decode_rotated(const uint8_t* codes, size_t n, float* y) const {
  check_pointers(codes, y, n, "TurboQuantProd::decode_rotated");
  const int dim = options_.dim;
  const size_t cs = code_size();
  mse_.decode_rotated_strided(codes, n, cs, y);
  // y += gamma * sqrt(pi/2)/d * S^T z (z = +-1 from the sign bits), as one matrix product per
  // chunk: Y += Z S with row v of Z = +-coef_v.
  std::vector<uint8_t> sign_bits(dim);
  RowMatrix z(static_cast<Eigen::Index>(std::min(kChunk, n)), dim);
  const Eigen::Map<const RowMatrix> s(qjl_.data(), dim, dim);
  for (size_t start = 0; start < n; start += kChunk) {
    const size_t count = std::min(kChunk, n - start);
    for (size_t v = 0; v < count; ++v) {
      const uint8_t* record = codes + (start + v) * cs;
      const float gamma = load_norm(record + layout_.residual_norm_offset, layout_.fp32_norm);
      const float coef = static_cast<float>(gamma * qjl_scale(dim));
      unpack_codes(record + layout_.qjl_offset, dim, 1, sign_bits.data());
      for (int i = 0; i < dim; ++i) z(static_cast<Eigen::Index>(v), i) = sign_bits[i] ? coef : -coef;
    }
    Eigen::Map<RowMatrix> out(y + start * dim, static_cast<Eigen::Index>(count), dim);
    out.noalias() += z.topRows(static_cast<Eigen::Index>(count)) * s;
  }
}

void TurboQuantProd::decode(const uint8_t* codes, size_t n, float* x) const {
  check_pointers(codes, x, n, "TurboQuantProd::decode");
  decode_rotated(codes, n, x);
  mse_.rotation().inverse(x, x, n);
}

float TurboQuantProd::inner_product(const float* q, const uint8_t* code) const {
  TURBOKV_CHECK(q != nullptr && code != nullptr, "TurboQuantProd::inner_product: null buffer");
  const int dim = options_.dim;
  std::vector<float> yq(dim), sq(dim), mse_part(dim);
  std::vector<uint8_t> sign_bits(dim);
  mse_.rotation().forward(q, yq.data(), 1);
  qjl_project(yq.data(), sq.data(), 1);
  mse_.decode_rotated_strided(code, 1, code_size(), mse_part.data());
  unpack_codes(code + layout_.qjl_offset, dim, 1, sign_bits.data());
  double base = 0.0, correction = 0.0;
  for (int i = 0; i < dim; ++i) {
    base += static_cast<double>(yq[i]) * mse_part[i];
    correction += sign_bits[i] ? sq[i] : -sq[i];
  }
  const double gamma = load_norm(code + layout_.residual_norm_offset, layout_.fp32_norm);
  return static_cast<float>(base + gamma * qjl_scale(dim) * correction);
}

void TurboQuantProd::encode(std::span<const float> x, std::span<uint8_t> codes) const {
  encode(x.data(), checked_count(x.size(), codes.size(), options_.dim, code_size(), "TurboQuantProd::encode"),
         codes.data());
}
void TurboQuantProd::decode(std::span<const uint8_t> codes, std::span<float> x) const {
  decode(codes.data(), checked_count(x.size(), codes.size(), options_.dim, code_size(), "TurboQuantProd::decode"),
         x.data());
}
void TurboQuantProd::decode_rotated(std::span<const uint8_t> codes, std::span<float> y) const {
  decode_rotated(codes.data(),
                 checked_count(y.size(), codes.size(), options_.dim, code_size(), "TurboQuantProd::decode_rotated"),
                 y.data());
}

}  // namespace turbokv
