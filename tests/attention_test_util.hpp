// Helpers the attention tests share: random data, relative L2 error, the kernel tables this CPU
// runs, and forcing one of them for a scope.
#pragma once

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "attention/attention_kernels.hpp"

namespace turbokv::test {

inline std::vector<float> random_vector(size_t n, std::mt19937& rng, float sigma = 1.0f) {
  std::normal_distribution<float> g(0.0f, sigma);
  std::vector<float> v(n);
  for (auto& x : v) x = g(rng);
  return v;
}

// ||a - b|| / ||b||.
inline double rel_l2(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += double(b[i]) * b[i];
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

// The scalar table and every SIMD table this CPU runs.
inline std::vector<const attn::KernelTable*> all_kernel_tables() {
  std::vector<const attn::KernelTable*> t{&attn::scalar_kernel_table()};
  if (const attn::KernelTable* k = attn::avx2_kernel_table()) t.push_back(k);
  if (const attn::KernelTable* k = attn::vnni_kernel_table()) t.push_back(k);
  return t;
}

// attend() uses `table` while this lives.
struct KernelTableGuard {
  explicit KernelTableGuard(const attn::KernelTable* table) { attn::set_kernel_table_override(table); }
  ~KernelTableGuard() { attn::set_kernel_table_override(nullptr); }
  KernelTableGuard(const KernelTableGuard&) = delete;
  KernelTableGuard& operator=(const KernelTableGuard&) = delete;
};

}  // namespace turbokv::test
