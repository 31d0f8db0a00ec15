// Micro-benchmarks of the TurboQuant codecs: encode, decode and decode_rotated (no inverse
// rotation: what fused attention consumes) at d = 64, 128, 256 and 2, 3, 4 bits, SIMD kernels
// vs the scalar reference (last argument 1 = scalar), Hadamard rotation, batches of 256 vectors.
// items_per_second = vectors per second on one thread.
#include <benchmark/benchmark.h>

#include <cmath>
#include <vector>

#include "turbokv/codec.hpp"
#include "turbokv/prng.hpp"

namespace turbokv {
namespace {

constexpr size_t kBatch = 256;

std::vector<float> random_vectors(size_t n, int dim) {
  SplitMix64 rng(12345);
  std::vector<float> x(n * dim);
  for (auto& v : x) v = static_cast<float>(rng.normal());
  return x;
}

struct Fixture {
  explicit Fixture(const benchmark::State& state)
      : codec(options(state)), x(random_vectors(kBatch, codec.options().dim)),
        codes(kBatch * codec.code_size()), out(x.size()) {
    set_force_scalar_kernels(state.range(2) != 0);
    codec.encode(x.data(), kBatch, codes.data());
  }
  ~Fixture() { set_force_scalar_kernels(false); }
  static CodecOptions options(const benchmark::State& state) {
    CodecOptions o;
    o.dim = static_cast<int>(state.range(0));
    o.bits = static_cast<double>(state.range(1));
    return o;
  }
  TurboQuantMse codec;
  std::vector<float> x;
  std::vector<uint8_t> codes;
  std::vector<float> out;
};

void BM_MseEncode(benchmark::State& state) {
  Fixture f(state);
  for (auto _ : state) {
    f.codec.encode(f.x.data(), kBatch, f.codes.data());
    benchmark::DoNotOptimize(f.codes.data());
  }
  state.SetItemsProcessed(state.iterations() * kBatch);
}

void BM_MseDecode(benchmark::State& state) {
  Fixture f(state);
  for (auto _ : state) {
    f.codec.decode(f.codes.data(), kBatch, f.out.data());
    benchmark::DoNotOptimize(f.out.data());
  }
  state.SetItemsProcessed(state.iterations() * kBatch);
}

void BM_MseDecodeRotated(benchmark::State& state) {
  Fixture f(state);
  for (auto _ : state) {
    f.codec.decode_rotated(f.codes.data(), kBatch, f.out.data());
    benchmark::DoNotOptimize(f.out.data());
  }
  state.SetItemsProcessed(state.iterations() * kBatch);
}

void codec_args(benchmark::internal::Benchmark* b) {
  b->ArgNames({"dim", "bits", "scalar"});
  for (int dim : {64, 128, 256}) {
    for (int bits : {2, 3, 4}) {
      for (int scalar : {0, 1}) b->Args({dim, bits, scalar});
    }
  }
}

BENCHMARK(BM_MseEncode)->Apply(codec_args);
BENCHMARK(BM_MseDecode)->Apply(codec_args);
BENCHMARK(BM_MseDecodeRotated)->Apply(codec_args);

}  // namespace
}  // namespace turbokv
