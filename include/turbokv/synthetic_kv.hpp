// Synthetic keys, values and queries with the structure real models show, deterministic from a
// seed (turbokv/prng.hpp), for measuring cache quality at production head sizes without a model.
//
// What is modelled (per KV head; the channel layout is head-specific):
//   keys    pre-RoPE: a shared mean vector (every token has it; real keys share a large common
//           component) + Gaussian noise with per-channel scales; a few channel pairs are
//           outliers at 10-20x the typical magnitude (with a mean of the same size, as the
//           massive key channels of real models are mostly a fixed offset). Then RoPE
//           (rotate-half pairing (i, i + d/2), theta 10000) at the token's position, so
//           high-frequency pairs spin with position and low-frequency ones stay near their mean.
//   values  close to isotropic: Gaussian with mildly uneven per-channel scales (log-normal,
//           sigma 0.3) and a small mean; no RoPE.
//   queries drawn like keys (same head's outlier pairs and mean direction, own noise), RoPE at
//           the position after the last key (decode), then scaled so the logits q.k/sqrt(d)
//           over the context have standard deviation `query_logit_std` (attention neither
//           uniform nor one-hot, as in trained models).
// Layouts: keys/values [kv_heads][n_tokens][head_dim], queries [q_heads][n_queries][head_dim];
// query head h belongs to kv head h / (q_heads / kv_heads).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace turbokv {

struct SyntheticKVOptions {
  int kv_heads = 4;
  int q_heads = 8;            // a multiple of kv_heads
  int head_dim = 128;         // even
  size_t n_tokens = 1024;
  int n_queries = 16;         // decode queries per query head
  uint64_t seed = 0x73796e74686b76ULL;
  int outlier_pairs = -1;     // RoPE channel pairs with outliers; -1: max(1, head_dim / 64)
  double outlier_min = 10.0;  // outlier magnitude range, in units of the typical channel
  double outlier_max = 20.0;
  double key_mean = 1.0;      // norm of the shared key mean per channel (relative to noise 1)
  double rope_theta = 10000.0;
  double query_logit_std = 2.5;   // 0: leave queries unscaled
};

struct SyntheticKV {
  int kv_heads = 0, q_heads = 0, head_dim = 0;
  size_t n_tokens = 0;
  int n_queries = 0;
  std::vector<float> keys, values, queries;
  std::vector<std::vector<int>> outlier_channels;   // per kv head, sorted channel indices
};

// Throws turbokv::Error on bad options (odd head_dim, q_heads not a multiple of kv_heads, ...).
SyntheticKV make_synthetic_kv(const SyntheticKVOptions& options);

}  // namespace turbokv
