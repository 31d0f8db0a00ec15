// Attention over DenseKVCache pages: keys and values are read in place, page by page, in blocks
// of kBlockTokens, converted to float in registers (fp16) by the kernels. A call with many
// queries (a prompt chunk) runs tiles of kPrefillRows rows through the table's prefill_*
// kernels, which share each block's loads among all of them.
#include <algorithm>

#include "attention/attention_engine.hpp"
#include "attention/attention_paths.hpp"

namespace turbokv::attn {

namespace {

class DenseSource : public BlockSource {
 public:
  DenseSource(const DenseKVCache& cache, const KernelTable& k, bool prefill)
      : cache_(cache),
        dots_f16_(prefill ? k.prefill_dots_f16 : k.dots_f16),
        dots_f32_(prefill ? k.prefill_dots_f32 : k.dots_f32),
        accumulate_f16_(prefill ? k.prefill_accumulate_f16 : k.accumulate_f16),
        accumulate_f32_(prefill ? k.prefill_accumulate_f32 : k.accumulate_f32) {}

  void process(int head, size_t begin, size_t end, Tile& tile) const override {
    const size_t page_tokens = cache_.page_tokens();
    const int dim = cache_.head_dim();
    const bool half = cache_.dtype() == DenseDtype::f16;
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
              [&](float* s) { dots_f16_(tile.q, tile.q_width, tile.rows, kb, n, dim, s, kBlockTokens); },
              [&](const float* w) {
                accumulate_f16_(w, kBlockTokens, tile.rows, vb, n, dim, tile.acc.data(), tile.acc_width);
              });
        } else {
          const auto* kb = static_cast<const float*>(keys) + offset;
          const auto* vb = static_cast<const float*>(values) + offset;
          tile.step(
              n, t,
              [&](float* s) { dots_f32_(tile.q, tile.q_width, tile.rows, kb, n, dim, s, kBlockTokens); },
              [&](const float* w) {
                accumulate_f32_(w, kBlockTokens, tile.rows, vb, n, dim, tile.acc.data(), tile.acc_width);
              });
        }
        t += n;
      }
    }
  }

 private:
  const DenseKVCache& cache_;
  decltype(KernelTable::dots_f16) dots_f16_;
  decltype(KernelTable::dots_f32) dots_f32_;
  decltype(KernelTable::accumulate_f16) accumulate_f16_;
  decltype(KernelTable::accumulate_f32) accumulate_f32_;
};

}  // namespace

void attend_dense(const AttentionRequest& request, const DenseKVCache& cache) {
  const int kv_heads = cache.kv_heads();
  const int dim = cache.head_dim();
  const int group = request.n_q_heads / kv_heads;
  const size_t n_floats = static_cast<size_t>(request.n_q_heads) * request.n_queries * dim;
  float* rows = call_buffer(CallBuffer::queries, n_floats);
  gather_query_rows(request.queries, kv_heads, group, request.n_queries, dim, rows, dim, 0);
  Problem problem;
  problem.kv_heads = kv_heads;
  problem.group = group;
  problem.n_queries = request.n_queries;
  problem.n_tokens = cache.size();
  problem.q_width = dim;
  problem.acc_width = dim;
  problem.rows = rows;
  problem.options = request.options;
  problem.scale = effective_scale(request.options, dim);
  problem.kernels = &active_kernel_table();
  problem.tile_rows = prefill_tile_rows(request.n_queries);
  const DenseSource source(cache, *problem.kernels, problem.tile_rows == kPrefillRows);
  float* result = call_buffer(CallBuffer::result, n_floats);
  run_attention(problem, source, result);
  scatter_output_rows(result, dim, 0, kv_heads, group, request.n_queries, dim, request.out);
}

}  // namespace turbokv::attn
