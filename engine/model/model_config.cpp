#include "engine/model/model_config.hpp"

#include <fmt/format.h>

#include <cmath>

#include "turbokv/error.hpp"

namespace turbokv::engine {

namespace {

void check_range(const char* field, long long value, long long lo, long long hi) {
  if (value < lo || value > hi) {
    throw Error(fmt::format("model config: {} = {} outside [{}, {}]", field, value, lo, hi));
  }
}

}  // namespace

bool architecture_supported(const std::string& arch) {
  return arch == "llama" || arch == "qwen2" || arch == "qwen3" || arch == "qwen3moe" || arch == "gemma2" || arch == "gemma3" ||
         arch == "olmo2" || arch == "granite" || arch == "phi3";
}

void ModelConfig::validate() const {
  if (!architecture_supported(arch)) {
    throw Error(fmt::format("model config: unsupported architecture '{}' ({})", arch, kSupportedArchitectures));
  }
  check_range("dim", dim, 1, 1 << 16);
  check_range("hidden_dim", hidden_dim, 1, 1 << 18);
  check_range("n_layers", n_layers, 1, 1024);
  check_range("n_heads", n_heads, 1, 1024);
  check_range("n_kv_heads", n_kv_heads, 1, n_heads);
  if (n_heads % n_kv_heads != 0) {
    throw Error(fmt::format("model config: n_heads {} is not a multiple of n_kv_heads {}", n_heads, n_kv_heads));
  }
  check_range("head_dim", head_dim, 2, 8192);
  if (head_dim % 2 != 0) throw Error(fmt::format("model config: head_dim {} is odd (RoPE rotates pairs)", head_dim));
  check_range("vocab_size", vocab_size, 1, 1 << 22);
  check_range("n_experts", n_experts, 0, 1024);
  if (arch == "qwen3moe" && n_experts == 0) throw Error("model config: qwen3moe needs n_experts > 0");
  if (arch != "qwen3moe" && n_experts > 0) {
    throw Error(fmt::format("model config: architecture '{}' has no experts ({} given)", arch, n_experts));
  }
  if (n_experts > 0) {
    check_range("n_experts_used", n_experts_used, 1, n_experts);
  } else if (n_experts_used != 0) {
    throw Error(fmt::format("model config: n_experts_used {} without experts", n_experts_used));
  }
  check_range("seq_len", seq_len, 1, 1 << 24);
  check_range("bos_id", bos_id, 0, vocab_size - 1);
  check_range("eos_id", eos_id, -1, vocab_size - 1);
  if (!(norm_eps > 0.0f && norm_eps < 1.0f)) throw Error(fmt::format("model config: norm_eps {} outside (0, 1)", norm_eps));
  if (!(rope_theta > 1.0f && std::isfinite(rope_theta))) {
    throw Error(fmt::format("model config: rope_theta {} must be finite and > 1", rope_theta));
  }
  check_range("sliding_window", sliding_window, 0, 1 << 24);
  check_range("swa_pattern", swa_pattern, 0, 1024);
  const auto check_factor = [](const char* field, float v, bool zero_ok) {
    if (!(std::isfinite(v) && (v > 0.0f || (zero_ok && v == 0.0f)))) {
      throw Error(fmt::format("model config: {} = {} must be finite and {}", field, v, zero_ok ? ">= 0" : "> 0"));
    }
  };
  check_factor("embedding_scale", embedding_scale, false);
  check_factor("attention_scale", attention_scale, true);
  check_factor("attn_softcap", attn_softcap, true);
  check_factor("final_softcap", final_softcap, true);
  check_factor("rope_theta_local", rope_theta_local, true);
  check_factor("residual_scale", residual_scale, false);
  check_factor("logit_scale", logit_scale, false);
  validate_rope();
}

void ModelConfig::validate_rope() const {
  check_range("rope_dims", rope_dims, 0, head_dim);
  if (rope_dims % 2 != 0) throw Error(fmt::format("model config: rope_dims {} is odd (RoPE rotates pairs)", rope_dims));
  if (!(rope_attn_factor > 0.0f && std::isfinite(rope_attn_factor))) {
    throw Error(fmt::format("model config: rope_attn_factor {} must be finite and > 0", rope_attn_factor));
  }
  const auto check_factors = [&](const char* what, const std::vector<float>& factors) {
    if (factors.empty()) return;
    if (static_cast<int>(factors.size()) != rotary_dims() / 2) {
      throw Error(fmt::format("model config: {} {} for {} rotary dimensions (need {})", factors.size(), what,
                              rotary_dims(), rotary_dims() / 2));
    }
    for (const float f : factors) {
      if (!(f > 0.0f && std::isfinite(f))) throw Error(fmt::format("model config: {}: {} is not finite and > 0", what, f));
    }
  };
  check_factors("rope frequency factors", rope_freq_factors);
  check_factors("LongRoPE long factors", rope_factors_long);
  check_factors("LongRoPE short factors", rope_factors_short);
  if (rope_factors_long.empty() != rope_factors_short.empty()) {
    throw Error("model config: LongRoPE needs both the long and the short factors");
  }
  if (!rope_factors_long.empty()) check_range("rope_original_context", rope_original_context, 1, 1 << 24);
}

std::string select_rope_factors(ModelConfig& config, int context) {
  if (config.rope_factors_long.empty()) return "";
  const bool long_set = context > config.rope_original_context;
  config.rope_freq_factors = long_set ? config.rope_factors_long : config.rope_factors_short;
  return fmt::format("LongRoPE: context {} {} the original {}: {} factors, attention factor {:.4f}", context,
                     long_set ? ">" : "<=", config.rope_original_context, long_set ? "long" : "short",
                     config.rope_attn_factor);
}

void check_rope_factors_for(const ModelConfig& config, int context, const std::string& who) {
  if (config.rope_factors_long.empty()) return;
  const bool long_set = context > config.rope_original_context;
  if (config.rope_freq_factors != (long_set ? config.rope_factors_long : config.rope_factors_short)) {
    throw Error(fmt::format("{}: context {} takes the LongRoPE {} factors, but the model holds the other set "
                            "(call select_rope_factors for this context)", who, context, long_set ? "long" : "short"));
  }
}

std::vector<float> llama3_rope_freq_factors(int head_dim, float rope_theta, float factor,
                                            float low_freq_factor, float high_freq_factor,
                                            int original_context_length) {
  if (head_dim < 2 || head_dim % 2 != 0 || !(factor >= 1.0f) || !(low_freq_factor > 0.0f) ||
      !(high_freq_factor > low_freq_factor) || original_context_length <= 0) {
    throw Error("llama3_rope_freq_factors: invalid scaling parameters");
  }
  const double pi = 3.14159265358979323846;
  const double low_freq_wavelen = original_context_length / low_freq_factor;
  const double high_freq_wavelen = original_context_length / high_freq_factor;
  std::vector<float> factors(static_cast<size_t>(head_dim / 2));
  for (int i = 0; i < head_dim / 2; ++i) {
    const double freq = std::pow(static_cast<double>(rope_theta), -2.0 * i / head_dim);
    const double wavelen = 2.0 * pi / freq;
    double scaled = freq;
    if (wavelen > low_freq_wavelen) {
      scaled = freq / factor;
    } else if (wavelen >= high_freq_wavelen) {
      const double smooth = (original_context_length / wavelen - low_freq_factor) /
                            (high_freq_factor - low_freq_factor);
      scaled = (1.0 - smooth) * freq / factor + smooth * freq;
    }
    factors[static_cast<size_t>(i)] = static_cast<float>(freq / scaled);
  }
  return factors;
}

}  // namespace turbokv::engine
