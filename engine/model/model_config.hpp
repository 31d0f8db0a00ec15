// ModelConfig: the hyperparameters of a Llama-family decoder (llama, qwen2, qwen3, qwen3moe, and the
// variations of Gemma 2 and 3, OLMo 2, Granite and Phi-3: scalings, post-norms, GeGLU, soft-caps,
// sliding-window layers, routed experts), read from a llama2.c header or GGUF metadata. Everything
// the forward pass branches on is here.
#pragma once

#include <string>
#include <vector>

namespace turbokv::engine {

struct ModelConfig {
  std::string arch = "llama";  // kSupportedArchitectures
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
  // rope_freq_factors[i] (GGUF keeps them in the rope_freqs.weight tensor). Empty: none. With
  // LongRoPE, the set select_rope_factors chose.
  std::vector<float> rope_freq_factors;
  // Partial rotary (Phi-4-mini): RoPE turns the first rope_dims coordinates of each head and
  // passes the rest through; the frequencies' exponent is over rope_dims. 0: all of head_dim.
  int rope_dims = 0;
  // The rotated coordinates of q and k times this (GGUF rope.scaling.attn_factor; LongRoPE's
  // sqrt(1 + ln(scale) / ln(original context)); ggml_rope_ext's attn_factor). 1: none.
  float rope_attn_factor = 1.0f;
  // LongRoPE (Phi-3-128k, Phi-3.5-mini, Phi-4-mini): two sets of per-pair frequency divisors,
  // rope_factors_long for a context longer than rope_original_context, else rope_factors_short,
  // as llama.cpp chooses by its n_ctx. Empty: none.
  std::vector<float> rope_factors_long, rope_factors_short;
  int rope_original_context = 0;
  bool qkv_bias = false;         // Qwen2: biases on the q, k, v projections
  bool qk_norm = false;          // Qwen3: RMSNorm over each head of q and k before RoPE
  bool qk_norm_whole = false;    // OLMo 2: the q/k norms span the whole projection (q_dim, kv_dim)
  bool tied_embeddings = false;  // output projection shares the token embedding
  // Mixture of experts (qwen3moe): the feed-forward is n_experts SwiGLU experts of hidden_dim, a
  // router picks n_experts_used of them per row (engine/runtime/moe.hpp). 0: one dense SwiGLU.
  int n_experts = 0;
  int n_experts_used = 0;
  // Gemma 2 / 3 (as llama.cpp runs their GGUFs, whose norm weights already hold Gemma's 1 + w):
  float embedding_scale = 1.0f;   // the token embedding times this (Gemma: sqrt(dim))
  float attention_scale = 0.0f;   // the q.k multiplier; 0: 1 / sqrt(head_dim)
  float attn_softcap = 0.0f;      // > 0: attention logits soft-capped, cap * tanh(logit / cap)
  float final_softcap = 0.0f;     // > 0: output logits soft-capped the same way
  bool post_norms = false;        // RMSNorm on the attention and FFN outputs before each residual add
  bool pre_norms = true;          // false: no RMSNorm on the blocks' inputs (OLMo 2: post-norms only)
  float residual_scale = 1.0f;    // each block's output times this before its add (Granite)
  float logit_scale = 1.0f;       // the output logits divided by this (Granite)
  bool gelu_ffn = false;          // GeGLU, gelu_tanh(gate) * up, instead of SwiGLU
  // Sliding-window attention: 0 none; otherwise the layers that slide (layer_slides) attend
  // only the last sliding_window positions. swa_pattern 0: every layer slides (Mistral, Phi-3); n > 0:
  // layer l slides unless l % n == n - 1 (Gemma 2: 2, so even layers slide; Gemma 3: 6, five
  // local layers to one global), llama.cpp's set_swa_pattern.
  int sliding_window = 0;
  int swa_pattern = 0;
  // > 0: sliding-window layers rotate with this RoPE base and no frequency scaling (Gemma 3:
  // 10,000 against the global layers' 1,000,000 and their linear scaling).
  float rope_theta_local = 0.0f;
  int bos_id = 1;
  int eos_id = 2;

  int q_dim() const { return n_heads * head_dim; }
  int rotary_dims() const { return rope_dims > 0 ? rope_dims : head_dim; }
  int kv_dim() const { return n_kv_heads * head_dim; }
  // Feed-forward blocks per layer: the experts, or the one dense SwiGLU.
  int ffn_blocks() const { return n_experts > 0 ? n_experts : 1; }
  bool layer_slides(int layer) const {
    return sliding_window > 0 && (swa_pattern == 0 || layer % swa_pattern != swa_pattern - 1);
  }
  // The positions layer l attends back: sliding_window for a sliding layer, 0 (all) otherwise;
  // what the decoder masks and frees behind (a ring), and what the server's KV budget counts.
  size_t layer_window(int layer) const { return layer_slides(layer) ? static_cast<size_t>(sliding_window) : 0; }
  std::vector<size_t> layer_windows() const {
    std::vector<size_t> windows(static_cast<size_t>(n_layers));
    for (int l = 0; l < n_layers; ++l) windows[static_cast<size_t>(l)] = layer_window(l);
    return windows;
  }

  // Throws turbokv::Error naming the first field out of range or inconsistent.
  void validate() const;
  void validate_rope() const;  // the RoPE fields' part of validate()
};

// The architectures (GGUF general.architecture) the decoder runs.
inline constexpr const char* kSupportedArchitectures = "llama, qwen2, qwen3, qwen3moe, gemma2, gemma3, olmo2, granite, phi3";
bool architecture_supported(const std::string& arch);

// LongRoPE's choice for a model run with `context` positions per sequence (generate: the model's
// seq_len; eval: its --ctx; serve: its context per sequence): rope_freq_factors becomes the long
// set when context > rope_original_context, else the short one (llama.cpp: n_ctx_seq >
// n_ctx_orig_yarn). Returns the line to log, or "" for a model without LongRoPE (unchanged).
std::string select_rope_factors(ModelConfig& config, int context);
// Throws turbokv::Error, naming `who`, unless the LongRoPE set in use is select_rope_factors'
// choice for `context` (a model prepared for one context and run with another: wrong factors).
void check_rope_factors_for(const ModelConfig& config, int context, const std::string& who);

// Llama 3's rope scaling (Meta's reference apply_scaling): factors for each of head_dim / 2
// rotary pairs, computed from the scaling parameters of the model's config.json. What
// rope_freqs.weight in a Llama 3 GGUF holds.
std::vector<float> llama3_rope_freq_factors(int head_dim, float rope_theta, float factor,
                                            float low_freq_factor, float high_freq_factor,
                                            int original_context_length);

}  // namespace turbokv::engine
