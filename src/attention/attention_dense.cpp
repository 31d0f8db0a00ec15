// Attention over DenseKVCache pages: keys and values are read in place, page by page, in blocks
// of kBlockTokens, converted to float in registers (fp16) by the kernels.
#include <algorithm>
#include <vector>

#include "attention/attention_engine.hpp"
#include "attention/attention_paths.hpp"

namespace turbokv::attn {

namespace {

class DenseSource : public BlockSource {
 public:
  explicit DenseSource(const DenseKVCache& cache) : cache_(cache) {}

  void process(int head, size_t begin, size_t end, Tile& tile) const override {
    const size_t page_tokens = cache_.page_tokens();
    const int dim = cache_.head_dim();
    const bool half = cache_.dtype() == DenseDtype::f16;
    const KernelTable& k = *tile.kernels;
    size_t t = begin;
    while (t < end) {
      const size_t page = t / page_tokens;
      const size_t page_first = page * page_tokens;
      const size_t page_end = std::min(end, page_first + cache_.tokens_in_page(page));
      const void* keys = cache_.key_page(page, head);
      const void* values = cache_.value_page(page, head);
      while (t < page_end) {
        const size_t n = std::min<size_t>(kBlockTokens, page_end - t);
        const size_t offset = (t - page_first) * dim;
        if (half) {
          const auto* kb = static_cast<const uint16_t*>(keys) + offset;
          const auto* vb = static_cast<const uint16_t*>(values) + offset;
          tile.step(
              n, t,
              [&](float* s) { k.dots_f16(tile.q, tile.q_width, tile.rows, kb, n, dim, s, kBlockTokens); },
              [&](const float* w) {
                k.accumulate_f16(w, kBlockTokens, tile.rows, vb, n, dim, tile.acc.data(), tile.acc_width);
              });
        } else {
          const auto* kb = static_cast<const float*>(keys) + offset;
          const auto* vb = static_cast<const float*>(values) + offset;
          tile.step(
              n, t,
              [&](float* s) { k.dots_f32(tile.q, tile.q_width, tile.rows, kb, n, dim, s, kBlockTokens); },
              [&](const float* w) {
                k.accumulate_f32(w, kBlockTokens, tile.rows, vb, n, dim, tile.acc.data(), tile.acc_width);
              });
        }
        t += n;
      }
    }
  }

 private:
  const DenseKVCache& cache_;
};

}  // namespace

void attend_dense(const AttentionRequest& request, const DenseKVCache& cache) {
  const int kv_heads = cache.kv_heads();
  const int dim = cache.head_dim();
  const int group = request.n_q_heads / kv_heads;
  std::vector<float> rows(static_cast<size_t>(request.n_q_heads) * request.n_queries * dim);
  gather_query_rows(request.queries, kv_heads, group, request.n_queries, dim, rows.data(), dim, 0);
  Problem problem;
  problem.kv_heads = kv_heads;
  problem.group = group;
  problem.n_queries = request.n_queries;
  problem.n_tokens = cache.size();
  problem.q_width = dim;
  problem.acc_width = dim;
  problem.rows = rows.data();
  problem.options = request.options;
  problem.scale = effective_scale(request.options, dim);
  problem.kernels = &active_kernel_table();
  const DenseSource source(cache);
  const std::vector<float> result = run_attention(problem, source);
  scatter_output_rows(result.data(), dim, 0, kv_heads, group, request.n_queries, dim, request.out);
}

}  // namespace turbokv::attn
