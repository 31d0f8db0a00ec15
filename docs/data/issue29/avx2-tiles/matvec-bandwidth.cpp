// Whether the AVX2 Q8_0 matvec kernel (a copy of dot_q8_row_q8_0, engine/tensor/matmul_avx2.cpp)
// reads its weights as fast as a plain read does: 1.3 GB of 2048-column Q8_0 rows, two threads
// (halves), the kernel with software prefetch 1-16 KiB ahead or none, and a plain 256-bit read of
// the same buffer; twelve interleaved rounds, GB/s median, min and max. Not part of the build:
//   g++ -O2 -mavx2 -mfma -mf16c -std=c++20 matvec-bandwidth.cpp -o /tmp/mvbw -lpthread
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>

namespace {

float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

float half(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

__m256 block(__m256 acc, const uint8_t* w, const uint8_t* x) {
  const __m256i wv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + 2));
  const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + 2));
  const __m256i p = _mm256_maddubs_epi16(_mm256_sign_epi8(wv, wv), _mm256_sign_epi8(xv, wv));
  const __m256 s = _mm256_cvtepi32_ps(_mm256_madd_epi16(p, _mm256_set1_epi16(1)));
  return _mm256_fmadd_ps(_mm256_set1_ps(half(w) * half(x)), s, acc);
}

template <int kAhead>
float dot(const uint8_t* row, const uint8_t* x, int64_t cols) {
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
  for (int64_t b = 0; b + 2 <= cols / 32; b += 2, row += 68, x += 68) {
    if (kAhead > 0) _mm_prefetch(reinterpret_cast<const char*>(row) + kAhead, _MM_HINT_T0);
    a0 = block(a0, row, x);
    a1 = block(a1, row + 34, x + 34);
  }
  return hsum(_mm256_add_ps(a0, a1));
}

using Clock = std::chrono::steady_clock;

template <typename Fn>
double two_threads_gbps(size_t bytes, Fn&& half_fn) {
  const auto t0 = Clock::now();
  std::thread a([&] { half_fn(0); }), b([&] { half_fn(1); });
  a.join();
  b.join();
  return static_cast<double>(bytes) / std::chrono::duration<double>(Clock::now() - t0).count() / 1e9;
}

}  // namespace

int main() {
  constexpr int64_t kCols = 2048;
  constexpr size_t kRowBytes = kCols / 32 * 34;
  const size_t rows = static_cast<size_t>(1.3e9) / kRowBytes;
  std::vector<uint8_t> w(rows * kRowBytes);
  for (size_t i = 0; i < w.size(); ++i) w[i] = static_cast<uint8_t>(i * 2654435761u >> 13);
  std::vector<uint8_t> x(kRowBytes, 3);
  std::vector<float> y(rows);
  const char* names[] = {"prefetch 1 KiB", "prefetch 2 KiB", "prefetch 4 KiB", "prefetch 8 KiB",
                         "prefetch 16 KiB", "no prefetch", "plain read"};
  const auto variant = [&](int v) {
    if (v == 6) {
      return two_threads_gbps(w.size(), [&](int t) {
        const size_t begin = t * w.size() / 2 / 128 * 128, end = (t + 1) * w.size() / 2 / 128 * 128;
        __m256i s = _mm256_setzero_si256();
        for (size_t i = begin; i < end; i += 32) s = _mm256_add_epi8(s, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(&w[i])));
        y[t] = static_cast<float>(_mm256_extract_epi32(s, 0));
      });
    }
    return two_threads_gbps(w.size(), [&](int t) {
      for (size_t r = t * rows / 2; r < (t + 1) * rows / 2; ++r) {
        const uint8_t* p = &w[r * kRowBytes];
        switch (v) {
          case 0: y[r] = dot<1024>(p, x.data(), kCols); break;
          case 1: y[r] = dot<2048>(p, x.data(), kCols); break;
          case 2: y[r] = dot<4096>(p, x.data(), kCols); break;
          case 3: y[r] = dot<8192>(p, x.data(), kCols); break;
          case 4: y[r] = dot<16384>(p, x.data(), kCols); break;
          default: y[r] = dot<0>(p, x.data(), kCols); break;
        }
      }
    });
  };
  std::vector<double> results[7];
  for (int round = 0; round < 12; ++round) {
    for (int v = 0; v < 7; ++v) results[v].push_back(variant(v));
  }
  for (int v = 0; v < 7; ++v) {
    std::sort(results[v].begin(), results[v].end());
    std::printf("%-16s median %.1f  min %.1f  max %.1f GB/s\n", names[v], results[v][6], results[v][0], results[v][11]);
  }
}
