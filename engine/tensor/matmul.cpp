// matvec / matmul: validation, dispatch and the split of rows over the thread pool, plus the
// portable scalar kernels (decode a row, then a plain dot product).
#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <vector>

#include "engine/tensor/matmul_kernels.hpp"
#include "engine/tensor/tensor_types.hpp"
#include "turbokv/error.hpp"
#include "turbokv/half.hpp"

namespace turbokv::engine {
namespace detail {
namespace {

float scalar_dot_f32(const float* a, const float* b, int64_t n) {
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

template <GgmlType T>
void scalar_decode(const uint8_t* row, int64_t cols, float* out) {
  dequantize_row(WeightMatrix{T, 1, cols, row}, 0, out);
}

template <GgmlType T>
float scalar_dot(const uint8_t* row, const float* x, int64_t cols) {
  thread_local std::vector<float> buffer;
  buffer.resize(static_cast<size_t>(cols));
  scalar_decode<T>(row, cols, buffer.data());
  return scalar_dot_f32(buffer.data(), x, cols);
}

void scalar_dot4x2(const float* const* w, const float* const* x, int64_t cols, float* out) {
  for (int r = 0; r < 4; ++r) {
    for (int t = 0; t < 2; ++t) out[r * 2 + t] = scalar_dot_f32(w[r], x[t], cols);
  }
}

template <GgmlType T>
RowKernels make_scalar() {
  RowKernels k;
  k.dot = &scalar_dot<T>;
  k.decode = &scalar_decode<T>;
  k.dot4x2 = &scalar_dot4x2;
  k.dot_f32 = &scalar_dot_f32;
  return k;
}

}  // namespace

RowKernels scalar_kernels(GgmlType type) {
  switch (type) {
    case GgmlType::F32: return make_scalar<GgmlType::F32>();
    case GgmlType::F16: return make_scalar<GgmlType::F16>();
    case GgmlType::BF16: return make_scalar<GgmlType::BF16>();
    case GgmlType::Q8_0: return make_scalar<GgmlType::Q8_0>();
    case GgmlType::Q4_0: return make_scalar<GgmlType::Q4_0>();
    case GgmlType::Q4_K: return make_scalar<GgmlType::Q4_K>();
    case GgmlType::Q6_K: return make_scalar<GgmlType::Q6_K>();
    case GgmlType::Q4_1: return make_scalar<GgmlType::Q4_1>();
    case GgmlType::Q5_0: return make_scalar<GgmlType::Q5_0>();
    case GgmlType::Q5_1: return make_scalar<GgmlType::Q5_1>();
    case GgmlType::IQ4_NL: return make_scalar<GgmlType::IQ4_NL>();
    case GgmlType::Q2_K: return make_scalar<GgmlType::Q2_K>();
    case GgmlType::Q3_K: return make_scalar<GgmlType::Q3_K>();
    case GgmlType::Q5_K: return make_scalar<GgmlType::Q5_K>();
    case GgmlType::IQ4_XS: return make_scalar<GgmlType::IQ4_XS>();
  }
  throw Error(fmt::format("no kernels for tensor type {}", static_cast<uint32_t>(type)));
}

}  // namespace detail

namespace {

std::atomic<bool> g_force_scalar{false};
std::atomic<bool> g_q8_activations{true};
// TURBOKV_NO_VNNI=1 in the environment starts with the VNNI kernel off (A/B timing; results are
// the same either way).
std::atomic<bool> g_use_vnni{std::getenv("TURBOKV_NO_VNNI") == nullptr};
// TURBOKV_NO_AVX512=1 likewise starts matmul_rowwise with no AVX-512 instruction: its tile
// kernel off, and its 256-bit VNNI kernel in the VEX form (AVX-VNNI) where the CPU has it, else
// the AVX2 kernel; what an AVX-VNNI CPU without AVX-512 runs (same results).
std::atomic<bool> g_use_avx512{std::getenv("TURBOKV_NO_AVX512") == nullptr};
// The same variable also starts the 512-bit Q8_0 kernel of matvec and small batches off
// (matvec_q8_0_avx512.cpp).
std::atomic<bool> g_use_avx512_matvec{std::getenv("TURBOKV_NO_AVX512") == nullptr};

// matvec's Q8_0 rows (and matmul_rowwise's batches below 8) on 512-bit VNNI vectors: where the CPU
// has AVX-512 F/BW/VL/VNNI, the AVX2 kernels are in use and neither switch (VNNI, AVX-512 matvec)
// is off.
bool use_avx512_matvec() {
  return g_use_avx512_matvec.load(std::memory_order_relaxed) && g_use_vnni.load(std::memory_order_relaxed) &&
         !g_force_scalar.load(std::memory_order_relaxed) && detail::avx2_available() &&
         detail::avx512_tile_available();
}

detail::RowKernels kernels_for(GgmlType type) {
  if (!g_force_scalar.load(std::memory_order_relaxed) && detail::avx2_available()) {
    return detail::avx2_kernels(type);
  }
  return detail::scalar_kernels(type);
}

size_t checked_stride(const WeightMatrix& w, const char* what) {
  if (w.rows < 0) throw Error(fmt::format("{}: negative row count {}", what, w.rows));
  const size_t stride = row_bytes(w.type, w.cols);
  if (w.rows > 0 && w.cols > 0 && w.data == nullptr) {
    throw Error(fmt::format("{}: weight matrix has no data", what));
  }
  return stride;
}

// Rows per task: enough work per chunk that waking the other threads pays off.
size_t min_rows_per_chunk(int64_t cols) {
  return std::max<size_t>(1, 16384 / static_cast<size_t>(std::max<int64_t>(cols, 1)));
}

// Activation rows quantized to Q8_0 for the dot_q8 kernels, with what the dot_q8_sums kernels
// also read: each block's scale as float and that scale times the sum of the block's values.
// Computed once per call on the calling thread; the pool's threads read it through this view.
struct Q8Activations {
  const uint8_t* bytes;
  const float* scale;
  const float* sum;
  size_t stride;  // bytes per row
  size_t blocks;  // blocks per row
};

Q8Activations quantize_activations(const float* x, int64_t cols, size_t n, bool with_sums) {
  thread_local std::vector<uint8_t> bytes;
  thread_local std::vector<float> scale, sum;
  const size_t stride = row_bytes(GgmlType::Q8_0, cols);
  const size_t blocks = static_cast<size_t>(cols) / 32;
  bytes.resize(stride * n);
  // The AVX2 quantizer gives quantize_row's bits (tests/engine/test_matmul_rowwise_tiles.cpp).
  const bool simd = !g_force_scalar.load(std::memory_order_relaxed) && detail::avx2_available();
  for (size_t t = 0; t < n; ++t) {
    if (simd) {
      detail::quantize_row_q8_0_avx2(x + t * cols, cols, bytes.data() + t * stride);
    } else {
      quantize_row(GgmlType::Q8_0, x + t * cols, cols, bytes.data() + t * stride);
    }
  }
  scale.resize(blocks * n);
  sum.resize(blocks * n);
  for (size_t t = 0; t < n; ++t) {
    for (size_t b = 0; b < blocks; ++b) {
      const uint8_t* block = bytes.data() + t * stride + b * 34;
      uint16_t h;
      std::memcpy(&h, block, 2);
      const float d = half_to_float(h);
      scale[t * blocks + b] = d;
      if (!with_sums) continue;
      int32_t total = 0;
      for (int i = 0; i < 32; ++i) total += static_cast<int8_t>(block[2 + i]);
      sum[t * blocks + b] = d * static_cast<float>(total);
    }
  }
  return {bytes.data(), scale.data(), sum.data(), stride, blocks};
}

// Row `row` against activation row t through whichever Q8_0-activation kernel the type has.
inline float dot_q8_activation(const detail::RowKernels& k, const uint8_t* row, const Q8Activations& a, size_t t,
                               int64_t cols) {
  const uint8_t* xq = a.bytes + t * a.stride;
  if (k.dot_q8 != nullptr) return k.dot_q8(row, xq, cols);
  return k.dot_q8_sums(row, xq, a.scale + t * a.blocks, a.sum + t * a.blocks, cols);
}

bool has_q8_kernel(const detail::RowKernels& k) { return k.dot_q8 != nullptr || k.dot_q8_sums != nullptr; }

}  // namespace

const char* kernel_isa() {
  if (!g_force_scalar.load(std::memory_order_relaxed) && detail::avx2_available()) return "avx2";
  return "scalar";
}

void force_scalar_kernels(bool scalar) { g_force_scalar.store(scalar, std::memory_order_relaxed); }

void use_vnni_kernels(bool enabled) { g_use_vnni.store(enabled, std::memory_order_relaxed); }

void use_avx512_tile_kernel(bool enabled) { g_use_avx512.store(enabled, std::memory_order_relaxed); }

void use_avx512_matvec_kernel(bool enabled) { g_use_avx512_matvec.store(enabled, std::memory_order_relaxed); }

void set_q8_activations(bool enabled) { g_q8_activations.store(enabled, std::memory_order_relaxed); }
bool q8_activations() { return g_q8_activations.load(std::memory_order_relaxed); }

void matvec(const WeightMatrix& w, const float* x, float* y, ThreadPool& pool) {
  const size_t stride = checked_stride(w, "matvec");
  const detail::RowKernels k = kernels_for(w.type);
  const auto* base = static_cast<const uint8_t*>(w.data);
  if (has_q8_kernel(k) && q8_activations() && w.rows > 0) {
    const Q8Activations a = quantize_activations(x, w.cols, 1, k.dot_q8_sums != nullptr);
    if (w.type == GgmlType::Q8_0 && use_avx512_matvec()) {
      // The 512-bit VNNI kernel: same bits as the AVX2 one, fewer instructions per weight byte.
      return detail::matvec_q8_0_avx512(base, stride, static_cast<size_t>(w.rows), w.cols, a.bytes, a.stride, 1, y,
                                        pool, min_rows_per_chunk(w.cols));
    }
    pool.parallel_for(
        static_cast<size_t>(w.rows),
        [&](size_t begin, size_t end) {
          for (size_t r = begin; r < end; ++r) y[r] = dot_q8_activation(k, base + r * stride, a, 0, w.cols);
        },
        min_rows_per_chunk(w.cols));
    return;
  }
  pool.parallel_for(
      static_cast<size_t>(w.rows),
      [&](size_t begin, size_t end) {
        for (size_t r = begin; r < end; ++r) y[r] = k.dot(base + r * stride, x, w.cols);
      },
      min_rows_per_chunk(w.cols));
}

void matmul(const WeightMatrix& w, const float* x, int64_t n, float* y, ThreadPool& pool) {
  if (n < 0) throw Error(fmt::format("matmul: negative batch size {}", n));
  if (n == 1) return matvec(w, x, y, pool);
  // Q8_0 weights: matmul_rowwise's four-activation integer kernel beats decoding rows to float
  // (prefill of the 1B-shaped model 1.25x; docs/history/benchmarks-notebook.md, "Engine kernels
  // on the Intel VM"), and gives each row the bits matvec gives it, so a prompt's logits are the
  // server's.
  if (w.type == GgmlType::Q8_0 && q8_activations() && std::string_view(kernel_isa()) == "avx2") {
    return matmul_rowwise(w, x, n, y, pool);
  }
  const size_t stride = checked_stride(w, "matmul");
  if (n == 0 || w.rows == 0) return;
  const detail::RowKernels k = kernels_for(w.type);
  const auto* base = static_cast<const uint8_t*>(w.data);
  const int64_t cols = w.cols;
  const int64_t rows = w.rows;
  const int64_t tiles = (rows + 3) / 4;
  pool.parallel_for(
      static_cast<size_t>(tiles),
      [&](size_t tile_begin, size_t tile_end) {
        // Four decoded rows at a time; F32 rows are used in place.
        thread_local std::vector<float> decoded;
        decoded.resize(static_cast<size_t>(4 * cols));
        for (size_t tile = tile_begin; tile < tile_end; ++tile) {
          const int64_t r0 = static_cast<int64_t>(tile) * 4;
          const int rows_here = static_cast<int>(std::min<int64_t>(4, rows - r0));
          const float* wr[4];
          for (int i = 0; i < rows_here; ++i) {
            const uint8_t* src = base + static_cast<size_t>(r0 + i) * stride;
            if (w.type == GgmlType::F32) {
              wr[i] = reinterpret_cast<const float*>(src);
            } else {
              float* dst = decoded.data() + static_cast<size_t>(i) * static_cast<size_t>(cols);
              k.decode(src, cols, dst);
              wr[i] = dst;
            }
          }
          int64_t t = 0;
          if (rows_here == 4) {
            for (; t + 2 <= n; t += 2) {
              const float* xs[2] = {x + t * cols, x + (t + 1) * cols};
              float out[8];
              k.dot4x2(wr, xs, cols, out);
              for (int i = 0; i < 4; ++i) {
                y[t * rows + r0 + i] = out[i * 2];
                y[(t + 1) * rows + r0 + i] = out[i * 2 + 1];
              }
            }
          }
          for (; t < n; ++t) {
            for (int i = 0; i < rows_here; ++i) y[t * rows + r0 + i] = k.dot_f32(wr[i], x + t * cols, cols);
          }
        }
      },
      std::max<size_t>(1, min_rows_per_chunk(cols) / 4));
}

void matmul_rowwise(const WeightMatrix& w, const float* x, int64_t n, float* y, ThreadPool& pool) {
  if (n < 0) throw Error(fmt::format("matmul_rowwise: negative batch size {}", n));
  const size_t stride = checked_stride(w, "matmul_rowwise");
  if (n == 0 || w.rows == 0) return;
  // One activation (the server's single-sequence step): matvec, whose kernels give these rows'
  // bits too and include the 512-bit Q8_0 one.
  if (n == 1) return matvec(w, x, y, pool);
  const detail::RowKernels k = kernels_for(w.type);
  const auto* base = static_cast<const uint8_t*>(w.data);
  const int64_t cols = w.cols;
  const size_t rows = static_cast<size_t>(w.rows);
  const size_t batch = static_cast<size_t>(n);
  // Rows per task as matvec's, scaled down by the batch: each task does n dot products a row.
  const size_t min_chunk = std::max<size_t>(1, min_rows_per_chunk(cols) / batch);
  if (has_q8_kernel(k) && q8_activations()) {
    // The activations quantized exactly as matvec quantizes its one row.
    const Q8Activations a = quantize_activations(x, cols, batch, k.dot_q8_sums != nullptr);
    const uint8_t* xq = a.bytes;
    const size_t q8_stride = a.stride;
    const size_t blocks = a.blocks;
    const float* scale_base = a.scale;
    // Q8_0 weights on AVX2: four activations per pass over the row (same bits as dot_q8), with
    // vpdpbusd where the CPU has AVX512-VNNI or AVX-VNNI (same bits again; it reads x offset by
    // 128). Q4_K likewise, sharing the unpacked 6-bit scales among the four.
    const bool avx2 = std::string_view(kernel_isa()) == "avx2";
    const bool by_four = avx2 && (w.type == GgmlType::Q8_0 || w.type == GgmlType::Q4_K);
    const detail::DotQ8x4Fn vnni_x4 =
        w.type == GgmlType::Q8_0 && by_four && batch >= 4 && g_use_vnni.load(std::memory_order_relaxed)
            ? detail::vnni_x4_kernel(g_use_avx512.load(std::memory_order_relaxed))
            : nullptr;
    const bool vnni = vnni_x4 != nullptr;
    // Q8_0 weights with AVX-512: register tiles of 4 rows x 4 activations over block pairs (same
    // bits again). From 8 activations on: at 4 the packing of every weight row costs about what
    // the tiles save (docs/history/benchmarks-notebook.md, "Prefill with AVX-512 register
    // tiles").
    if (vnni && batch >= 8 && g_use_avx512.load(std::memory_order_relaxed) && detail::avx512_tile_available()) {
      return detail::matmul_q8_0_avx512(base, stride, rows, cols, xq, q8_stride, batch, y, pool);
    }
    // Q8_0 batches below the tiles' 8 with AVX-512 VNNI: matvec's 512-bit kernel, one weight row
    // against up to four activations at a time (same bits again).
    if (w.type == GgmlType::Q8_0 && batch < 8 && use_avx512_matvec()) {
      return detail::matvec_q8_0_avx512(base, stride, rows, cols, xq, q8_stride, batch, y, pool, min_chunk);
    }
    thread_local std::vector<uint8_t> x_offset;
    if (vnni) {
      x_offset.assign(xq, xq + q8_stride * batch);
      for (uint8_t& b : x_offset) b ^= 0x80;
    }
    const uint8_t* xu = x_offset.data();
    pool.parallel_for(
        rows,
        [&](size_t begin, size_t end) {
          // Tiles of 8 weight rows x 4 activations: both stay in L1 while the tile is multiplied,
          // and each weight row is still read from memory once for the whole batch.
          for (size_t r0 = begin; r0 < end; r0 += 8) {
            const size_t r1 = std::min(end, r0 + 8);
            size_t t = 0;
            if (by_four) {
              for (; t + 4 <= batch; t += 4) {
                const uint8_t* xs[4] = {xq + t * q8_stride, xq + (t + 1) * q8_stride, xq + (t + 2) * q8_stride,
                                        xq + (t + 3) * q8_stride};
                const float* scales[4] = {scale_base + t * blocks, scale_base + (t + 1) * blocks,
                                          scale_base + (t + 2) * blocks, scale_base + (t + 3) * blocks};
                const uint8_t* xus[4] = {xu + t * q8_stride, xu + (t + 1) * q8_stride, xu + (t + 2) * q8_stride,
                                         xu + (t + 3) * q8_stride};
                const float* sums[4] = {a.sum + t * blocks, a.sum + (t + 1) * blocks, a.sum + (t + 2) * blocks,
                                        a.sum + (t + 3) * blocks};
                for (size_t r = r0; r < r1; ++r) {
                  float out[4];
                  if (w.type == GgmlType::Q4_K) {
                    detail::dot_q8_x4_q4_k(base + r * stride, xs, scales, sums, cols, out);
                  } else if (vnni) {
                    vnni_x4(base + r * stride, xus, scales, cols, out);
                  } else {
                    detail::dot_q8_x4_q8_0(base + r * stride, xs, scales, cols, out);
                  }
                  for (int i = 0; i < 4; ++i) y[(t + i) * rows + r] = out[i];
                }
              }
            }
            for (; t < batch; ++t) {
              for (size_t r = r0; r < r1; ++r) y[t * rows + r] = dot_q8_activation(k, base + r * stride, a, t, cols);
            }
          }
        },
        min_chunk);
    return;
  }
  pool.parallel_for(
      rows,
      [&](size_t begin, size_t end) {
        for (size_t r = begin; r < end; ++r) {
          const uint8_t* row = base + r * stride;
          for (size_t t = 0; t < batch; ++t) y[t * rows + r] = k.dot(row, x + t * cols, cols);
        }
      },
      min_chunk);
}

void matvec_reference(const WeightMatrix& w, const float* x, float* y) {
  checked_stride(w, "matvec_reference");
  std::vector<float> row(static_cast<size_t>(w.cols));
  for (int64_t r = 0; r < w.rows; ++r) {
    dequantize_row(w, r, row.data());
    double sum = 0.0;
    for (int64_t i = 0; i < w.cols; ++i) sum += static_cast<double>(row[i]) * x[i];
    y[r] = static_cast<float>(sum);
  }
}

}  // namespace turbokv::engine
