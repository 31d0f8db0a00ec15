// Random-weight models with the real shapes of production models, built in memory, for speed
// and memory measurements (`turbokv decode-bench --synthetic NAME`) where the real weights are
// not available. Their outputs mean nothing; their cost per token is that of the real model.
//
// Shapes (from the models' published configs):
//   llama-3.2-1b   dim 2048, hidden 8192, 16 layers, 32 heads / 8 KV heads, head_dim 64,
//                  vocab 128256, rope theta 500000 with Llama 3 scaling (factor 32), tied output
//   llama-3.1-8b   dim 4096, hidden 14336, 32 layers, 32 / 8 heads, head_dim 128, vocab 128256,
//                  rope theta 500000, Llama 3 scaling (factor 8), separate output
//   qwen3-0.6b     dim 1024, hidden 3072, 28 layers, 16 / 8 heads, head_dim 128, vocab 151936,
//                  rope theta 1e6 (NeoX halves), per-head q/k RMSNorm, tied output
//   qwen3-30b-a3b-16e  Qwen3-30B-A3B (dim 2048, 48 layers, 32 / 4 heads, head_dim 128, vocab
//                  151936, experts of width 768 with 8 used per token, F32 router, separate
//                  output) with 16 experts instead of 128: a token's work is the real model's,
//                  its weights (5.5 GB in Q8_0 instead of 32) fit a workstation
//   gemma3-1b      dim 1152, hidden 6912, 26 layers, 4 / 1 heads, head_dim 256, vocab 262144,
//                  5 sliding-window layers (window 512, RoPE base 1e4) to 1 global (1e6),
//                  GeGLU, post-norms, per-head q/k RMSNorm, embedding x sqrt(dim), tied output
//   gemma3-4b      dim 2560, hidden 10240, 34 layers, 8 / 4 heads, head_dim 256, vocab 262208,
//                  window 1024, global RoPE 1e6 with linear scaling 8; otherwise as gemma3-1b
// Weights are uniform with standard deviation 1/sqrt(fan-in), drawn directly in the target type
// (Q8_0: uniform int8 codes with one fp16 scale per block), deterministic from the seed; norm
// weights are 1. A Model built here owns its memory (Model::storage).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/model/model.hpp"
#include "turbokv/thread_pool.hpp"

namespace turbokv::engine {

std::vector<std::string> synthetic_model_names();
// Throws turbokv::Error naming the known shapes for an unknown name.
ModelConfig synthetic_model_config(const std::string& name);

// A supported type's lower-case name ("f32", "q8_0", "q4_k", ...; parse_weight_type) -> the
// type; throws turbokv::Error otherwise.
GgmlType parse_synthetic_weight_type(const std::string& name);

// Bytes the weights of `config` take in `type` (the output matrix counted once when tied).
size_t synthetic_weight_bytes(const ModelConfig& config, GgmlType type);

// Builds the model; throws turbokv::Error for an unsupported type or a config that fails
// ModelConfig::validate(), and before allocating if the weights would exceed `max_bytes`
// (0: 80% of the machine's physical memory).
Model make_synthetic_model(const ModelConfig& config, GgmlType type, ThreadPool& pool,
                           uint64_t seed = 0x73796e6d6f64656cULL, size_t max_bytes = 0);
Model make_synthetic_model(const std::string& name, GgmlType type, ThreadPool& pool,
                           uint64_t seed = 0x73796e6d6f64656cULL, size_t max_bytes = 0);

}  // namespace turbokv::engine
