// ModelConfig: the hyperparameters of a Llama-family decoder (llama, qwen2, qwen3, qwen3moe), read
// from a llama2.c header or GGUF metadata. Everything the forward pass branches on is here.
#pragma once

#include <string>
#include <vector>

namespace turbokv::engine {

struct ModelConfig {
  std::string arch = "llama";  // "llama" | "qwen2" | "qwen3" | "qwen3moe"
  int dim = 0;                 // residual width
  int hidden_dim = 0;          // SwiGLU inner width (of each expert, in a mixture-of-experts model)
  int n_layers = 0;
  int n_heads = 0;             // query heads
  int n_kv_heads = 0;          // key/value heads (grouped-query attention when < n_heads)
  int head_dim = 0;            // need not be dim / n_heads (Qwen3)
  int vocab_size = 0;
  int seq_len = 0;             // trained context length
  float norm_eps = 1e-5f;
  float rope_theta = 10000.0f;
  // false: rotate adjacent pairs (x[2i], x[2i+1]) as llama2.c and Meta's Llama do;
  // true: rotate the two halves (x[i], x[i + head_dim/2]) as GPT-NeoX and Qwen do.
  bool rope_neox = false;
  // Llama 3 frequency scaling: per rotary pair i, its frequency is divided by
  // rope_freq_factors[i] (GGUF keeps them in the rope_freqs.weight tensor). Empty: none.
  std::vector<float> rope_freq_factors;
  bool qkv_bias = false;         // Qwen2: biases on the q, k, v projections
  bool qk_norm = false;          // Qwen3: RMSNorm over each head of q and k before RoPE
  bool tied_embeddings = false;  // output projection shares the token embedding
  // Mixture of experts (qwen3moe): the feed-forward is n_experts SwiGLU experts of hidden_dim, a
  // router picks n_experts_used of them per row (engine/runtime/moe.hpp). 0: one dense SwiGLU.
  int n_experts = 0;
  int n_experts_used = 0;
  int bos_id = 1;
  int eos_id = 2;

  int q_dim() const { return n_heads * head_dim; }
  int kv_dim() const { return n_kv_heads * head_dim; }
  // Feed-forward blocks per layer: the experts, or the one dense SwiGLU.
  int ffn_blocks() const { return n_experts > 0 ? n_experts : 1; }

  // Throws turbokv::Error naming the first field out of range or inconsistent.
  void validate() const;
};

// Llama 3's rope scaling (Meta's reference apply_scaling): factors for each of head_dim / 2
// rotary pairs, computed from the scaling parameters of the model's config.json. What
// rope_freqs.weight in a Llama 3 GGUF holds.
std::vector<float> llama3_rope_freq_factors(int head_dim, float rope_theta, float factor,
                                            float low_freq_factor, float high_freq_factor,
                                            int original_context_length);

}  // namespace turbokv::engine
