// The per-format attention paths behind turbokv::attend() (attention_dispatch.cpp). Each takes a
// request already validated against its cache.
#pragma once

#include "turbokv/attention.hpp"
#include "turbokv/dense_cache.hpp"
#include "turbokv/turboquant_cache.hpp"

namespace turbokv::attn {

// Fast path over DenseKVCache pages (fp16 or f32), read in place.
void attend_dense(const AttentionRequest& request, const DenseKVCache& cache);

// Fused path over TurboQuantKVCache code pages (attention_turboquant.cpp).
void attend_turboquant(const AttentionRequest& request, const TurboQuantKVCache& cache);

}  // namespace turbokv::attn
