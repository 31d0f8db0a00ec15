// llama2.c checkpoint loader: real files load with the documented shapes, the classifier is
// shared or separate as the vocab sign says, and every bad header field or truncation is a
// turbokv::Error naming the problem (never a crash or a read past the end).
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "engine/model/model.hpp"
#include "test_util.hpp"
#include "turbokv/error.hpp"

using namespace turbokv::engine;

namespace {

const std::string kModels = TURBOKV_MODELS_DIR;

struct Header {
  int32_t dim = 16, hidden_dim = 24, n_layers = 2, n_heads = 4, n_kv_heads = 2, vocab = 11, seq_len = 8;
};

// Floats of a version-0 checkpoint for the header (value i of the body = i * 1e-3), with the
// legacy RoPE tables and, for a negative vocab, the classifier.
std::vector<float> body_for(const Header& h, bool rope_tables) {
  const int64_t vocab = std::abs(h.vocab), head = h.dim / h.n_heads, kv_dim = h.n_kv_heads * head;
  int64_t n = vocab * h.dim + h.n_layers * (2 * h.dim + 2 * h.dim * h.dim + 2 * h.dim * kv_dim + 3 * h.dim * h.hidden_dim) +
              h.dim;
  if (rope_tables || h.vocab < 0) n += h.seq_len * head;
  if (h.vocab < 0) n += vocab * h.dim;
  std::vector<float> body(static_cast<size_t>(n));
  for (size_t i = 0; i < body.size(); ++i) body[i] = static_cast<float>(i) * 1e-3f;
  return body;
}

std::string write_checkpoint(const std::string& name, const Header& h, const std::vector<float>& body,
                             size_t cut_bytes = 0) {
  const std::string path = turbokv::test::temp_path("llama2c_" + name);
  std::string bytes(sizeof(Header) + body.size() * 4, '\0');
  std::memcpy(bytes.data(), &h, sizeof(Header));
  if (!body.empty()) std::memcpy(bytes.data() + sizeof(Header), body.data(), body.size() * 4);
  bytes.resize(bytes.size() - cut_bytes);
  std::ofstream(path, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  return path;
}

std::string error_of(const std::string& path) {
  try {
    load_llama2c(path);
  } catch (const turbokv::Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(Llama2c, RealCheckpointsLoad) {
  const Model s = load_llama2c(kModels + "/stories260K.bin");
  EXPECT_EQ(s.config.dim, 64);
  EXPECT_EQ(s.config.hidden_dim, 172);
  EXPECT_EQ(s.config.n_layers, 5);
  EXPECT_EQ(s.config.n_heads, 8);
  EXPECT_EQ(s.config.n_kv_heads, 4);
  EXPECT_EQ(s.config.vocab_size, 512);
  EXPECT_EQ(s.config.seq_len, 512);
  EXPECT_TRUE(s.config.tied_embeddings);
  EXPECT_EQ(s.output.data, s.token_embedding.data);
  EXPECT_EQ(s.format, "llama2c");
  EXPECT_EQ(s.weight_type_summary(), "F32");
  const Model k = load_model(kModels + "/kjv-llama-3M.bin");
  EXPECT_EQ(k.config.head_dim, 64);
  EXPECT_EQ(k.config.n_layers, 4);
  EXPECT_EQ(k.weight_bytes(), 3082496u * 4);  // the README's parameter count
}

TEST(Llama2c, SeparateClassifierAndTensorOrder) {
  Header h;
  h.vocab = -11;
  const auto body = body_for(h, false);
  const Model m = load_llama2c(write_checkpoint("cls.bin", h, body));
  EXPECT_FALSE(m.config.tied_embeddings);
  EXPECT_NE(m.output.data, m.token_embedding.data);
  // The classifier is the last vocab*dim floats, after the skipped RoPE tables.
  const auto* cls = static_cast<const float*>(m.output.data);
  EXPECT_FLOAT_EQ(cls[0], body[body.size() - 11 * 16]);
  EXPECT_FLOAT_EQ(static_cast<const float*>(m.token_embedding.data)[5], body[5]);
  // wk of layer 1 starts after embedding, rms_att, wq (2 layers), wk of layer 0.
  const size_t wk1 = 11 * 16 + 2 * 16 + 2 * 16 * 16 + 8 * 16;
  EXPECT_FLOAT_EQ(static_cast<const float*>(m.layers[1].wk.data)[0], body[wk1]);
  EXPECT_EQ(m.layers[1].wk.rows, 8);
  EXPECT_EQ(m.layers[1].w_down.rows, 16);
  EXPECT_EQ(m.layers[1].w_down.cols, 24);
  EXPECT_FLOAT_EQ(m.final_norm[0], body[body.size() - 11 * 16 - 8 * 4 - 16]);
}

TEST(Llama2c, SharedClassifierWithOrWithoutRopeTables) {
  // The legacy RoPE tables after the final norm are optional (readers skip them): both files
  // give the same model, with the classifier shared with the token embedding (vocab > 0).
  Header h;
  const auto with_body = body_for(h, true), without_body = body_for(h, false);
  const int64_t head = h.dim / h.n_heads;
  ASSERT_EQ(with_body.size(), without_body.size() + static_cast<size_t>(h.seq_len * head));
  const Model with = load_llama2c(write_checkpoint("with.bin", h, with_body));
  const Model without = load_llama2c(write_checkpoint("without.bin", h, without_body));
  for (const Model* m : {&with, &without}) {
    EXPECT_TRUE(m->config.tied_embeddings);
    EXPECT_EQ(m->output.data, m->token_embedding.data);
    EXPECT_EQ(m->config.vocab_size, h.vocab);
    EXPECT_EQ(m->config.seq_len, h.seq_len);
    EXPECT_FLOAT_EQ(static_cast<const float*>(m->token_embedding.data)[5], without_body[5]);
    // The final norm is the last dim floats before the (optional) tables.
    EXPECT_FLOAT_EQ(m->final_norm[0], without_body[without_body.size() - static_cast<size_t>(h.dim)]);
    EXPECT_FLOAT_EQ(m->final_norm[h.dim - 1], without_body.back());
  }
}

TEST(Llama2c, BadHeaderFieldsAreNamed) {
  struct Case {
    Header h;
    const char* field;
  };
  std::vector<Case> cases;
  auto add = [&](auto mutate, const char* field) {
    Header h;
    mutate(h);
    cases.push_back({h, field});
  };
  add([](Header& h) { h.dim = 0; }, "dim");
  add([](Header& h) { h.dim = -5; }, "dim");
  add([](Header& h) { h.hidden_dim = 1 << 30; }, "hidden_dim");
  add([](Header& h) { h.n_layers = 0; }, "n_layers");
  add([](Header& h) { h.n_heads = 0; }, "n_heads");
  add([](Header& h) { h.n_heads = 3; }, "n_heads");          // 16 % 3 != 0
  add([](Header& h) { h.n_kv_heads = 3; }, "n_kv_heads");    // 4 % 3 != 0
  add([](Header& h) { h.n_kv_heads = 8; }, "n_kv_heads");    // more than n_heads
  add([](Header& h) { h.vocab = 0; }, "vocab_size");
  add([](Header& h) { h.vocab = INT32_MIN; }, "vocab_size");
  add([](Header& h) { h.seq_len = 0; }, "seq_len");
  add([](Header& h) { h.n_heads = 16; h.n_kv_heads = 16; }, "head size");  // head size 1 is odd
  for (const auto& c : cases) {
    const auto path = write_checkpoint("bad.bin", c.h, std::vector<float>(64, 0.0f));
    const std::string msg = error_of(path);
    EXPECT_NE(msg.find(c.field), std::string::npos) << "expected '" << c.field << "' in: " << msg;
  }
}

TEST(Llama2c, TruncatedOrPaddedFilesAreRejected) {
  Header h;
  const auto body = body_for(h, true);
  for (const size_t cut : {size_t{4}, size_t{1}, body.size() * 2, body.size() * 4 - 1}) {
    const std::string msg = error_of(write_checkpoint("cut.bin", h, body, cut));
    EXPECT_FALSE(msg.empty()) << cut;
  }
  EXPECT_NE(error_of(write_checkpoint("cut.bin", h, body, body.size() * 4 - 8)).find("truncated"), std::string::npos);
  EXPECT_NE(error_of(write_checkpoint("short.bin", h, {}, sizeof(Header) - 3)).find("header"), std::string::npos);
  auto padded = body;
  padded.push_back(0.0f);
  EXPECT_FALSE(error_of(write_checkpoint("pad.bin", h, padded)).empty());
  // The real file cut short.
  std::ifstream in(kModels + "/stories260K.bin", std::ios::binary);
  std::string real((std::istreambuf_iterator<char>(in)), {});
  const std::string path = turbokv::test::temp_path("llama2c_real_cut.bin");
  std::ofstream(path, std::ios::binary).write(real.data(), static_cast<std::streamsize>(real.size() / 2));
  EXPECT_NE(error_of(path).find("truncated"), std::string::npos);
  EXPECT_THROW(load_llama2c(kModels + "/does-not-exist.bin"), turbokv::Error);
  std::filesystem::remove(path);
}
