// matvec / matmul per weight type at Llama-3.2-1B sizes: 2048x2048 (attention q/o) and
// 8192x2048 (MLP gate/up: 8192 rows of 2048). bytes_per_second counts the weight bytes read,
// so it reads directly as weight bandwidth. Threads: 1 and 2 (the machine's cores).
#include <benchmark/benchmark.h>

#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <vector>

#include "engine/tensor/tensor_types.hpp"
#include "turbokv/half.hpp"
#include "turbokv/thread_pool.hpp"

namespace turbokv::engine {
namespace {

// The first seven keep the indices earlier results were recorded with (docs/data/matvec_bench.json).
constexpr GgmlType kTypes[] = {GgmlType::F32,  GgmlType::F16,  GgmlType::BF16,   GgmlType::Q8_0, GgmlType::Q4_0,
                               GgmlType::Q4_K, GgmlType::Q6_K, GgmlType::Q4_1,   GgmlType::Q5_0, GgmlType::Q5_1,
                               GgmlType::IQ4_NL, GgmlType::Q2_K, GgmlType::Q3_K, GgmlType::Q5_K, GgmlType::IQ4_XS};

// Random normal weights through the type's encoder (every type has one).
const std::vector<uint8_t>& weights(GgmlType type, int64_t rows, int64_t cols) {
  static std::map<std::tuple<GgmlType, int64_t, int64_t>, std::vector<uint8_t>> cache;
  auto& bytes = cache[{type, rows, cols}];
  if (!bytes.empty()) return bytes;
  const size_t stride = row_bytes(type, cols);
  bytes.resize(stride * static_cast<size_t>(rows));
  std::mt19937 rng(42);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  std::vector<float> row(static_cast<size_t>(cols));
  for (int64_t r = 0; r < rows; ++r) {
    for (auto& v : row) v = normal(rng);
    quantize_row(type, row.data(), cols, bytes.data() + static_cast<size_t>(r) * stride);
  }
  return bytes;
}

ThreadPool& pool(int threads) {
  static std::map<int, std::unique_ptr<ThreadPool>> pools;
  auto& p = pools[threads];
  if (!p) p = std::make_unique<ThreadPool>(threads);
  return *p;
}

// Args: type index, rows, cols, threads, batch n (1 = matvec), kernels: 0 = best (AVX2, x as
// Q8_0 for the quantized types), 1 = scalar, 2 = AVX2 with x kept in float, 3 = matmul_rowwise
// (the batched forward's product: each row as matvec computes it), 4 = the same without the
// VNNI kernels (AVX2 only; same results), 5 = the same without the AVX-512 register tiles (the
// 256-bit VNNI kernel, in its VEX form where the CPU has AVX-VNNI; same results). With
// TURBOKV_NO_AVX512=1 in the environment, mode 5 is what an AVX-VNNI CPU without AVX-512 runs
// (matvec's 512-bit kernel off too).
void BM_Product(benchmark::State& state) {
  const GgmlType type = kTypes[state.range(0)];
  const int64_t rows = state.range(1), cols = state.range(2);
  const int threads = static_cast<int>(state.range(3));
  const int64_t n = state.range(4);
  const int64_t mode = state.range(5);
  force_scalar_kernels(mode == 1);
  use_vnni_kernels(mode != 4);
  use_avx512_tile_kernel(mode != 5);
  set_q8_activations(mode != 2);
  const auto& bytes = weights(type, rows, cols);
  const WeightMatrix w{type, rows, cols, bytes.data()};
  std::vector<float> x(static_cast<size_t>(n * cols), 0.5f), y(static_cast<size_t>(n * rows));
  ThreadPool& p = pool(threads);
  for (auto _ : state) {
    if (mode >= 3) {
      matmul_rowwise(w, x.data(), n, y.data(), p);
    } else if (n == 1) {
      matvec(w, x.data(), y.data(), p);
    } else {
      matmul(w, x.data(), n, y.data(), p);
    }
    benchmark::DoNotOptimize(y.data());
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(bytes.size()));
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * static_cast<double>(rows * cols * n) * state.iterations(),
                                                 benchmark::Counter::kIsRate, benchmark::Counter::kIs1000);
  const char* mode_name = mode == 1   ? "scalar"
                          : mode == 2 ? "avx2, float x"
                          : mode == 3 ? "rowwise"
                          : mode == 4 ? "rowwise, avx2 only"
                          : mode == 5 ? "rowwise, 256-bit vnni"
                                      : kernel_isa();
  state.SetLabel(std::string(type_name(type)) + " " + mode_name);
  force_scalar_kernels(false);
  use_vnni_kernels(true);
  use_avx512_tile_kernel(true);
  set_q8_activations(true);
}

void matvec_args(benchmark::internal::Benchmark* b) {
  b->ArgNames({"type", "rows", "cols", "threads", "n", "kernels"});
  constexpr int kTypeCount = static_cast<int>(sizeof(kTypes) / sizeof(kTypes[0]));
  for (int t = 0; t < kTypeCount; ++t) {
    for (int threads : {1, 2}) {
      b->Args({t, 2048, 2048, threads, 1, 0});
      b->Args({t, 8192, 2048, threads, 1, 0});
    }
    b->Args({t, 2048, 2048, 1, 1, 1});  // the scalar kernels, for the ratio
  }
  // Quantized types with x kept in float (decoded in registers, or for the types added later
  // decoded by the scalar decoder), against the Q8_0-activation default.
  for (int t = 3; t < kTypeCount; ++t) {
    for (int threads : {1, 2}) {
      b->Args({t, 2048, 2048, threads, 1, 2});
      b->Args({t, 8192, 2048, threads, 1, 2});
    }
  }
  // Batched products (4 to 64 rows: server steps, prefill) on the MLP-sized matrix: matmul, and
  // matmul_rowwise.
  for (int t : {0, 1, 3, 4, 5, 13}) {
    for (int n : {4, 8, 16, 64}) {
      b->Args({t, 8192, 2048, 2, n, 0});
      if (t >= 3) b->Args({t, 8192, 2048, 2, n, 3});
      if (t == 3) b->Args({t, 8192, 2048, 2, n, 4});
      if (t == 3) b->Args({t, 8192, 2048, 2, n, 5});
      if (t == 3 && n == 64) {  // one thread: the kernels' own rate
        b->Args({t, 8192, 2048, 1, n, 3});
        b->Args({t, 8192, 2048, 1, n, 5});
      }
    }
  }
  // Q8_0: prefill chunks of 128 rows, and the down projection's shape (2048 x 8192).
  for (int n : {64, 128}) {
    for (int mode : {3, 5}) {
      if (n == 128) b->Args({3, 8192, 2048, 2, n, mode});
      b->Args({3, 2048, 8192, 2, n, mode});
    }
  }
}

BENCHMARK(BM_Product)->Apply(matvec_args)->Unit(benchmark::kMicrosecond)->UseRealTime();

}  // namespace
}  // namespace turbokv::engine
