#include "random_gguf.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

#include "engine/model/model_config.hpp"
#include "engine/tensor/tensor_types.hpp"
#include "engine/tokenizer/bpe_tokenizer.hpp"
#include "turbokv/error.hpp"

namespace turbokv::test {

using engine::GgmlType;
using engine::GgufWriter;
using engine::byte_symbol;
using engine::llama3_rope_freq_factors;
using engine::quantize_row;
using engine::row_bytes;

bool is_gemma(const std::string& arch) { return arch == "gemma2" || arch == "gemma3"; }

namespace {

std::string spell(const std::string& bytes) {  // GPT-2 byte-level alphabet, UTF-8 encoded
  std::string out;
  for (const unsigned char b : bytes) out += byte_symbol(b);
  return out;
}

}  // namespace

void add_bpe_vocab(GgufWriter& w, const std::string& pre, bool with_bos, int vocab,
                   const std::vector<std::string>& user_tokens) {
  std::vector<std::string> tokens;
  for (int b = 0; b < 256; ++b) tokens.push_back(spell(std::string(1, static_cast<char>(b))));
  static const std::vector<std::pair<std::string, std::string>> merges = {{" ", "t"}, {"h", "e"}, {" t", "he"}, {"i", "n"}};
  std::vector<std::string> merge_lines;
  for (const auto& [l, r] : merges) {
    merge_lines.push_back(spell(l) + " " + spell(r));
    tokens.push_back(spell(l + r));
  }
  const size_t n_merged = tokens.size();
  for (const std::string& t : user_tokens) tokens.push_back(t);  // as written (llama.cpp's added tokens)
  const size_t n_normal = tokens.size();
  while (static_cast<int>(tokens.size()) < vocab - 2) tokens.push_back("<unused_" + std::to_string(tokens.size()) + ">");
  tokens.push_back("<|begin_of_text|>");
  tokens.push_back("<|end_of_text|>");
  std::vector<int32_t> types(tokens.size(), 1);
  for (size_t i = n_merged; i < n_normal; ++i) types[i] = 4;  // user-defined
  for (size_t i = n_normal; i + 2 < tokens.size(); ++i) types[i] = 5;  // unused
  types[tokens.size() - 1] = types[tokens.size() - 2] = 3;
  w.set_string("tokenizer.ggml.model", "gpt2");
  w.set_string("tokenizer.ggml.pre", pre);
  w.set_string_array("tokenizer.ggml.tokens", tokens);
  w.set_string_array("tokenizer.ggml.merges", merge_lines);
  w.set_int32_array("tokenizer.ggml.token_type", types);
  if (with_bos) w.set_uint32("tokenizer.ggml.bos_token_id", static_cast<uint32_t>(tokens.size() - 2));
  w.set_uint32("tokenizer.ggml.eos_token_id", static_cast<uint32_t>(tokens.size() - 1));
}

GgufWriter random_gguf_writer(const RandomGgufShape& s, uint32_t seed,
                              std::map<std::string, std::vector<float>>* values) {
  GgufWriter w;
  const std::string a = s.arch + ".";
  w.set_string("general.architecture", s.arch);
  w.set_uint32(a + "context_length", static_cast<uint32_t>(s.context));
  w.set_uint32(a + "embedding_length", static_cast<uint32_t>(s.dim));
  // qwen3moe's feed_forward_length: a dense width the experts do not use (Qwen3-30B-A3B: 6144,
  // its experts 768).
  w.set_uint32(a + "feed_forward_length", static_cast<uint32_t>(s.arch == "qwen3moe" ? 3 * s.hidden : s.hidden));
  w.set_uint32(a + "block_count", static_cast<uint32_t>(s.layers));
  w.set_uint32(a + "attention.head_count", static_cast<uint32_t>(s.heads));
  w.set_uint32(a + "attention.head_count_kv", static_cast<uint32_t>(s.kv_heads));
  w.set_uint32(a + "attention.key_length", static_cast<uint32_t>(s.head_dim));
  w.set_uint32(a + "attention.value_length", static_cast<uint32_t>(s.head_dim));
  w.set_uint32(a + "rope.dimension_count", static_cast<uint32_t>(s.head_dim));
  w.set_float32(a + "rope.freq_base", s.arch == "llama" ? 500000.0f : s.arch == "gemma2" ? 10000.0f : 1000000.0f);
  w.set_float32(a + "attention.layer_norm_rms_epsilon", 1e-6f);
  if (s.window > 0) w.set_uint32(a + "attention.sliding_window", static_cast<uint32_t>(s.window));
  if (s.arch == "gemma2") {  // small caps, so that they bite on random weights
    w.set_float32(a + "attn_logit_softcapping", 5.0f);
    w.set_float32(a + "final_logit_softcapping", 3.0f);
  }
  if (s.arch == "granite") {  // Granite 3's multipliers, of the sizes its configs have
    w.set_float32(a + "embedding_scale", 12.0f);
    w.set_float32(a + "residual_scale", 0.22f);
    w.set_float32(a + "logit_scale", 8.0f);
    w.set_float32(a + "attention.scale", 0.015625f);
  }
  if (s.arch == "gemma3") {  // as Gemma 3 4B: global layers' RoPE linearly scaled
    w.set_string(a + "rope.scaling.type", "linear");
    w.set_float32(a + "rope.scaling.factor", 8.0f);
  }
  if (s.arch == "qwen3moe") {  // llama.cpp's keys; each expert's FFN has `hidden` rows
    w.set_uint32(a + "expert_count", static_cast<uint32_t>(s.experts));
    w.set_uint32(a + "expert_used_count", static_cast<uint32_t>(s.experts_used));
    if (s.expert_width_key) w.set_uint32(a + "expert_feed_forward_length", static_cast<uint32_t>(s.hidden));
  }
  add_bpe_vocab(w, s.arch == "llama" ? "llama-bpe" : "qwen2", s.arch == "llama", s.vocab, s.user_tokens);
  if (!s.chat_template.empty()) w.set_string("tokenizer.chat_template", s.chat_template);

  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  // `experts` > 1: a 3-D tensor of that many matrices of rows x cols (llama.cpp's *_exps);
  // `f32`: a matrix kept in F32 whatever s.type (the MoE router, as llama.cpp keeps it).
  auto tensor = [&](const std::string& tname, int rows_each, int cols, float mean, float scale, bool matrix,
                    int experts = 1, bool f32 = false) {
    const int rows = rows_each * experts;
    std::vector<float> v(static_cast<size_t>(rows) * cols);
    for (auto& x : v) x = mean + scale * normal(rng);
    const GgmlType type = matrix && !f32 ? s.type : GgmlType::F32;
    std::vector<uint8_t> bytes(row_bytes(type, cols) * static_cast<size_t>(rows));
    for (int r = 0; r < rows; ++r) {
      quantize_row(type, v.data() + static_cast<size_t>(r) * cols, cols, bytes.data() + row_bytes(type, cols) * r);
    }
    std::vector<int64_t> shape = matrix ? std::vector<int64_t>{cols, rows} : std::vector<int64_t>{cols};
    if (experts > 1) shape = {cols, rows_each, experts};
    if (std::find(s.left_out.begin(), s.left_out.end(), tname) != s.left_out.end()) return;
    w.add_tensor(tname, type, shape, std::move(bytes));
    if (s.keep_values && values != nullptr) (*values)[tname] = std::move(v);
  };
  const int q_dim = s.heads * s.head_dim, kv_dim = s.kv_heads * s.head_dim;
  const float ws = 1.0f / std::sqrt(static_cast<float>(s.dim));
  tensor("token_embd.weight", s.vocab, s.dim, 0.0f, 1.0f, true);
  tensor("output_norm.weight", 1, s.dim, 1.0f, 0.1f, false);
  if (!s.tied) tensor("output.weight", s.vocab, s.dim, 0.0f, ws, true);
  if (s.rope_freqs) {
    const auto factors = llama3_rope_freq_factors(s.head_dim, 500000.0f, 32.0f, 1.0f, 4.0f, 64);
    std::vector<uint8_t> bytes(factors.size() * 4);
    std::memcpy(bytes.data(), factors.data(), bytes.size());
    w.add_tensor("rope_freqs.weight", GgmlType::F32, {static_cast<int64_t>(factors.size())}, std::move(bytes));
    if (values != nullptr) (*values)["rope_freqs.weight"] = factors;
  }
  for (int l = 0; l < s.layers; ++l) {
    const std::string b = "blk." + std::to_string(l) + ".";
    if (s.arch != "olmo2") tensor(b + "attn_norm.weight", 1, s.dim, 1.0f, 0.1f, false);
    if (s.arch == "phi3") {  // fused, as llama.cpp's converter writes Phi-3
      tensor(b + "attn_qkv.weight", q_dim + 2 * kv_dim, s.dim, 0.0f, ws, true);
    } else {
      tensor(b + "attn_q.weight", q_dim, s.dim, 0.0f, ws, true);
      tensor(b + "attn_k.weight", kv_dim, s.dim, 0.0f, ws, true);
      tensor(b + "attn_v.weight", kv_dim, s.dim, 0.0f, ws, true);
    }
    tensor(b + "attn_output.weight", s.dim, q_dim, 0.0f, 1.0f / std::sqrt(static_cast<float>(q_dim)), true);
    if (s.arch == "qwen2") {
      tensor(b + "attn_q.bias", 1, q_dim, 0.0f, 0.2f, false);
      tensor(b + "attn_k.bias", 1, kv_dim, 0.0f, 0.2f, false);
      tensor(b + "attn_v.bias", 1, kv_dim, 0.0f, 0.2f, false);
    }
    if (s.arch == "qwen3" || s.arch == "qwen3moe" || s.arch == "gemma3") {
      tensor(b + "attn_q_norm.weight", 1, s.head_dim, 1.0f, 0.1f, false);
      tensor(b + "attn_k_norm.weight", 1, s.head_dim, 1.0f, 0.1f, false);
    }
    if (s.arch == "olmo2") {  // over the whole projections
      tensor(b + "attn_q_norm.weight", 1, q_dim, 1.0f, 0.1f, false);
      tensor(b + "attn_k_norm.weight", 1, kv_dim, 1.0f, 0.1f, false);
    }
    // Gemma's norms as llama.cpp's converter writes them: 1 + the checkpoint's weight.
    const bool post_norms = is_gemma(s.arch) || s.arch == "olmo2";
    if (post_norms) tensor(b + "post_attention_norm.weight", 1, s.dim, 1.0f, 0.1f, false);
    if (s.arch != "olmo2") tensor(b + "ffn_norm.weight", 1, s.dim, 1.0f, 0.1f, false);
    if (post_norms) tensor(b + "post_ffw_norm.weight", 1, s.dim, 1.0f, 0.1f, false);
    if (s.arch == "phi3") {  // gate rows, then up rows
      tensor(b + "ffn_up.weight", 2 * s.hidden, s.dim, 0.0f, ws, true);
    } else if (s.arch == "qwen3moe") {  // a wide router keeps the top experts apart
      tensor(b + "ffn_gate_inp.weight", s.experts, s.dim, 0.0f, 4.0f * ws, true, 1, true);
      tensor(b + "ffn_gate_exps.weight", s.hidden, s.dim, 0.0f, ws, true, s.experts);
      tensor(b + "ffn_up_exps.weight", s.hidden, s.dim, 0.0f, ws, true, s.experts);
      tensor(b + "ffn_down_exps.weight", s.dim, s.hidden, 0.0f, 1.0f / std::sqrt(static_cast<float>(s.hidden)), true,
             s.experts);
      continue;
    } else {
      tensor(b + "ffn_gate.weight", s.hidden, s.dim, 0.0f, ws, true);
      tensor(b + "ffn_up.weight", s.hidden, s.dim, 0.0f, ws, true);
    }
    tensor(b + "ffn_down.weight", s.dim, s.hidden, 0.0f, 1.0f / std::sqrt(static_cast<float>(s.hidden)), true);
  }
  return w;
}

RandomGguf write_random_gguf(const RandomGgufShape& s, const std::string& path, uint32_t seed) {
  RandomGguf out;
  random_gguf_writer(s, seed, &out.values).write(path);
  out.path = path;
  return out;
}

RandomGgufShape served_shape(const std::string& arch) {
  // As the engine's tests run them (test_generate_gguf.cpp), with a context that holds a real
  // chat template's prompt spelled in bytes.
  RandomGgufShape s{arch, 64, 160, 2, 4, 2, 16, false, false, GgmlType::F32};
  s.context = 2048;
  if (arch == "llama") s.rope_freqs = true;
  if (arch == "qwen3" || arch == "qwen3moe" || arch == "granite") s.tied = true;
  if (arch == "qwen3moe") s.hidden = 32;
  if (arch == "gemma2") {
    s.head_dim = 32;
    s.tied = true;
    s.window = 4;
  }
  if (arch == "gemma3") {
    s = RandomGgufShape{"gemma3", 128, 256, 6, 2, 1, 256, true, false, GgmlType::F32};
    s.context = 2048;
    s.window = 4;
  }
  if (arch == "phi3") s.window = 5;
  static const char* known[] = {"llama", "qwen2", "qwen3", "qwen3moe", "gemma2", "gemma3", "olmo2", "granite", "phi3"};
  for (const char* k : known) {
    if (arch == k) return s;
  }
  throw Error("random_gguf: unknown architecture '" + arch + "'");
}

}  // namespace turbokv::test
