// Micro-benchmarks of the attention block kernels on one 64-token block held in L1 (compute
// cost per token, no memory traffic): dense fp16 and f32 dots/accumulate and packed-code dots/accumulate
// at each width, 4 query rows (a GQA group of 4), head_dim 128. End-to-end decode timing with
// memory traffic is `turbokv attention-bench`.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <string>
#include <vector>

#include "attention/attention_kernels.hpp"
#include "turbokv/half.hpp"
#include "turbokv/prng.hpp"

namespace {

using turbokv::attn::CodeGroup;
using turbokv::attn::kBlockTokens;
using turbokv::attn::KernelTable;

constexpr int kDim = 128;
constexpr int kRows = 4;

const KernelTable& table_for(const benchmark::State& state) {
  const KernelTable* avx2 = turbokv::attn::avx2_kernel_table();
  return state.range(1) == 1 && avx2 != nullptr ? *avx2 : turbokv::attn::scalar_kernel_table();
}

std::vector<float> random_floats(size_t n, uint64_t seed) {
  turbokv::SplitMix64 rng(seed);
  std::vector<float> v(n);
  for (auto& x : v) x = static_cast<float>(rng.normal());
  return v;
}

void BM_DenseF16(benchmark::State& state) {
  const KernelTable& k = table_for(state);
  const auto q = random_floats(kRows * kDim, 1);
  const auto kf = random_floats(kBlockTokens * kDim, 2);
  std::vector<uint16_t> keys(kf.size());
  for (size_t i = 0; i < kf.size(); ++i) keys[i] = turbokv::float_to_half(kf[i]);
  std::vector<float> scores(kRows * kBlockTokens, 0.01f), acc(kRows * kDim);
  for (auto _ : state) {
    k.dots_f16(q.data(), kDim, kRows, keys.data(), kBlockTokens, kDim, scores.data(), kBlockTokens);
    k.accumulate_f16(scores.data(), kBlockTokens, kRows, keys.data(), kBlockTokens, kDim, acc.data(), kDim);
    benchmark::DoNotOptimize(acc.data());
  }
  state.SetItemsProcessed(state.iterations() * kBlockTokens);
  state.SetLabel(k.name);
}

// The same with float keys/values: the multiply-adds alone, what a free decode would leave.
void BM_DenseF32(benchmark::State& state) {
  const KernelTable& k = table_for(state);
  const auto q = random_floats(kRows * kDim, 1);
  const auto keys = random_floats(kBlockTokens * kDim, 2);
  std::vector<float> scores(kRows * kBlockTokens, 0.01f), acc(kRows * kDim);
  for (auto _ : state) {
    k.dots_f32(q.data(), kDim, kRows, keys.data(), kBlockTokens, kDim, scores.data(), kBlockTokens);
    k.accumulate_f32(scores.data(), kBlockTokens, kRows, keys.data(), kBlockTokens, kDim, acc.data(), kDim);
    benchmark::DoNotOptimize(acc.data());
  }
  state.SetItemsProcessed(state.iterations() * kBlockTokens);
  state.SetLabel(k.name);
}

// One 64-token block of random packed records at `bits`, its code group and 4 query rows.
struct PackedBlock {
  explicit PackedBlock(int bits)
      : code_size(static_cast<size_t>(kDim) * bits / 8 + 2), records(kBlockTokens * code_size),
        table(random_floats(256, 4)), q(random_floats(kRows * kDim, 5)),
        scores(kRows * kBlockTokens, 0.01f), acc(kRows * kDim) {
    turbokv::SplitMix64 rng(3);
    for (auto& b : records) b = static_cast<uint8_t>(rng.next());
    group.bits = bits;
    group.dims = kDim;
    group.offset = 0;
    group.table = table.data();
    turbokv::attn::finish_code_group(group, code_size);
  }
  void dots(const KernelTable& k) {
    k.group_dots(q.data(), kDim, kRows, records.data(), code_size, kBlockTokens, group,
                 scores.data(), kBlockTokens, false);
  }
  void accumulate(const KernelTable& k) {
    k.group_accumulate(scores.data(), kBlockTokens, kRows, records.data(), code_size,
                       kBlockTokens, group, acc.data(), kDim);
  }
  size_t code_size;
  std::vector<uint8_t> records;
  std::vector<float> table, q, scores, acc;
  CodeGroup group;
};

void BM_Packed(benchmark::State& state) {
  const KernelTable& k = table_for(state);
  PackedBlock block(static_cast<int>(state.range(0)));
  for (auto _ : state) {
    block.dots(k);
    block.accumulate(k);
    benchmark::DoNotOptimize(block.acc.data());
  }
  state.SetItemsProcessed(state.iterations() * kBlockTokens);
  state.SetLabel(k.name);
}

// The two halves of BM_Packed apart (avx2 table): scores, then value accumulation.
void BM_PackedPart(benchmark::State& state) {
  const KernelTable* avx2 = turbokv::attn::avx2_kernel_table();
  const KernelTable& k = avx2 != nullptr ? *avx2 : turbokv::attn::scalar_kernel_table();
  PackedBlock block(static_cast<int>(state.range(0)));
  const bool dots = state.range(1) == 0;
  for (auto _ : state) {
    if (dots) {
      block.dots(k);
      benchmark::DoNotOptimize(block.scores.data());
    } else {
      block.accumulate(k);
      benchmark::DoNotOptimize(block.acc.data());
    }
  }
  state.SetItemsProcessed(state.iterations() * kBlockTokens);
  state.SetLabel(std::string(k.name) + (dots ? " dots" : " accumulate"));
}

BENCHMARK(BM_DenseF16)->Args({0, 0})->Args({0, 1});
BENCHMARK(BM_DenseF32)->Args({0, 0})->Args({0, 1});
BENCHMARK(BM_Packed)->ArgsProduct({{1, 2, 3, 4, 5, 8}, {0, 1}});
BENCHMARK(BM_PackedPart)->ArgsProduct({{2, 3, 4, 8}, {0, 1}});

}  // namespace
