#include "engine/model/synthetic_model.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "engine/model/gguf_convert.hpp"
#include "turbokv/error.hpp"
#include "turbokv/half.hpp"
#include "turbokv/prng.hpp"

namespace turbokv::engine {

namespace {

struct Storage {
  std::vector<std::unique_ptr<uint8_t[]>> buffers;
};

bool type_supported(GgmlType t) { return is_supported_type(static_cast<uint32_t>(t)); }

size_t matrix_bytes(GgmlType type, int64_t rows, int64_t cols) {
  return row_bytes(type, cols) * static_cast<size_t>(rows);
}

// Uniform in [-a, a) from the top 24 bits of a 32-bit half of a draw.
inline float uniform_pm(uint32_t bits, float a) {
  return (static_cast<float>(bits >> 8) * (1.0f / 8388608.0f) - 1.0f) * a;
}

// One row of random values of standard deviation `stddev` in `type`, from its own stream.
void fill_row(GgmlType type, int64_t cols, float stddev, uint64_t seed, uint8_t* out) {
  SplitMix64 rng(seed);
  const float a = stddev * std::sqrt(3.0f);  // uniform [-a, a] has this standard deviation
  switch (type) {
    case GgmlType::F32: {
      for (int64_t i = 0; i < cols; i += 2) {
        const uint64_t r = rng.next();
        const float v[2] = {uniform_pm(static_cast<uint32_t>(r), a), uniform_pm(static_cast<uint32_t>(r >> 32), a)};
        std::memcpy(out + 4 * i, v, 4 * static_cast<size_t>(std::min<int64_t>(2, cols - i)));
      }
      break;
    }
    case GgmlType::F16: {
      for (int64_t i = 0; i < cols; i += 2) {
        const uint64_t r = rng.next();
        const uint16_t v[2] = {float_to_half(uniform_pm(static_cast<uint32_t>(r), a)),
                               float_to_half(uniform_pm(static_cast<uint32_t>(r >> 32), a))};
        std::memcpy(out + 2 * i, v, 2 * static_cast<size_t>(std::min<int64_t>(2, cols - i)));
      }
      break;
    }
    case GgmlType::Q8_0: {
      // Codes uniform in [-127, 127]; d = a / 127 so values are uniform in [-a, a].
      const uint16_t d = float_to_half(a / 127.0f);
      for (int64_t b = 0; b < cols / 32; ++b) {
        uint8_t* block = out + 34 * b;
        std::memcpy(block, &d, 2);
        for (int j = 0; j < 32; j += 8) {
          uint64_t r = rng.next();
          for (int k = 0; k < 8; ++k, r >>= 8) {
            block[2 + j + k] = static_cast<uint8_t>(static_cast<int8_t>(static_cast<int>(r & 0xff) % 255 - 127));
          }
        }
      }
      break;
    }
    case GgmlType::Q4_0: {
      // Codes 1..15 (values d * (q - 8) in -7..7, symmetric; a drawn 0 becomes 8, the value 0):
      // their variance is 17.5 d^2.
      const uint16_t d = float_to_half(stddev / std::sqrt(17.5f));
      for (int64_t b = 0; b < cols / 32; ++b) {
        uint8_t* block = out + 18 * b;
        std::memcpy(block, &d, 2);
        for (int j = 0; j < 16; j += 8) {
          uint64_t r = rng.next();
          for (int k = 0; k < 8; ++k, r >>= 8) {
            uint8_t lo = static_cast<uint8_t>(r & 15), hi = static_cast<uint8_t>((r >> 4) & 15);
            if (lo == 0) lo = 8;
            if (hi == 0) hi = 8;
            block[2 + j + k] = static_cast<uint8_t>(lo | (hi << 4));
          }
        }
      }
      break;
    }
    default: {
      // Every other type: uniform values through the type's encoder (slower than drawing codes,
      // but the encoder sets scales and mins the way a real file has them).
      thread_local std::vector<float> values;
      values.resize(static_cast<size_t>(cols));
      for (int64_t i = 0; i < cols; i += 2) {
        const uint64_t r = rng.next();
        values[static_cast<size_t>(i)] = uniform_pm(static_cast<uint32_t>(r), a);
        if (i + 1 < cols) values[static_cast<size_t>(i + 1)] = uniform_pm(static_cast<uint32_t>(r >> 32), a);
      }
      quantize_row(type, values.data(), cols, out);
      break;
    }
  }
}

// What every Qwen 3 model shares (the dense and the mixture-of-experts shapes): vocabulary,
// context, norms, RoPE, QK norm, special tokens.
ModelConfig qwen3_family_config() {
  ModelConfig c;
  c.head_dim = 128;
  c.vocab_size = 151936;
  c.seq_len = 40960;
  c.norm_eps = 1e-6f;
  c.rope_theta = 1000000.0f;
  c.rope_neox = true;
  c.qk_norm = true;
  c.bos_id = 151643;
  c.eos_id = 151645;
  return c;
}

// Gemma 3 1B / 4B as their GGUFs read (config.json of google/gemma-3-1b-it and -4b-it).
ModelConfig gemma3_config(bool small) {
  ModelConfig c;
  c.arch = "gemma3";
  c.dim = small ? 1152 : 2560;
  c.hidden_dim = small ? 6912 : 10240;
  c.n_layers = small ? 26 : 34;
  c.n_heads = small ? 4 : 8;
  c.n_kv_heads = small ? 1 : 4;
  c.head_dim = 256;
  c.vocab_size = small ? 262144 : 262208;
  c.seq_len = small ? 32768 : 131072;
  c.norm_eps = 1e-6f;
  c.rope_theta = 1000000.0f;
  if (!small) c.rope_freq_factors.assign(static_cast<size_t>(c.head_dim / 2), 8.0f);  // linear scaling 8
  c.rope_neox = true;
  c.qk_norm = true;
  c.tied_embeddings = true;
  c.bos_id = 2;
  c.eos_id = 1;
  c.embedding_scale = std::sqrt(static_cast<float>(c.dim));
  c.attention_scale = 1.0f / std::sqrt(256.0f);  // query_pre_attn_scalar 256
  c.post_norms = true;
  c.gelu_ffn = true;
  c.sliding_window = small ? 512 : 1024;
  c.swa_pattern = 6;
  c.rope_theta_local = 10000.0f;
  return c;
}

// Phi-4-mini (config.json of microsoft/Phi-4-mini-instruct): phi3 with 3/4 of each head rotating
// and LongRoPE past 4,096 positions. The factor values are stand-ins of the right count (long
// ones rising to 32, short ones near 1), set to the long set as load_model sets a 128K file's;
// they change the angles, not the cost of a step.
ModelConfig phi4_mini_config() {
  ModelConfig c;
  c.arch = "phi3";
  c.dim = 3072;
  c.hidden_dim = 8192;
  c.n_layers = 32;
  c.n_heads = 24;
  c.n_kv_heads = 8;
  c.head_dim = 128;
  c.rope_dims = 96;  // partial_rotary_factor 0.75
  c.vocab_size = 200064;
  c.seq_len = 131072;
  c.norm_eps = 1e-5f;
  c.rope_theta = 10000.0f;
  c.rope_neox = true;
  c.tied_embeddings = true;
  c.bos_id = 199999;
  c.eos_id = 200020;
  c.sliding_window = 262144;
  c.rope_original_context = 4096;
  c.rope_attn_factor = static_cast<float>(std::sqrt(1.0 + std::log(32.0) / std::log(4096.0)));
  for (int i = 0; i < c.rope_dims / 2; ++i) {
    const float t = static_cast<float>(i) / static_cast<float>(c.rope_dims / 2 - 1);
    c.rope_factors_long.push_back(1.0f + 31.0f * t * t);
    c.rope_factors_short.push_back(1.0f + 0.05f * t);
  }
  select_rope_factors(c, c.seq_len);
  return c;
}

size_t physical_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page = sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page <= 0) return size_t{64} << 30;
  return static_cast<size_t>(pages) * static_cast<size_t>(page);
}

}  // namespace

