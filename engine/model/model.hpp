// Model: a Llama-family decoder's config and weight views.
//
// Matrices are WeightMatrix views ([out][in], row-major, any supported type) into the model
// file's memory map, which the Model keeps alive (storage); norm weights and biases are small
// and copied out as float. A Model is immutable once loaded and may be shared by threads.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "engine/model/model_config.hpp"
#include "engine/tensor/tensor_types.hpp"

namespace turbokv::engine {

struct LayerWeights {
  std::vector<float> attn_norm;  // [dim] when config.pre_norms
  WeightMatrix wq;               // [q_dim][dim]
  WeightMatrix wk;               // [kv_dim][dim]
  WeightMatrix wv;               // [kv_dim][dim]
  WeightMatrix wo;               // [dim][q_dim]
  std::vector<float> bq, bk, bv; // [q_dim], [kv_dim], [kv_dim] when config.qkv_bias
  std::vector<float> q_norm;     // [head_dim] when config.qk_norm ([q_dim] when qk_norm_whole)
  std::vector<float> k_norm;     // [head_dim] when config.qk_norm ([kv_dim] when qk_norm_whole)
  std::vector<float> attn_post_norm;  // [dim] when config.post_norms (on the attention output)
  std::vector<float> ffn_norm;   // [dim] when config.pre_norms
  std::vector<float> ffn_post_norm;   // [dim] when config.post_norms (on the FFN output)
  // The SwiGLU weights. With config.n_experts = E > 0 each holds the E experts' matrices stacked
  // (GGUF's 3-D ffn_*_exps tensors): w_gate [E * hidden_dim][dim], expert e's block its rows
  // e * hidden_dim ..; w_down [E * dim][hidden_dim] likewise (expert_block() takes one).
  WeightMatrix w_gate;           // [hidden_dim][dim]  (llama2.c w1)
  WeightMatrix w_down;           // [dim][hidden_dim]  (llama2.c w2)
  WeightMatrix w_up;             // [hidden_dim][dim]  (llama2.c w3)
  WeightMatrix router;           // [n_experts][dim] when config.n_experts > 0 (ffn_gate_inp)
};

// Expert e's matrix out of a stack of `experts` equal blocks of rows (LayerWeights::w_gate ...).
WeightMatrix expert_block(const WeightMatrix& stacked, int experts, int e);

struct Model {
  ModelConfig config;
  WeightMatrix token_embedding;   // [vocab][dim]
  std::vector<LayerWeights> layers;
  std::vector<float> final_norm;  // [dim]
  WeightMatrix output;            // [vocab][dim]; the embedding itself when tied
  std::string path;
  std::string format;             // "llama2c" | "gguf"
  std::shared_ptr<const void> storage;  // keeps the mapped file alive for the views

  // Checks every matrix's shape against the config (throws turbokv::Error naming the tensor).
  void validate() const;
  // Bytes of all weights (embedding counted once when tied).
  size_t weight_bytes() const;
  // "F32", "Q8_0", ... or "mixed" over the layer matrices.
  std::string weight_type_summary() const;
};

// llama2.c checkpoint (legacy version-0 float32 .bin): header of 7 int32 (dim, hidden_dim,
// n_layers, n_heads, n_kv_heads, vocab_size, seq_len; a negative vocab_size means a separate
// classifier follows the weights), then the tensors. Every header field and the file size are
// checked before any weight is touched.
Model load_llama2c(const std::string& path);
// GGUF v3, architectures kSupportedArchitectures (engine/model/gguf.hpp reads the container).
Model load_gguf(const std::string& path);
// By content: GGUF magic -> load_gguf, else load_llama2c.
Model load_model(const std::string& path);

}  // namespace turbokv::engine
