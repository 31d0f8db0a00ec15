// The per-row operations of the Llama-family (and Gemma) forward pass (the Decoder's, decoder.hpp, which
// Forward and BatchForward both run).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

#include "engine/model/model_config.hpp"

namespace turbokv::engine::ops {

// out = weight * x / rms(x), as llama2.c's rmsnorm (eps inside the root).
inline void rmsnorm(float* out, const float* x, const float* weight, int size, float eps) {
  double ss = 0.0;
  for (int i = 0; i < size; ++i) ss += static_cast<double>(x[i]) * x[i];
  const float scale = 1.0f / std::sqrt(static_cast<float>(ss / size) + eps);
  for (int i = 0; i < size; ++i) out[i] = weight[i] * (scale * x[i]);
}

inline float silu(float x) { return x / (1.0f + std::exp(-x)); }

// GELU, tanh approximation (Gemma's gelu_pytorch_tanh and ggml_gelu).
inline float gelu_tanh(float x) {
  constexpr float kSqrt2OverPi = 0.7978845608028654f;
  return 0.5f * x * (1.0f + std::tanh(kSqrt2OverPi * x * (1.0f + 0.044715f * x * x)));
}

// cap * tanh(x / cap): Gemma 2's soft-capping of attention and output logits.
inline float softcap(float x, float cap) { return cap * std::tanh(x / cap); }

// [n][heads][head_dim] -> [heads][n][head_dim] (the cache and attention layout), and back.
inline void to_head_major(const float* in, int n, int heads, int head_dim, float* out) {
  for (int t = 0; t < n; ++t) {
    for (int h = 0; h < heads; ++h) {
      const float* src = in + (static_cast<size_t>(t) * heads + h) * head_dim;
      float* dst = out + (static_cast<size_t>(h) * n + t) * head_dim;
      std::copy(src, src + head_dim, dst);
    }
  }
}

inline void to_token_major(const float* in, int n, int heads, int head_dim, float* out) {
  for (int h = 0; h < heads; ++h) {
    for (int t = 0; t < n; ++t) {
      const float* src = in + (static_cast<size_t>(h) * n + t) * head_dim;
      float* dst = out + (static_cast<size_t>(t) * heads + h) * head_dim;
      std::copy(src, src + head_dim, dst);
    }
  }
}

// Rotary position embedding with the model's frequencies (and any Llama 3 or LongRoPE factors),
// over the first rotary_dims() coordinates of each head (the rest pass through, as ggml_rope_ext
// leaves them), the rotated ones times rope_attn_factor. local: a sliding-window layer's, with
// rope_theta_local and no scaling when the model sets it (Gemma 3).
class Rope {
 public:
  explicit Rope(const ModelConfig& c, bool local = false)
      : head_dim_(c.head_dim), rotary_(c.rotary_dims()), neox_(c.rope_neox), magnitude_(c.rope_attn_factor) {
    const bool own_base = local && c.rope_theta_local > 0.0f;
    const float theta = own_base ? c.rope_theta_local : c.rope_theta;
    // Same float arithmetic as llama2.c (powf in float), so its checkpoints reproduce exactly.
    inv_freq_.resize(static_cast<size_t>(rotary_ / 2));
    for (int i = 0; i < rotary_ / 2; ++i) {
      float freq = 1.0f / std::pow(theta, static_cast<float>(2 * i) / static_cast<float>(rotary_));
      if (!own_base && !c.rope_freq_factors.empty()) freq /= c.rope_freq_factors[static_cast<size_t>(i)];
      inv_freq_[static_cast<size_t>(i)] = freq;
    }
  }

  // Rotates n_heads heads of vec (head-contiguous) for position pos.
  void apply(float* vec, int n_heads, size_t pos) const {
    const int half = rotary_ / 2;
    const float p = static_cast<float>(pos);
    for (int i = 0; i < half; ++i) {
      const float angle = p * inv_freq_[static_cast<size_t>(i)];
      const float c = std::cos(angle) * magnitude_;
      const float s = std::sin(angle) * magnitude_;
      // Adjacent pairs (2i, 2i+1) for llama; halves of the rotary part (i, i + rotary/2) for NeoX-style models.
      const int a = neox_ ? i : 2 * i;
      const int b = neox_ ? i + half : 2 * i + 1;
      for (int h = 0; h < n_heads; ++h) {
        float* head = vec + static_cast<size_t>(h) * head_dim_;
        const float v0 = head[a];
        const float v1 = head[b];
        head[a] = v0 * c - v1 * s;
        head[b] = v0 * s + v1 * c;
      }
    }
  }

 private:
  int head_dim_;
  int rotary_;       // leading coordinates of a head that rotate
  bool neox_;
  float magnitude_;  // rope_attn_factor
  std::vector<float> inv_freq_;  // per rotary pair, after any frequency scaling
};

}  // namespace turbokv::engine::ops