std::vector<std::string> synthetic_model_names() {
  return {"llama-3.2-1b", "llama-3.1-8b", "qwen3-0.6b", "qwen3-30b-a3b-16e", "gemma3-1b", "gemma3-4b", "phi-4-mini"};
}

ModelConfig synthetic_model_config(const std::string& name) {
  ModelConfig c;
  if (name == "llama-3.2-1b" || name == "llama-3.1-8b") {
    const bool small = name == "llama-3.2-1b";
    c.arch = "llama";
    c.dim = small ? 2048 : 4096;
    c.hidden_dim = small ? 8192 : 14336;
    c.n_layers = small ? 16 : 32;
    c.n_heads = 32;
    c.n_kv_heads = 8;
    c.head_dim = small ? 64 : 128;
    c.vocab_size = 128256;
    c.seq_len = 131072;
    c.norm_eps = 1e-5f;
    c.rope_theta = 500000.0f;
    c.rope_freq_factors = llama3_rope_freq_factors(c.head_dim, c.rope_theta, small ? 32.0f : 8.0f, 1.0f, 4.0f, 8192);
    c.tied_embeddings = small;
    c.bos_id = 128000;
    c.eos_id = 128001;
  } else if (name == "qwen3-0.6b") {
    c = qwen3_family_config();
    c.arch = "qwen3";
    c.dim = 1024;
    c.hidden_dim = 3072;
    c.n_layers = 28;
    c.n_heads = 16;
    c.n_kv_heads = 8;
    c.tied_embeddings = true;
  } else if (name == "qwen3-30b-a3b-16e") {
    // Qwen3-30B-A3B with 16 of its 128 experts (8 still used per token): the real per-token work,
    // a fraction of the 30B weights.
    c = qwen3_family_config();
    c.arch = "qwen3moe";
    c.dim = 2048;
    c.hidden_dim = 768;
    c.n_experts = 16;
    c.n_experts_used = 8;
    c.n_layers = 48;
    c.n_heads = 32;
    c.n_kv_heads = 4;
    c.tied_embeddings = false;
  } else if (name == "gemma3-1b" || name == "gemma3-4b") {
    c = gemma3_config(name == "gemma3-1b");
  } else if (name == "phi-4-mini") {
    c = phi4_mini_config();
  } else {
    throw Error(fmt::format("unknown synthetic model '{}' (known: {})", name, fmt::join(synthetic_model_names(), ", ")));
  }
  c.validate();
  return c;
}

