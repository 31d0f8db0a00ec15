// GGUF -> Model: llama.cpp's metadata keys and tensor names for the llama, qwen2, qwen3 and
// qwen3moe architectures. llama.cpp stores Llama's q/k weights in Meta's layout (RoPE on adjacent
// pairs) and Qwen's unpermuted (RoPE on halves, NeoX style), so the rotation follows the arch.
// qwen3moe is qwen3 with a routed mixture of experts as its feed-forward (llama.cpp's names:
// {arch}.expert_count, .expert_used_count, .expert_feed_forward_length; tensors ffn_gate_inp
// [dim, E] and the 3-D ffn_gate_exps / ffn_up_exps [dim, ff, E], ffn_down_exps [ff, dim, E]).
#include <fmt/format.h>

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

}  // namespace

Model load_gguf(const std::string& path) {
  auto gguf = std::make_shared<GgufFile>(GgufFile::open(path));
  const GgufFile& g = *gguf;
  const std::string arch = g.get_string("general.architecture");
  if (arch != "llama" && arch != "qwen2" && arch != "qwen3" && arch != "qwen3moe") {
    throw Error(fmt::format("GGUF '{}': architecture '{}' is not supported (llama, qwen2, qwen3, qwen3moe)", path,
                            arch));
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
  if (g.has(p + "rope.dimension_count") && g.get_int(p + "rope.dimension_count") != c.head_dim) {
    throw Error(fmt::format("GGUF '{}': {}rope.dimension_count {} is not the head size {} (partial RoPE is not "
                            "supported)", path, p, g.get_int(p + "rope.dimension_count"), c.head_dim));
  }
  c.seq_len = g.has(p + "context_length") ? checked_int(g, p + "context_length", 1, 1 << 24) : 2048;
  c.norm_eps = static_cast<float>(g.get_float_or(p + "attention.layer_norm_rms_epsilon", 1e-5));
  c.rope_theta = static_cast<float>(g.get_float_or(p + "rope.freq_base", 10000.0));
  c.rope_neox = arch != "llama";
  c.qkv_bias = arch == "qwen2";
  c.qk_norm = arch == "qwen3" || arch == "qwen3moe";

  const auto& embedding = require_tensor(g, "token_embd.weight");
  if (embedding.shape.size() != 2) throw Error(fmt::format("GGUF '{}': token_embd.weight is not a matrix", path));
  c.vocab_size = g.has(p + "vocab_size") ? checked_int(g, p + "vocab_size", 1, 1 << 22)
                                         : static_cast<int>(std::min<int64_t>(embedding.shape[1], int64_t{1} << 23));
  c.bos_id = static_cast<int>(g.get_int_or("tokenizer.ggml.bos_token_id", 1));
  c.eos_id = static_cast<int>(g.get_int_or("tokenizer.ggml.eos_token_id", 2));

  const std::string scaling = g.get_string_or(p + "rope.scaling.type", "none");
  if (g.find_tensor("rope_freqs.weight") != nullptr) {
    c.rope_freq_factors = load_vector(g, "rope_freqs.weight", c.head_dim / 2);
  } else if (scaling == "linear") {
    const float factor = static_cast<float>(g.get_float(p + "rope.scaling.factor"));
    if (!(factor >= 1.0f && factor <= 1024.0f)) {
      throw Error(fmt::format("GGUF '{}': {}rope.scaling.factor {} outside [1, 1024]", path, p, factor));
    }
    c.rope_freq_factors.assign(static_cast<size_t>(c.head_dim / 2), factor);
  } else if (scaling != "none") {
    throw Error(fmt::format("GGUF '{}': rope scaling '{}' is not supported", path, scaling));
  }
  c.validate();

  model.token_embedding = load_matrix(g, "token_embd.weight", c.vocab_size, c.dim);
  model.final_norm = load_vector(g, "output_norm.weight", c.dim);
  c.tied_embeddings = g.find_tensor("output.weight") == nullptr;
  model.output = c.tied_embeddings ? model.token_embedding : load_matrix(g, "output.weight", c.vocab_size, c.dim);
  model.layers.resize(static_cast<size_t>(c.n_layers));
  for (int l = 0; l < c.n_layers; ++l) {
    LayerWeights& w = model.layers[static_cast<size_t>(l)];
    const std::string b = fmt::format("blk.{}.", l);
    w.attn_norm = load_vector(g, b + "attn_norm.weight", c.dim);
    w.wq = load_matrix(g, b + "attn_q.weight", c.q_dim(), c.dim);
    w.wk = load_matrix(g, b + "attn_k.weight", c.kv_dim(), c.dim);
    w.wv = load_matrix(g, b + "attn_v.weight", c.kv_dim(), c.dim);
    w.wo = load_matrix(g, b + "attn_output.weight", c.dim, c.q_dim());
    if (c.qkv_bias) {
      w.bq = load_vector(g, b + "attn_q.bias", c.q_dim());
      w.bk = load_vector(g, b + "attn_k.bias", c.kv_dim());
      w.bv = load_vector(g, b + "attn_v.bias", c.kv_dim());
    }
    if (c.qk_norm) {
      w.q_norm = load_vector(g, b + "attn_q_norm.weight", c.head_dim);
      w.k_norm = load_vector(g, b + "attn_k_norm.weight", c.head_dim);
    }
    w.ffn_norm = load_vector(g, b + "ffn_norm.weight", c.dim);
    if (c.n_experts > 0) {
      w.router = load_matrix(g, b + "ffn_gate_inp.weight", c.n_experts, c.dim);
      w.w_gate = load_experts(g, b + "ffn_gate_exps.weight", c.n_experts, c.hidden_dim, c.dim);
      w.w_up = load_experts(g, b + "ffn_up_exps.weight", c.n_experts, c.hidden_dim, c.dim);
      w.w_down = load_experts(g, b + "ffn_down_exps.weight", c.n_experts, c.dim, c.hidden_dim);
    } else {
      w.w_gate = load_matrix(g, b + "ffn_gate.weight", c.hidden_dim, c.dim);
      w.w_up = load_matrix(g, b + "ffn_up.weight", c.hidden_dim, c.dim);
      w.w_down = load_matrix(g, b + "ffn_down.weight", c.dim, c.hidden_dim);
    }
  }
  model.path = path;
  model.format = "gguf";
  model.storage = gguf;
  model.validate();
  return model;
}

}  // namespace turbokv::engine
