// Attention of a block of queries over one layer's KVCache.
//
// queries and out are [n_q_heads][n_queries][head_dim] float32. n_q_heads must be a multiple of
// the cache's kv_heads (grouped-query attention: query head h reads kv head h / (n_q_heads /
// kv_heads)). The queries are the cache's newest n_queries positions: query i sits at position
// size - n_queries + i and, with the causal mask, sees keys 0..that position. n_queries = 1 is a
// decode step; more is a chunked prefill (append the chunk's keys/values first, then attend).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "turbokv/kv_cache.hpp"

namespace turbokv {

// How the fused path over TurboQuant codes computes. exact: float centroids, within float
// rounding of dequantize-then-attend. int8: queries rounded to int8 per row, centroids to int8
// per codebook, and the softmax weights (times the value norms) to 7 bits per row and block of
// 64 tokens, so the codes are multiplied with byte arithmetic (vpdpbusd where the CPU has
// AVX512-VNNI); several times cheaper, with a measured cost in accuracy (docs/benchmarks.md).
// It applies to mse keys and values of 2, 3 or 4 bits in groups of 32 coordinates, and, on
// CPUs with AVX512-VNNI/VBMI, 8 bits in groups of 64-256 (then in 12-bit integers); other
// caches take the exact path. cache_default: what the cache's options ask for
// (TurboQuantCacheOptions::int8_attention). Other cache classes ignore this.
enum class AttentionArithmetic : uint8_t { cache_default, exact, int8 };

struct AttentionOptions {
  float scale = 0.0f;    // 0 means 1/sqrt(head_dim)
  float softcap = 0.0f;  // > 0: logits become softcap * tanh(logits / softcap)
  bool causal = true;    // false: every query sees the whole cache
  // > 0 (causal only): sliding-window attention, the query at cache position p sees only the
  // keys at p - window + 1 .. p (window tokens, itself included), as llama.cpp's SWA mask.
  // Positions count the cache's tokens, so a cache that drops tokens shifts the window.
  size_t window = 0;
  int threads = 0;       // 0: the library default (all cores)
  AttentionArithmetic arithmetic = AttentionArithmetic::cache_default;
};

struct AttentionRequest {
  std::span<const float> queries;
  int n_q_heads = 0;
  int n_queries = 1;
  std::span<float> out;
  AttentionOptions options;
};

// Validates the request against the cache (shapes, empty cache, GQA ratio), then runs the fast
// path for the cache's class: the SIMD dense kernel for DenseKVCache, the fused packed-code
// kernel for TurboQuantKVCache, and KVCache::attend() (dequantize-then-attend by default) for
// any other class. Throws turbokv::Error on bad input.
void attend(std::span<const float> queries, int n_q_heads, int n_queries, const KVCache& cache,
            std::span<float> out, const AttentionOptions& options = {});

// Reference path: fetch() the whole cache in float32, then exact attention (double
// accumulation). The correctness oracle for every fused kernel.
void attend_dequantized(std::span<const float> queries, int n_q_heads, int n_queries,
                        const KVCache& cache, std::span<float> out,
                        const AttentionOptions& options = {});

// Exact attention over explicit float32 keys/values ([kv_heads][n_tokens][head_dim]), used by
// the reference path and tests.
void attend_reference(std::span<const float> queries, int n_q_heads, int n_queries,
                      std::span<const float> keys, std::span<const float> values, int kv_heads,
                      size_t n_tokens, int head_dim, std::span<float> out,
                      const AttentionOptions& options = {});

// The oldest position a sliding-window layer must still hold for queries at positions >=
// `next_query`: the window's start rounded down to the attention engine's block of keys (the
// engine reads whole blocks and masks the tokens before a window). A cache may free everything
// before it (KVCache::drop_before) and attention over it stays bit-identical. window 0: 0.
size_t sliding_window_keep_from(size_t next_query, size_t window);

// Throws turbokv::Error unless the request fits the cache (and, for a cache that no longer
// holds its oldest positions, unless the request's window leaves them unread).
void validate_attention_request(const AttentionRequest& request, const KVCache& cache);

}  // namespace turbokv
