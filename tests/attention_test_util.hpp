// Helpers the attention tests share (with test_util.hpp's random data): relative L2 error, the kernel tables this CPU
// runs, and forcing one of them for a scope.
#pragma once

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "attention/attention_kernels.hpp"
#include "turbokv/attention.hpp"
#include "turbokv/kv_cache.hpp"
#include "test_util.hpp"

namespace turbokv::test {

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
  if (const attn::KernelTable* k = attn::avx_vnni_kernel_table()) t.push_back(k);
  if (const attn::KernelTable* k = attn::vnni_kernel_table()) t.push_back(k);
  return t;
}

// Decode of a chunk: appends its tokens (k, v head-major [kv_heads][chunk][dim]) to `cache` one
// at a time and attends each token's query (q head-major [q_heads][chunk][dim]) right after it.
// Returns the outputs, laid out as q.
inline std::vector<float> attend_token_by_token(KVCache& cache, const std::vector<float>& q,
                                                const std::vector<float>& k, const std::vector<float>& v,
                                                int q_heads, int kv_heads, int chunk, int dim) {
  std::vector<float> decoded(q.size());
  std::vector<float> ki(kv_heads * dim), vi(kv_heads * dim), qi(q_heads * dim), oi(q_heads * dim);
  for (int i = 0; i < chunk; ++i) {
    for (int h = 0; h < kv_heads; ++h) {
      std::copy_n(k.begin() + (h * chunk + i) * dim, dim, ki.begin() + h * dim);
      std::copy_n(v.begin() + (h * chunk + i) * dim, dim, vi.begin() + h * dim);
    }
    for (int h = 0; h < q_heads; ++h) std::copy_n(q.begin() + (h * chunk + i) * dim, dim, qi.begin() + h * dim);
    cache.append(ki, vi, 1);
    attend(qi, q_heads, 1, cache, oi);
    for (int h = 0; h < q_heads; ++h) std::copy_n(oi.begin() + h * dim, dim, decoded.begin() + (h * chunk + i) * dim);
  }
  return decoded;
}

// attend() uses `table` while this lives.
struct KernelTableGuard {
  explicit KernelTableGuard(const attn::KernelTable* table) { attn::set_kernel_table_override(table); }
  ~KernelTableGuard() { attn::set_kernel_table_override(nullptr); }
  KernelTableGuard(const KernelTableGuard&) = delete;
  KernelTableGuard& operator=(const KernelTableGuard&) = delete;
};

}  // namespace turbokv::test