GgmlType parse_synthetic_weight_type(const std::string& name) { return parse_weight_type(name); }

size_t synthetic_weight_bytes(const ModelConfig& c, GgmlType type) {
  const int64_t blocks = c.ffn_blocks();
  size_t per_layer = matrix_bytes(type, c.q_dim(), c.dim) + 2 * matrix_bytes(type, c.kv_dim(), c.dim) +
                     matrix_bytes(type, c.dim, c.q_dim()) + 2 * matrix_bytes(type, blocks * c.hidden_dim, c.dim) +
                     matrix_bytes(type, blocks * c.dim, c.hidden_dim);
  if (c.n_experts > 0) per_layer += matrix_bytes(GgmlType::F32, c.n_experts, c.dim);  // the router
  size_t total = per_layer * static_cast<size_t>(c.n_layers) + matrix_bytes(type, c.vocab_size, c.dim);
  if (!c.tied_embeddings) total += matrix_bytes(type, c.vocab_size, c.dim);
  return total;
}

Model make_synthetic_model(const ModelConfig& config, GgmlType type, ThreadPool& pool, uint64_t seed,
                           size_t max_bytes) {
  config.validate();
  if (!type_supported(type)) {
    throw Error(fmt::format("synthetic model: weight type {} not supported", type_name(type)));
  }
  const size_t need = synthetic_weight_bytes(config, type);  // also checks block divisibility
  const size_t limit = max_bytes ? max_bytes : physical_memory_bytes() / 10 * 8;
  if (need > limit) {
    throw Error(fmt::format("synthetic model: weights need {:.2f} GB, more than the {:.2f} GB allowed", need / 1e9,
                            limit / 1e9));
  }
  auto storage = std::make_shared<Storage>();
  uint64_t tag = 0;
  const auto make = [&](int64_t rows, int64_t cols, GgmlType matrix_type) {
    const size_t rb = row_bytes(matrix_type, cols);
    std::unique_ptr<uint8_t[]> buf(new uint8_t[rb * static_cast<size_t>(rows)]);
    const float stddev = 1.0f / std::sqrt(static_cast<float>(cols));
    const uint64_t matrix_seed = derive_seed(seed, ++tag);
    uint8_t* base = buf.get();
    pool.parallel_for(
        static_cast<size_t>(rows),
        [&](size_t begin, size_t end) {
          for (size_t r = begin; r < end; ++r) {
            fill_row(matrix_type, cols, stddev, derive_seed(matrix_seed, r), base + r * rb);
          }
        },
        64);
    WeightMatrix w{matrix_type, rows, cols, base};
    storage->buffers.push_back(std::move(buf));
    return w;
  };
  const ModelConfig& c = config;
  Model m;
  m.config = c;
  m.token_embedding = make(c.vocab_size, c.dim, type);
  m.output = c.tied_embeddings ? m.token_embedding : make(c.vocab_size, c.dim, type);
  m.final_norm.assign(static_cast<size_t>(c.dim), 1.0f);
  m.layers.resize(static_cast<size_t>(c.n_layers));
  for (LayerWeights& w : m.layers) {
    w.attn_norm.assign(static_cast<size_t>(c.dim), 1.0f);
    w.ffn_norm.assign(static_cast<size_t>(c.dim), 1.0f);
    w.wq = make(c.q_dim(), c.dim, type);
    w.wk = make(c.kv_dim(), c.dim, type);
    w.wv = make(c.kv_dim(), c.dim, type);
    w.wo = make(c.dim, c.q_dim(), type);
    const int64_t blocks = c.ffn_blocks();  // the experts stacked (model.hpp)
    w.w_gate = make(blocks * c.hidden_dim, c.dim, type);
    w.w_up = make(blocks * c.hidden_dim, c.dim, type);
    w.w_down = make(blocks * c.dim, c.hidden_dim, type);
    // llama-quantize leaves the router (ffn_gate_inp) in F32; so does this.
    if (c.n_experts > 0) w.router = make(c.n_experts, c.dim, GgmlType::F32);
    if (c.qkv_bias) {
      w.bq.assign(static_cast<size_t>(c.q_dim()), 0.0f);
      w.bk.assign(static_cast<size_t>(c.kv_dim()), 0.0f);
      w.bv.assign(static_cast<size_t>(c.kv_dim()), 0.0f);
    }
    if (c.qk_norm) {
      w.q_norm.assign(static_cast<size_t>(c.head_dim), 1.0f);
      w.k_norm.assign(static_cast<size_t>(c.head_dim), 1.0f);
    }
    if (c.post_norms) {
      w.attn_post_norm.assign(static_cast<size_t>(c.dim), 1.0f);
      w.ffn_post_norm.assign(static_cast<size_t>(c.dim), 1.0f);
    }
  }
  m.storage = std::static_pointer_cast<const void>(std::shared_ptr<const Storage>(storage));
  m.format = "synthetic";
  m.path = "synthetic";
  m.validate();
  return m;
}

Model make_synthetic_model(const std::string& name, GgmlType type, ThreadPool& pool, uint64_t seed,
                           size_t max_bytes) {
  Model m = make_synthetic_model(synthetic_model_config(name), type, pool, seed, max_bytes);
  m.path = fmt::format("synthetic:{}:{}", name, type_name(type));
  return m;
}

}  // namespace turbokv::engine
