// llama2.c checkpoint loader (legacy version-0 format written by llama2.c's export.py and
// train.py): 7 little-endian int32 header fields, then float32 tensors in a fixed order.
#include <fmt/format.h>

#include <cstring>

#include "engine/model/mapped_file.hpp"
#include "engine/model/model.hpp"
#include "turbokv/error.hpp"

namespace turbokv::engine {

namespace {

void check_field(const std::string& path, const char* field, int64_t value, int64_t lo, int64_t hi) {
  if (value < lo || value > hi) {
    throw Error(fmt::format("llama2.c checkpoint '{}': header field {} = {} outside [{}, {}]", path, field,
                            value, lo, hi));
  }
}

}  // namespace

Model load_llama2c(const std::string& path) {
  auto file = std::make_shared<MappedFile>(path);
  constexpr size_t kHeaderBytes = 7 * sizeof(int32_t);
  if (file->size() < kHeaderBytes) {
    throw Error(fmt::format("llama2.c checkpoint '{}': {} bytes, too short for the 28-byte header", path,
                            file->size()));
  }
  int32_t h[7];
  std::memcpy(h, file->data(), kHeaderBytes);
  const int64_t dim = h[0], hidden_dim = h[1], n_layers = h[2], n_heads = h[3], n_kv_heads = h[4];
  const int64_t raw_vocab = h[5], seq_len = h[6];
  // Bounds keep every size product below 2^62, so the arithmetic below cannot overflow.
  check_field(path, "dim", dim, 1, 1 << 16);
  check_field(path, "hidden_dim", hidden_dim, 1, 1 << 18);
  check_field(path, "n_layers", n_layers, 1, 1024);
  check_field(path, "n_heads", n_heads, 1, dim);
  check_field(path, "n_kv_heads", n_kv_heads, 1, n_heads);
  if (dim % n_heads != 0) {
    throw Error(fmt::format("llama2.c checkpoint '{}': dim {} is not a multiple of n_heads {}", path, dim, n_heads));
  }
  if (n_heads % n_kv_heads != 0) {
    throw Error(fmt::format("llama2.c checkpoint '{}': n_heads {} is not a multiple of n_kv_heads {}", path,
                            n_heads, n_kv_heads));
  }
  const int64_t head_dim = dim / n_heads;
  if (head_dim % 2 != 0) {
    throw Error(fmt::format("llama2.c checkpoint '{}': head size {} (dim / n_heads) must be even", path, head_dim));
  }
  if (raw_vocab == 0) throw Error(fmt::format("llama2.c checkpoint '{}': header field vocab_size is 0", path));
  const bool shared_classifier = raw_vocab > 0;
  const int64_t vocab = shared_classifier ? raw_vocab : -raw_vocab;
  check_field(path, "vocab_size", vocab, 1, 1 << 22);
  check_field(path, "seq_len", seq_len, 1, 1 << 22);

  const int64_t kv_dim = n_kv_heads * head_dim;
  // Float counts in file order.
  const int64_t n_embedding = vocab * dim;
  const int64_t n_weights = n_embedding + n_layers * dim                      // rms_att
                            + n_layers * dim * dim + 2 * n_layers * dim * kv_dim  // wq, wk, wv
                            + n_layers * dim * dim                              // wo
                            + n_layers * dim                                    // rms_ffn
                            + 3 * n_layers * dim * hidden_dim                   // w1, w2, w3
                            + dim;                                              // rms_final
  const int64_t n_rope_tables = seq_len * head_dim;  // legacy freq_cis_real + freq_cis_imag
  const int64_t n_classifier = shared_classifier ? 0 : vocab * dim;
  const size_t body = file->size() - kHeaderBytes;
  const size_t need_min = static_cast<size_t>(n_weights + n_classifier + (shared_classifier ? 0 : n_rope_tables)) * 4;
  const size_t need_max = static_cast<size_t>(n_weights + n_rope_tables + n_classifier) * 4;
  if (body < need_min) {
    throw Error(fmt::format("llama2.c checkpoint '{}' is truncated: the header (dim {}, hidden_dim {}, n_layers {}, "
                            "n_heads {}, n_kv_heads {}, vocab_size {}, seq_len {}) needs {} bytes of weights, the "
                            "file has {}", path, dim, hidden_dim, n_layers, n_heads, n_kv_heads, raw_vocab, seq_len,
                            need_min, body));
  }
  if (body != need_min && body != need_max) {
    throw Error(fmt::format("llama2.c checkpoint '{}': {} bytes after the header, expected {} (or {} with the "
                            "legacy RoPE tables); wrong header or not a version-0 llama2.c file",
                            path, body, need_min, need_max));
  }

  const float* p = reinterpret_cast<const float*>(file->data() + kHeaderBytes);
  auto take = [&p](int64_t count) {
    const float* start = p;
    p += count;
    return start;
  };
  auto matrix = [](const float* data, int64_t rows, int64_t cols) {
    return WeightMatrix{GgmlType::F32, rows, cols, data};
  };
  auto copy = [](const float* data, int64_t n) { return std::vector<float>(data, data + n); };

  Model model;
  ModelConfig& c = model.config;
  c.arch = "llama";
  c.dim = static_cast<int>(dim);
  c.hidden_dim = static_cast<int>(hidden_dim);
  c.n_layers = static_cast<int>(n_layers);
  c.n_heads = static_cast<int>(n_heads);
  c.n_kv_heads = static_cast<int>(n_kv_heads);
  c.head_dim = static_cast<int>(head_dim);
  c.vocab_size = static_cast<int>(vocab);
  c.seq_len = static_cast<int>(seq_len);
  c.norm_eps = 1e-5f;
  c.rope_theta = 10000.0f;
  c.rope_neox = false;
  c.tied_embeddings = shared_classifier;
  c.bos_id = 1;
  c.eos_id = 2;

  model.token_embedding = matrix(take(n_embedding), vocab, dim);
  model.layers.resize(static_cast<size_t>(n_layers));
  const float* rms_att = take(n_layers * dim);
  const float* wq = take(n_layers * dim * dim);
  const float* wk = take(n_layers * dim * kv_dim);
  const float* wv = take(n_layers * dim * kv_dim);
  const float* wo = take(n_layers * dim * dim);
  const float* rms_ffn = take(n_layers * dim);
  const float* w1 = take(n_layers * dim * hidden_dim);
  const float* w2 = take(n_layers * dim * hidden_dim);
  const float* w3 = take(n_layers * dim * hidden_dim);
  model.final_norm = copy(take(dim), dim);
  for (int64_t l = 0; l < n_layers; ++l) {
    LayerWeights& w = model.layers[static_cast<size_t>(l)];
    w.attn_norm = copy(rms_att + l * dim, dim);
    w.wq = matrix(wq + l * dim * dim, dim, dim);
    w.wk = matrix(wk + l * dim * kv_dim, kv_dim, dim);
    w.wv = matrix(wv + l * dim * kv_dim, kv_dim, dim);
    w.wo = matrix(wo + l * dim * dim, dim, dim);
    w.ffn_norm = copy(rms_ffn + l * dim, dim);
    w.w_gate = matrix(w1 + l * dim * hidden_dim, hidden_dim, dim);
    w.w_down = matrix(w2 + l * dim * hidden_dim, dim, hidden_dim);
    w.w_up = matrix(w3 + l * dim * hidden_dim, hidden_dim, dim);
  }
  if (shared_classifier) {
    model.output = model.token_embedding;
  } else {
    take(n_rope_tables);
    model.output = matrix(take(n_classifier), vocab, dim);
  }
  model.path = path;
  model.format = "llama2c";
  model.storage = file;
  model.validate();
  return model;
}

}  // namespace turbokv::engine
