// The AVX2 table's 3-bit int8 prefill tiles alone (four rows, head_dim 64, one thread, the
// codes L1-resident): prefill_int8_dots and prefill_int8_accumulate over 256 blocks of 64
// tokens, six rounds, microseconds a block. Not part of the build; from the checkout, after
// scripts/build.sh:
//   g++ -O2 -std=c++20 -Isrc -Iinclude docs/data/issue29/block-loop/kernel-bench.cpp \
//     build/src/libturbokv_core.a -lfmt -lhwy -lpthread -o /tmp/kernel-bench
#include <chrono>
#include <cstdio>
#include <random>
#include <vector>
#include "attention/attention_kernels.hpp"
using namespace turbokv::attn;
int main() {
  const KernelTable* k = avx2_kernel_table();
  std::mt19937 rng(1);
  const int dims = 64, rows = 4; const size_t n = kBlockTokens, code_size = 26; const int nblocks = 256;
  std::vector<uint8_t> rec(nblocks * n * code_size); for (auto& b : rec) b = rng();
  int8_t t[16]; for (int i = 0; i < 16; ++i) t[i] = (int8_t)((int)(rng() % 255) - 127);
  std::vector<int8_t> q(rows * 80); for (auto& x : q) x = (int8_t)((int)(rng() % 127) - 63);
  float rs[4] = {1, 1, 1, 1}; std::vector<float> sc(rows * kBlockTokens);
  std::vector<uint8_t> w8(rows * kBlockTokens); for (auto& w : w8) w = rng() % 128;
  std::vector<float> acc(rows * 72, 0.f);
  CodeGroup g; g.bits = 3; g.dims = dims; g.offset = 2; g.table8 = t;
  for (int round = 0; round < 6; ++round) {
    auto t0 = std::chrono::steady_clock::now();
    for (int it = 0; it < 200; ++it) for (int b = 0; b < nblocks; ++b)
      k->prefill_int8_dots(q.data(), 80, rows, rs, rec.data() + b * n * code_size, code_size, n, g, sc.data(), kBlockTokens, false);
    auto t1 = std::chrono::steady_clock::now();
    for (int it = 0; it < 200; ++it) for (int b = 0; b < nblocks; ++b)
      k->prefill_int8_accumulate(w8.data(), kBlockTokens, rows, rs, rec.data() + b * n * code_size, code_size, n, g, acc.data(), 72);
    auto t2 = std::chrono::steady_clock::now();
    printf("keys %.3f values %.3f us/block\n", std::chrono::duration<double, std::micro>(t1 - t0).count() / (200.0 * nblocks),
           std::chrono::duration<double, std::micro>(t2 - t1).count() / (200.0 * nblocks));
  }
  printf("%f %f\n", sc[3], acc[5]);
}
