#include "engine/model/model.hpp"

#include <fmt/format.h>

#include <cstring>
#include <fstream>
#include <set>

#include "turbokv/error.hpp"

namespace turbokv::engine {

namespace {

void check_matrix(const WeightMatrix& w, int64_t rows, int64_t cols, const std::string& name) {
  if (w.data == nullptr) throw Error(fmt::format("model: tensor {} is missing", name));
  if (w.rows != rows || w.cols != cols) {
    throw Error(fmt::format("model: tensor {} is [{}][{}], expected [{}][{}]", name, w.rows, w.cols, rows, cols));
  }
}

void check_vector(const std::vector<float>& v, size_t n, const std::string& name) {
  if (v.size() != n) throw Error(fmt::format("model: tensor {} has {} values, expected {}", name, v.size(), n));
}

size_t matrix_bytes(const WeightMatrix& w) {
  return row_bytes(w.type, w.cols) * static_cast<size_t>(w.rows);
}

}  // namespace

void Model::validate() const {
  config.validate();
  const ModelConfig& c = config;
  check_matrix(token_embedding, c.vocab_size, c.dim, "token_embedding");
  check_matrix(output, c.vocab_size, c.dim, "output");
  check_vector(final_norm, static_cast<size_t>(c.dim), "final_norm");
  if (static_cast<int>(layers.size()) != c.n_layers) {
    throw Error(fmt::format("model: {} layers, config says {}", layers.size(), c.n_layers));
  }
  for (int l = 0; l < c.n_layers; ++l) {
    const LayerWeights& w = layers[static_cast<size_t>(l)];
    auto name = [l](const char* what) { return fmt::format("layers.{}.{}", l, what); };
    if (c.pre_norms) {
      check_vector(w.attn_norm, c.dim, name("attn_norm"));
      check_vector(w.ffn_norm, c.dim, name("ffn_norm"));
    }
    check_matrix(w.wq, c.q_dim(), c.dim, name("wq"));
    check_matrix(w.wk, c.kv_dim(), c.dim, name("wk"));
    check_matrix(w.wv, c.kv_dim(), c.dim, name("wv"));
    check_matrix(w.wo, c.dim, c.q_dim(), name("wo"));
    const int64_t blocks = c.ffn_blocks();
    check_matrix(w.w_gate, blocks * c.hidden_dim, c.dim, name("w_gate"));
    check_matrix(w.w_up, blocks * c.hidden_dim, c.dim, name("w_up"));
    check_matrix(w.w_down, blocks * c.dim, c.hidden_dim, name("w_down"));
    if (c.n_experts > 0) check_matrix(w.router, c.n_experts, c.dim, name("router"));
    if (c.qkv_bias) {
      check_vector(w.bq, c.q_dim(), name("bq"));
      check_vector(w.bk, c.kv_dim(), name("bk"));
      check_vector(w.bv, c.kv_dim(), name("bv"));
    }
    if (c.qk_norm) {
      check_vector(w.q_norm, c.qk_norm_whole ? c.q_dim() : c.head_dim, name("q_norm"));
      check_vector(w.k_norm, c.qk_norm_whole ? c.kv_dim() : c.head_dim, name("k_norm"));
    }
    if (c.post_norms) {
      check_vector(w.attn_post_norm, c.dim, name("attn_post_norm"));
      check_vector(w.ffn_post_norm, c.dim, name("ffn_post_norm"));
    }
  }
}

size_t Model::weight_bytes() const {
  size_t total = matrix_bytes(token_embedding) + final_norm.size() * 4;
  if (output.data != token_embedding.data) total += matrix_bytes(output);
  for (const LayerWeights& w : layers) {
    for (const WeightMatrix* m : {&w.wq, &w.wk, &w.wv, &w.wo, &w.w_gate, &w.w_up, &w.w_down}) total += matrix_bytes(*m);
    if (w.router.data != nullptr) total += matrix_bytes(w.router);
    total += 4 * (w.attn_norm.size() + w.ffn_norm.size() + w.bq.size() + w.bk.size() + w.bv.size() +
                  w.q_norm.size() + w.k_norm.size() + w.attn_post_norm.size() + w.ffn_post_norm.size());
  }
  return total;
}

std::string Model::weight_type_summary() const {
  std::set<std::string> types;
  for (const LayerWeights& w : layers) {
    for (const WeightMatrix* m : {&w.wq, &w.wk, &w.wv, &w.wo, &w.w_gate, &w.w_up, &w.w_down}) types.insert(type_name(m->type));
  }
  if (types.size() == 1) return *types.begin();
  std::string joined = "mixed(";
  for (const auto& t : types) joined += (joined.back() == '(' ? "" : ",") + t;
  return joined + ")";
}

WeightMatrix expert_block(const WeightMatrix& stacked, int experts, int e) {
  if (experts < 1 || stacked.rows % experts != 0 || e < 0 || e >= experts) {
    throw Error(fmt::format("model: expert {} of {} in a stack of {} rows", e, experts, stacked.rows));
  }
  WeightMatrix m = stacked;
  m.rows = stacked.rows / experts;
  m.data = static_cast<const uint8_t*>(stacked.data) + row_bytes(stacked.type, stacked.cols) * static_cast<size_t>(m.rows * e);
  return m;
}

Model load_model(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(fmt::format("cannot open model '{}'", path));
  char magic[4] = {};
  in.read(magic, 4);
  if (in.gcount() == 4 && std::memcmp(magic, "GGUF", 4) == 0) return load_gguf(path);
  return load_llama2c(path);
}

}  // namespace turbokv::engine
