// Synthetic KV data (see synthetic_kv.hpp for the model of real keys/values it follows).
#include "turbokv/synthetic_kv.hpp"

#include <algorithm>
#include <cmath>

#include "core/check.hpp"
#include "turbokv/prng.hpp"

namespace turbokv {

namespace {

// Rotate-half RoPE in place on one row: pair i = channels (i, i + d/2), angle pos * theta^(-2i/d).
void apply_rope(float* row, int head_dim, double position, double theta) {
  const int half = head_dim / 2;
  for (int i = 0; i < half; ++i) {
    const double freq = std::pow(theta, -2.0 * i / head_dim);
    const double angle = position * freq;
    const double c = std::cos(angle), s = std::sin(angle);
    const double a = row[i], b = row[i + half];
    row[i] = static_cast<float>(a * c - b * s);
    row[i + half] = static_cast<float>(a * s + b * c);
  }
}

struct HeadProfile {
  std::vector<double> key_mean, key_sigma;     // pre-RoPE, per channel
  std::vector<double> value_mean, value_sigma;
  std::vector<int> outlier_pairs;
  std::vector<double> outlier_magnitude;       // per outlier pair
};

HeadProfile make_profile(const SyntheticKVOptions& o, SplitMix64& rng) {
  const int d = o.head_dim, half = d / 2;
  HeadProfile p;
  p.key_mean.resize(d);
  p.key_sigma.resize(d);
  p.value_mean.resize(d);
  p.value_sigma.resize(d);
  for (int c = 0; c < d; ++c) {
    p.key_mean[c] = o.key_mean * rng.normal();
    p.key_sigma[c] = std::exp(0.25 * rng.normal());
    p.value_mean[c] = 0.2 * rng.normal();
    p.value_sigma[c] = std::exp(0.3 * rng.normal());
  }
  // Outlier pairs sit in the low-frequency half, where trained models put their massive key
  // channels (they barely rotate with position, so they act as a large shared offset).
  const int n_outliers = o.outlier_pairs >= 0 ? o.outlier_pairs : std::max(1, d / 64);
  std::vector<int> candidates;
  for (int i = half / 2; i < half; ++i) candidates.push_back(i);
  for (int k = 0; k < n_outliers && !candidates.empty(); ++k) {
    const size_t pick = static_cast<size_t>(rng.uniform() * static_cast<double>(candidates.size()));
    const int pair = candidates[std::min(pick, candidates.size() - 1)];
    candidates.erase(candidates.begin() + static_cast<std::ptrdiff_t>(std::min(pick, candidates.size() - 1)));
    const double m = o.outlier_min + (o.outlier_max - o.outlier_min) * rng.uniform();
    // m is relative to the typical (median) channel RMS; the pair's mean takes most of it and
    // points roughly diagonally so both channels of the pair carry it.
    const double typical = std::sqrt(0.455 * o.key_mean * o.key_mean + 1.0);
    const double sigma = 0.3 * m * typical;
    const double mean_norm = std::sqrt(2.0 * (1.0 - 0.09)) * m * typical;
    const double phase = 0.7853981633974483 + 1.5707963267948966 * std::floor(4 * rng.uniform()) +
                         0.3 * (2 * rng.uniform() - 1);
    p.key_mean[pair] = mean_norm * std::cos(phase);
    p.key_mean[pair + half] = mean_norm * std::sin(phase);
    p.key_sigma[pair] = p.key_sigma[pair + half] = sigma;
    p.outlier_pairs.push_back(pair);
    p.outlier_magnitude.push_back(m);
  }
  return p;
}

}  // namespace

SyntheticKV make_synthetic_kv(const SyntheticKVOptions& o) {
  TURBOKV_CHECK(o.head_dim >= 2 && o.head_dim <= 8192 && o.head_dim % 2 == 0,
                "make_synthetic_kv: head_dim must be even and in [2, 8192], got {}", o.head_dim);
  TURBOKV_CHECK(o.kv_heads >= 1 && o.kv_heads <= 1024, "make_synthetic_kv: kv_heads must be in "
                "[1, 1024], got {}", o.kv_heads);
  TURBOKV_CHECK(o.q_heads >= o.kv_heads && o.q_heads % o.kv_heads == 0 && o.q_heads <= 4096,
                "make_synthetic_kv: q_heads ({}) must be a multiple of kv_heads ({})", o.q_heads,
                o.kv_heads);
  TURBOKV_CHECK(o.n_tokens >= 1 &&
                    o.n_tokens <= (size_t{1} << 32) / (static_cast<size_t>(o.kv_heads) * o.head_dim),
                "make_synthetic_kv: n_tokens {} out of range", o.n_tokens);
  TURBOKV_CHECK(o.n_queries >= 1 && o.n_queries <= 4096,
                "make_synthetic_kv: n_queries must be in [1, 4096], got {}", o.n_queries);
  TURBOKV_CHECK(o.outlier_min > 0 && o.outlier_max >= o.outlier_min && o.outlier_max < 1e4 &&
                    std::isfinite(o.key_mean) && std::fabs(o.key_mean) < 1e4 &&
                    o.rope_theta > 1 && std::isfinite(o.rope_theta) &&
                    o.query_logit_std >= 0 && o.query_logit_std < 1e3,
                "make_synthetic_kv: bad magnitude options");

  const int d = o.head_dim, group = o.q_heads / o.kv_heads;
  const size_t n = o.n_tokens;
  SyntheticKV out;
  out.kv_heads = o.kv_heads;
  out.q_heads = o.q_heads;
  out.head_dim = d;
  out.n_tokens = n;
  out.n_queries = o.n_queries;
  out.keys.resize(static_cast<size_t>(o.kv_heads) * n * d);
  out.values.resize(out.keys.size());
  out.queries.resize(static_cast<size_t>(o.q_heads) * o.n_queries * d);
  out.outlier_channels.resize(o.kv_heads);

  for (int h = 0; h < o.kv_heads; ++h) {
    SplitMix64 rng(derive_seed(o.seed, 0x1000 + static_cast<uint64_t>(h)));
    const HeadProfile p = make_profile(o, rng);
    for (int pair : p.outlier_pairs) {
      out.outlier_channels[h].push_back(pair);
      out.outlier_channels[h].push_back(pair + d / 2);
    }
    std::sort(out.outlier_channels[h].begin(), out.outlier_channels[h].end());

    float* keys = out.keys.data() + static_cast<size_t>(h) * n * d;
    float* values = out.values.data() + static_cast<size_t>(h) * n * d;
    for (size_t t = 0; t < n; ++t) {
      float* k = keys + t * d;
      float* v = values + t * d;
      for (int c = 0; c < d; ++c) {
        k[c] = static_cast<float>(p.key_mean[c] + p.key_sigma[c] * rng.normal());
        v[c] = static_cast<float>(p.value_mean[c] + p.value_sigma[c] * rng.normal());
      }
      apply_rope(k, d, static_cast<double>(t), o.rope_theta);
    }

    // Queries of this kv head's group: they share its outlier pairs (that is what makes key
    // outliers matter) with their own signs, and a partly aligned mean.
    for (int g = 0; g < group; ++g) {
      const int qh = h * group + g;
      SplitMix64 qrng(derive_seed(o.seed, 0x2000 + static_cast<uint64_t>(qh)));
      std::vector<double> q_mean(d), q_sigma(d);
      for (int c = 0; c < d; ++c) {
        q_mean[c] = 0.5 * p.key_mean[c] / (1.0 + std::fabs(p.key_mean[c])) + 0.5 * qrng.normal();
        q_sigma[c] = std::min(p.key_sigma[c], 2.0);
      }
      for (size_t k = 0; k < p.outlier_pairs.size(); ++k) {
        const int pair = p.outlier_pairs[k];
        const double sign = qrng.uniform() < 0.5 ? -1.0 : 1.0;
        q_mean[pair] = 0.3 * sign * p.key_mean[pair];
        q_mean[pair + d / 2] = 0.3 * sign * p.key_mean[pair + d / 2];
      }
      for (int qi = 0; qi < o.n_queries; ++qi) {
        float* q = out.queries.data() + (static_cast<size_t>(qh) * o.n_queries + qi) * d;
        for (int c = 0; c < d; ++c) q[c] = static_cast<float>(q_mean[c] + q_sigma[c] * qrng.normal());
        apply_rope(q, d, static_cast<double>(n), o.rope_theta);
        if (o.query_logit_std > 0) {
          // Scale so the logits over this head's keys have the requested spread.
          double sum = 0, sum2 = 0;
          const double inv_sqrt_d = 1.0 / std::sqrt(static_cast<double>(d));
          for (size_t t = 0; t < n; ++t) {
            double dot = 0;
            for (int c = 0; c < d; ++c) dot += double(q[c]) * keys[t * d + c];
            dot *= inv_sqrt_d;
            sum += dot;
            sum2 += dot * dot;
          }
          const double mean = sum / static_cast<double>(n);
          const double var = std::max(0.0, sum2 / static_cast<double>(n) - mean * mean);
          if (var > 1e-30) {
            const double f = o.query_logit_std / std::sqrt(var);
            for (int c = 0; c < d; ++c) q[c] = static_cast<float>(q[c] * f);
          }
        }
      }
    }
  }
  return out;
}

}  // namespace turbokv
