// GGUF -> Model: llama.cpp's metadata keys and tensor names for the llama, qwen2, qwen3, qwen3moe,
// gemma2, gemma3, olmo2, granite and phi3 architectures (phi3: fused q/k/v and gate/up tensors, read as
// row blocks of one matrix; LongRoPE factors and partial rotary). llama.cpp stores Llama's and Granite's q/k weights in
// Meta's layout (RoPE on adjacent pairs) and the others' unpermuted (RoPE on halves, NeoX
// style), so the rotation follows the arch (llama.cpp's llama_model_rope_type). llama.cpp's converter already adds Gemma's 1 to its RMSNorm
// weights, so they are read as they are, as llama.cpp's runtime does.
// qwen3moe is qwen3 with a routed mixture of experts as its feed-forward (llama.cpp's names:
// {arch}.expert_count, .expert_used_count, .expert_feed_forward_length; tensors ffn_gate_inp
// [dim, E] and the 3-D ffn_gate_exps / ffn_up_exps [dim, ff, E], ffn_down_exps [ff, dim, E]).
#include <fmt/format.h>

#include <cmath>

#include "engine/model/gguf.hpp"
#include "engine/model/model.hpp"
#include "turbokv/error.hpp"

namespace turbokv::engine {

namespace {

int checked_int(const GgufFile& gguf, const std::string& key, int64_t lo, int64_t hi) {
  const int64_t v = gguf.get_int(key);
  if (v < lo || v > hi) {
    throw Error(fmt::format("GGUF '{}': {} = {} outside [{}, {}]", gguf.path(), key, v, lo, hi));
  }
  return static_cast<int>(v);
}

const GgufFile::TensorInfo& require_tensor(const GgufFile& gguf, const std::string& name) {
  const auto* info = gguf.find_tensor(name);
  if (info == nullptr) throw Error(fmt::format("GGUF '{}': tensor {} is missing", gguf.path(), name));
  return *info;
}

// A tensor of exactly `shape` (GGUF order) as a [product of shape[1..]][shape[0]] matrix.
WeightMatrix load_shaped(const GgufFile& gguf, const std::string& name, const std::vector<int64_t>& shape) {
  const auto& info = require_tensor(gguf, name);
  if (info.shape != shape) {
    auto join = [](const std::vector<int64_t>& dims) {
      std::string out;
      for (const auto d : dims) out += (out.empty() ? "" : ", ") + std::to_string(d);
      return out;
    };
    throw Error(fmt::format("GGUF '{}': tensor {} has shape [{}], expected [{}]", gguf.path(), name, join(info.shape),
                            join(shape)));
  }
  const WeightMatrix m = gguf.matrix(name);
  try {
    check_scales_finite(m);
  } catch (const Error& e) {
    throw Error(fmt::format("GGUF '{}': tensor {}: {}", gguf.path(), name, e.what()));
  }
  return m;
}

// A [rows][cols] weight; the GGUF shape must be exactly [cols, rows].
WeightMatrix load_matrix(const GgufFile& gguf, const std::string& name, int64_t rows, int64_t cols) {
  return load_shaped(gguf, name, {cols, rows});
}

// The 3-D stack of `experts` [rows][cols] matrices (GGUF shape exactly [cols, rows, experts]) as
// one [experts * rows][cols] matrix (model.hpp's stacked layout).
WeightMatrix load_experts(const GgufFile& gguf, const std::string& name, int64_t experts, int64_t rows, int64_t cols) {
  return load_shaped(gguf, name, {cols, rows, experts});
}

// A 1-D tensor of n values, dequantized to float.
std::vector<float> load_vector(const GgufFile& gguf, const std::string& name, int64_t n) {
  const auto& info = require_tensor(gguf, name);
  if (info.shape.size() != 1 || info.shape[0] != n) {
    throw Error(fmt::format("GGUF '{}': tensor {} should be a vector of {} values", gguf.path(), name, n));
  }
  std::vector<float> out(static_cast<size_t>(n));
  dequantize_row(gguf.matrix(name), 0, out.data());
  return out;
}

// The expert counts and each expert's inner width. As llama.cpp: without
// expert_feed_forward_length an expert is feed_forward_length / expert_used_count wide.
void read_experts(const GgufFile& g, const std::string& p, ModelConfig& c) {
  c.n_experts = checked_int(g, p + "expert_count", 1, 1024);
  c.n_experts_used = checked_int(g, p + "expert_used_count", 1, c.n_experts);
  if (g.has(p + "expert_feed_forward_length")) {
    c.hidden_dim = checked_int(g, p + "expert_feed_forward_length", 1, 1 << 18);
  } else {
    const int ff = checked_int(g, p + "feed_forward_length", 1, 1 << 18);
    if (ff % c.n_experts_used != 0) {
      throw Error(fmt::format("GGUF '{}': no {}expert_feed_forward_length and feed_forward_length {} is not a "
                              "multiple of expert_used_count {}", g.path(), p, ff, c.n_experts_used));
    }
    c.hidden_dim = ff / c.n_experts_used;
  }
}

// Gemma 2 / 3 hyperparameters, as llama.cpp's llm_load_hparams and its graphs set them.
void read_gemma(const GgufFile& g, const std::string& p, ModelConfig& c) {
  const bool gemma2 = c.arch == "gemma2";
  c.embedding_scale = std::sqrt(static_cast<float>(c.dim));
  c.post_norms = true;
  c.gelu_ffn = true;
  c.qk_norm = !gemma2;
  // llama.cpp scales queries by 1/sqrt(query_pre_attn_scalar): dim / n_heads for the 27B
  // models (46 layers for Gemma 2, 62 for Gemma 3), head_dim for the others; the GGUF has no key.
  const bool big = c.n_layers == (gemma2 ? 46 : 62);
  c.attention_scale = 1.0f / std::sqrt(static_cast<float>(big ? c.dim / c.n_heads : c.head_dim));
  const std::string window = p + "attention.sliding_window";
  if (gemma2) {
    c.attn_softcap = static_cast<float>(g.get_float_or(p + "attn_logit_softcapping", 50.0));
    c.final_softcap = static_cast<float>(g.get_float_or(p + "final_logit_softcapping", 30.0));
    c.sliding_window = g.has(window) ? checked_int(g, window, 1, 1 << 24) : 4096;
    c.swa_pattern = 2;
  } else {
    c.sliding_window = checked_int(g, window, 1, 1 << 24);
    c.swa_pattern = 6;
    c.rope_theta_local = 10000.0f;
  }
}

// A LongRoPE factor set: rotary_dims / 2 divisors, each finite and > 0, named in the error.
std::vector<float> load_rope_factors(const GgufFile& g, const std::string& name, const ModelConfig& c) {
  std::vector<float> factors = load_vector(g, name, c.rotary_dims() / 2);
  for (size_t i = 0; i < factors.size(); ++i) {
    if (!(factors[i] > 0.0f && std::isfinite(factors[i]))) {
      throw Error(fmt::format("GGUF '{}': tensor {}[{}] = {} (rope factors must be finite and > 0)", g.path(), name, i,
                              factors[i]));
    }
  }
  return factors;
}

// LongRoPE, as llama.cpp's converter writes it (Phi-3-128k, Phi-3.5-mini, Phi-4-mini): both
// factor sets as tensors, the original context as rope.scaling.original_context_length (absent:
// the trained context, as llama.cpp), the magnitude as rope.scaling.attn_factor (read for every
// architecture by load_gguf). The set in use is chosen by the context: select_rope_factors.
void read_longrope(const GgufFile& g, const std::string& p, ModelConfig& c) {
  const bool has_long = g.find_tensor("rope_factors_long.weight") != nullptr;
  const bool has_short = g.find_tensor("rope_factors_short.weight") != nullptr;
  if (!has_long && !has_short) return;
  if (has_long != has_short) {
    throw Error(fmt::format("GGUF '{}': LongRoPE needs both rope_factors_long.weight and rope_factors_short.weight",
                            g.path()));
  }
  c.rope_factors_long = load_rope_factors(g, "rope_factors_long.weight", c);
  c.rope_factors_short = load_rope_factors(g, "rope_factors_short.weight", c);
  const std::string original = p + "rope.scaling.original_context_length";
  c.rope_original_context = g.has(original) ? checked_int(g, original, 1, 1 << 24) : c.seq_len;
}

// Phi-3's sliding window: the file's key (0: none, as Phi-4 writes it), else llama.cpp's defaults
// for the files written before the key existed (llama_model::load_hparams).
void read_phi3(const GgufFile& g, const std::string& p, ModelConfig& c) {
  if (g.has(p + "attention.sliding_window")) {
    c.sliding_window = checked_int(g, p + "attention.sliding_window", 0, 1 << 24);
  } else if ((c.n_layers == 32 || c.n_layers == 40) && c.seq_len == 4096) {
    c.sliding_window = 2047;  // Phi-3-mini-4k, Phi-3-medium-4k
  } else if (c.n_layers == 32 && c.n_kv_heads == 32 && c.seq_len == 131072) {
    c.sliding_window = 262144;  // Phi-3-mini-128k
  } else if (c.n_layers == 40 && c.seq_len == 131072) {
    c.sliding_window = 131072;  // Phi-3-medium-128k
  } else {
    throw Error(fmt::format("GGUF '{}': phi3 file without {}attention.sliding_window", g.path(), p));
  }
  read_longrope(g, p, c);
}

// rope.dimension_count: the head size, or (phi3: Phi-4-mini's partial rotary) an even count below it.
void read_rope_dims(const GgufFile& g, const std::string& p, ModelConfig& c) {
  const std::string key = p + "rope.dimension_count";
  if (!g.has(key) || g.get_int(key) == c.head_dim) return;
  if (c.arch != "phi3") {
    throw Error(fmt::format("GGUF '{}': {} {} is not the head size {} (partial RoPE is supported for phi3 only)",
                            g.path(), key, g.get_int(key), c.head_dim));
  }
  c.rope_dims = checked_int(g, key, 2, c.head_dim);
  if (c.rope_dims % 2 != 0) throw Error(fmt::format("GGUF '{}': {} {} is odd", g.path(), key, c.rope_dims));
}

// Rows [first, first + rows) of m: a view into the same memory (llama.cpp's fused tensors).
WeightMatrix row_block(const WeightMatrix& m, int64_t first, int64_t rows) {
  return {m.type, rows, m.cols, static_cast<const uint8_t*>(m.data) + row_bytes(m.type, m.cols) * static_cast<size_t>(first)};
}

// Granite's four multipliers (all required, as llama.cpp reads them).
void read_granite(const GgufFile& g, const std::string& p, ModelConfig& c) {
  c.embedding_scale = static_cast<float>(g.get_float(p + "embedding_scale"));
  c.residual_scale = static_cast<float>(g.get_float(p + "residual_scale"));
  c.logit_scale = static_cast<float>(g.get_float(p + "logit_scale"));
  c.attention_scale = static_cast<float>(g.get_float(p + "attention.scale"));
}

// Layer l's tensors (blk.l.*) for the architecture c.arch.
LayerWeights load_layer(const GgufFile& g, const ModelConfig& c, int l) {
  LayerWeights w;
  const std::string& arch = c.arch;
  const std::string b = fmt::format("blk.{}.", l);
  if (c.pre_norms) w.attn_norm = load_vector(g, b + "attn_norm.weight", c.dim);
  if (arch == "phi3") {  // q, k, v rows of one fused matrix
    const WeightMatrix qkv = load_matrix(g, b + "attn_qkv.weight", c.q_dim() + 2 * c.kv_dim(), c.dim);
    w.wq = row_block(qkv, 0, c.q_dim());
    w.wk = row_block(qkv, c.q_dim(), c.kv_dim());
    w.wv = row_block(qkv, c.q_dim() + c.kv_dim(), c.kv_dim());
  } else {
    w.wq = load_matrix(g, b + "attn_q.weight", c.q_dim(), c.dim);
    w.wk = load_matrix(g, b + "attn_k.weight", c.kv_dim(), c.dim);
    w.wv = load_matrix(g, b + "attn_v.weight", c.kv_dim(), c.dim);
  }
  w.wo = load_matrix(g, b + "attn_output.weight", c.dim, c.q_dim());
  if (c.qkv_bias) {
    w.bq = load_vector(g, b + "attn_q.bias", c.q_dim());
    w.bk = load_vector(g, b + "attn_k.bias", c.kv_dim());
    w.bv = load_vector(g, b + "attn_v.bias", c.kv_dim());
  }
  if (c.qk_norm) {
    w.q_norm = load_vector(g, b + "attn_q_norm.weight", c.qk_norm_whole ? c.q_dim() : c.head_dim);
    w.k_norm = load_vector(g, b + "attn_k_norm.weight", c.qk_norm_whole ? c.kv_dim() : c.head_dim);
  }
  if (c.pre_norms) w.ffn_norm = load_vector(g, b + "ffn_norm.weight", c.dim);
  if (c.post_norms) {
    w.attn_post_norm = load_vector(g, b + "post_attention_norm.weight", c.dim);
    w.ffn_post_norm = load_vector(g, b + "post_ffw_norm.weight", c.dim);
  }
  if (c.n_experts > 0) {
    w.router = load_matrix(g, b + "ffn_gate_inp.weight", c.n_experts, c.dim);
    w.w_gate = load_experts(g, b + "ffn_gate_exps.weight", c.n_experts, c.hidden_dim, c.dim);
    w.w_up = load_experts(g, b + "ffn_up_exps.weight", c.n_experts, c.hidden_dim, c.dim);
    w.w_down = load_experts(g, b + "ffn_down_exps.weight", c.n_experts, c.dim, c.hidden_dim);
    return w;
  }
  if (arch == "phi3") {  // gate rows then up rows of one fused matrix (llama.cpp's SWIGLU split)
    const WeightMatrix gate_up = load_matrix(g, b + "ffn_up.weight", 2 * static_cast<int64_t>(c.hidden_dim), c.dim);
    w.w_gate = row_block(gate_up, 0, c.hidden_dim);
    w.w_up = row_block(gate_up, c.hidden_dim, c.hidden_dim);
  } else {
    w.w_gate = load_matrix(g, b + "ffn_gate.weight", c.hidden_dim, c.dim);
    w.w_up = load_matrix(g, b + "ffn_up.weight", c.hidden_dim, c.dim);
  }
  w.w_down = load_matrix(g, b + "ffn_down.weight", c.dim, c.hidden_dim);
  return w;
}

}  // namespace

Model load_gguf(const std::string& path) {
  auto gguf = std::make_shared<GgufFile>(GgufFile::open(path));
  const GgufFile& g = *gguf;
  const std::string arch = g.get_string("general.architecture");
  if (!architecture_supported(arch)) {
    throw Error(fmt::format("GGUF '{}': architecture '{}' is not supported ({})", path, arch, kSupportedArchitectures));
  }
  const std::string p = arch + ".";
  Model model;
  ModelConfig& c = model.config;
  c.arch = arch;
  c.dim = checked_int(g, p + "embedding_length", 1, 1 << 16);
  if (arch == "qwen3moe") {
    read_experts(g, p, c);
  } else {
    c.hidden_dim = checked_int(g, p + "feed_forward_length", 1, 1 << 18);
  }
  c.n_layers = checked_int(g, p + "block_count", 1, 1024);
  c.n_heads = checked_int(g, p + "attention.head_count", 1, 1024);
  c.n_kv_heads = g.has(p + "attention.head_count_kv") ? checked_int(g, p + "attention.head_count_kv", 1, c.n_heads)
                                                       : c.n_heads;
  if (g.has(p + "attention.key_length")) {
    c.head_dim = checked_int(g, p + "attention.key_length", 2, 8192);
  } else {
    if (c.dim % c.n_heads != 0) {
      throw Error(fmt::format("GGUF '{}': no {}attention.key_length and embedding_length {} is not a multiple of "
                              "head_count {}", path, p, c.dim, c.n_heads));
    }
    c.head_dim = c.dim / c.n_heads;
  }
  if (g.has(p + "attention.value_length") && g.get_int(p + "attention.value_length") != c.head_dim) {
    throw Error(fmt::format("GGUF '{}': {}attention.value_length differs from key_length {} (unsupported)", path, p,
                            c.head_dim));
  }
  read_rope_dims(g, p, c);
  c.seq_len = g.has(p + "context_length") ? checked_int(g, p + "context_length", 1, 1 << 24) : 2048;
  c.norm_eps = static_cast<float>(g.get_float_or(p + "attention.layer_norm_rms_epsilon", 1e-5));
  c.rope_theta = static_cast<float>(g.get_float_or(p + "rope.freq_base", 10000.0));
  c.rope_attn_factor = static_cast<float>(g.get_float_or(p + "rope.scaling.attn_factor", 1.0));
  c.rope_neox = arch != "llama" && arch != "granite";
  c.qkv_bias = arch == "qwen2";
  c.qk_norm = arch == "qwen3" || arch == "qwen3moe";
  if (arch == "gemma2" || arch == "gemma3") read_gemma(g, p, c);
  if (arch == "granite") read_granite(g, p, c);
  if (arch == "phi3") read_phi3(g, p, c);
  if (arch == "olmo2") {  // post-norms instead of pre-norms; q/k norms over the whole projections
    c.pre_norms = false;
    c.post_norms = true;
    c.qk_norm = true;
    c.qk_norm_whole = true;
  }
  // Mistral-style llama files: every layer attends only its window.
  if (arch == "llama" && g.has(p + "attention.sliding_window")) {
    c.sliding_window = checked_int(g, p + "attention.sliding_window", 1, 1 << 24);
  }

  const auto& embedding = require_tensor(g, "token_embd.weight");
  if (embedding.shape.size() != 2) throw Error(fmt::format("GGUF '{}': token_embd.weight is not a matrix", path));
  c.vocab_size = g.has(p + "vocab_size") ? checked_int(g, p + "vocab_size", 1, 1 << 22)
                                         : static_cast<int>(std::min<int64_t>(embedding.shape[1], int64_t{1} << 23));
  c.bos_id = static_cast<int>(g.get_int_or("tokenizer.ggml.bos_token_id", 1));
  c.eos_id = static_cast<int>(g.get_int_or("tokenizer.ggml.eos_token_id", 2));

  const std::string scaling = g.get_string_or(p + "rope.scaling.type", "none");
  if (g.find_tensor("rope_freqs.weight") != nullptr) {
    c.rope_freq_factors = load_vector(g, "rope_freqs.weight", c.rotary_dims() / 2);
  } else if (scaling == "linear") {
    const float factor = static_cast<float>(g.get_float(p + "rope.scaling.factor"));
    if (!(factor >= 1.0f && factor <= 1024.0f)) {
      throw Error(fmt::format("GGUF '{}': {}rope.scaling.factor {} outside [1, 1024]", path, p, factor));
    }
    c.rope_freq_factors.assign(static_cast<size_t>(c.rotary_dims() / 2), factor);
  } else if (scaling != "none") {
    throw Error(fmt::format("GGUF '{}': rope scaling '{}' is not supported", path, scaling));
  }
  select_rope_factors(c, c.seq_len);  // LongRoPE: the trained context's set until a front end runs another
  c.validate();

  model.token_embedding = load_matrix(g, "token_embd.weight", c.vocab_size, c.dim);
  model.final_norm = load_vector(g, "output_norm.weight", c.dim);
  c.tied_embeddings = g.find_tensor("output.weight") == nullptr;
  model.output = c.tied_embeddings ? model.token_embedding : load_matrix(g, "output.weight", c.vocab_size, c.dim);
  model.layers.resize(static_cast<size_t>(c.n_layers));
  for (int l = 0; l < c.n_layers; ++l) model.layers[static_cast<size_t>(l)] = load_layer(g, c, l);
  model.path = path;
  model.format = "gguf";
  model.storage = gguf;
  model.validate();
  return model;
}

}  // namespace turbokv::engine
