// `convert`: stories260K (llama2.c) to GGUF at F32, F16 and Q8_0. The file loads as a model,
// every tensor matches the checkpoint (F32 exactly, F16/Q8_0 within their rounding), matrices
// whose rows do not fill Q8_0 blocks fall back to F16, and the vocabulary survives.
#include <gtest/gtest.h>

#include "skip_policy.hpp"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "engine/model/gguf.hpp"
#include "engine/model/gguf_convert.hpp"
#include "engine/model/model.hpp"
#include "engine/tokenizer/tokenizer.hpp"
#include "engine/tokenizer/tokenizer_factory.hpp"
#include "turbokv/error.hpp"

namespace turbokv::engine {
namespace {

const std::string kModels = TURBOKV_MODELS_DIR;
const std::string kCheckpoint = kModels + "/stories260K.bin";
const std::string kTokenizer = kModels + "/tok512.bin";

bool have_model() { return std::filesystem::exists(kCheckpoint) && std::filesystem::exists(kTokenizer); }

std::string out_path(const std::string& name) { return testing::TempDir() + "turbokv_test_convert_" + name; }

std::vector<float> rows_of(const WeightMatrix& m) {
  std::vector<float> out(static_cast<size_t>(m.rows * m.cols));
  for (int64_t r = 0; r < m.rows; ++r) dequantize_row(m, r, out.data() + r * m.cols);
  return out;
}

// Compares a converted matrix with its source, with the error bound of the stored type.
void expect_matrix_matches(const GgufFile& f, const std::string& name, const WeightMatrix& source) {
  SCOPED_TRACE(name);
  const auto* t = f.find_tensor(name);
  ASSERT_NE(t, nullptr);
  ASSERT_EQ(t->shape, (std::vector<int64_t>{source.cols, source.rows}));
  const auto want = rows_of(source);
  const auto got = rows_of(f.matrix(name));
  for (size_t i = 0; i < want.size(); ++i) {
    float bound = 0.0f;
    if (t->type == GgmlType::F16) {
      bound = std::fabs(want[i]) * 0x1p-11f + 0x1p-25f;
    } else if (t->type == GgmlType::Q8_0) {
      const size_t block = i / 32 * 32;
      float block_max = 0.0f;
      for (size_t j = block; j < block + 32; ++j) block_max = std::max(block_max, std::fabs(want[j]));
      bound = block_max / 254.0f + block_max * 0x1p-10f;
    } else {
      ASSERT_EQ(t->type, GgmlType::F32);
    }
    ASSERT_LE(std::fabs(got[i] - want[i]), bound) << "element " << i;
  }
}

void expect_vector_matches(const GgufFile& f, const std::string& name, const std::vector<float>& source) {
  const auto* t = f.find_tensor(name);
  ASSERT_NE(t, nullptr) << name;
  EXPECT_EQ(t->type, GgmlType::F32) << name;
  ASSERT_EQ(t->nbytes, source.size() * 4) << name;
  EXPECT_EQ(std::memcmp(t->data, source.data(), t->nbytes), 0) << name;
}

class Convert : public testing::TestWithParam<std::string> {};

TEST_P(Convert, Stories260KRoundTrips) {
  if (!have_model()) TURBOKV_SKIP_MISSING() << "stories260K.bin / tok512.bin not in " << kModels;
  const std::string type_name_arg = GetParam();
  const std::string path = out_path(type_name_arg + ".gguf");
  ConvertOptions options;
  options.type = parse_weight_type(type_name_arg);
  options.tokenizer_path = kTokenizer;
  const ConvertSummary summary = convert_llama2c_to_gguf(kCheckpoint, path, options);
  EXPECT_EQ(summary.n_tensors, 1 + 5 * 9 + 1);  // embedding, 5 layers, final norm; output is tied
  // With Q8_0, the five ffn_down matrices (rows of 172) cannot be stored in blocks of 32.
  EXPECT_EQ(summary.n_fallback, options.type == GgmlType::Q8_0 ? 5 : 0);

  const Model source = load_llama2c(kCheckpoint);
  {
    const GgufFile f = GgufFile::open(path);
    EXPECT_EQ(f.get_string("general.architecture"), "llama");
    EXPECT_EQ(f.get_int("llama.embedding_length"), 64);
    EXPECT_EQ(f.get_int("llama.feed_forward_length"), 172);
    EXPECT_EQ(f.get_int("llama.block_count"), 5);
    EXPECT_EQ(f.get_int("llama.attention.head_count"), 8);
    EXPECT_EQ(f.get_int("llama.attention.head_count_kv"), 4);
    EXPECT_EQ(f.get_int("llama.rope.dimension_count"), 8);
    EXPECT_EQ(f.get_int("llama.context_length"), 512);
    EXPECT_FLOAT_EQ(static_cast<float>(f.get_float("llama.attention.layer_norm_rms_epsilon")), 1e-5f);
    EXPECT_EQ(f.get_float("llama.rope.freq_base"), 10000.0);
    EXPECT_EQ(f.get_string("tokenizer.ggml.model"), "llama");
    const auto tokens = f.get_string_array("tokenizer.ggml.tokens");
    const auto types = f.get_int_array("tokenizer.ggml.token_type");
    ASSERT_EQ(tokens.size(), 512u);
    ASSERT_EQ(types.size(), 512u);
    EXPECT_EQ(types[0], 2);  // <unk>
    EXPECT_EQ(types[1], 3);  // BOS
    EXPECT_EQ(types[2], 3);  // EOS
    EXPECT_EQ(tokens[3], "<0x00>");
    EXPECT_EQ(types[3], 6);
    EXPECT_EQ(f.find_tensor("output.weight"), nullptr);
    if (options.type == GgmlType::Q8_0) {
      EXPECT_EQ(f.find_tensor("blk.0.ffn_down.weight")->type, GgmlType::F16);
      EXPECT_EQ(f.find_tensor("blk.0.ffn_up.weight")->type, GgmlType::Q8_0);
    }

    expect_matrix_matches(f, "token_embd.weight", source.token_embedding);
    for (int l = 0; l < 5; ++l) {
      const auto& w = source.layers[static_cast<size_t>(l)];
      const std::string b = "blk." + std::to_string(l) + ".";
      expect_vector_matches(f, b + "attn_norm.weight", w.attn_norm);
      expect_vector_matches(f, b + "ffn_norm.weight", w.ffn_norm);
      expect_matrix_matches(f, b + "attn_q.weight", w.wq);
      expect_matrix_matches(f, b + "attn_k.weight", w.wk);
      expect_matrix_matches(f, b + "attn_v.weight", w.wv);
      expect_matrix_matches(f, b + "attn_output.weight", w.wo);
      expect_matrix_matches(f, b + "ffn_gate.weight", w.w_gate);
      expect_matrix_matches(f, b + "ffn_down.weight", w.w_down);
      expect_matrix_matches(f, b + "ffn_up.weight", w.w_up);
    }
    expect_vector_matches(f, "output_norm.weight", source.final_norm);

    // The SentencePiece vocabulary read back from the GGUF encodes as tokenizer.bin does.
    const auto from_bin = load_llama2c_tokenizer(kTokenizer, 512);
    const auto from_gguf = load_tokenizer_from_gguf(f);
    for (const char* text : {"Once upon a time", "  Lily's big, red ball!\n", "héllo ✓"}) {
      EXPECT_EQ(from_gguf->encode(text, true), from_bin->encode(text, true)) << text;
    }
    for (int id = 0; id < 512; ++id) ASSERT_EQ(from_gguf->decode(id), from_bin->decode(id)) << id;
  }

  // The model loader takes the file and reads the same hyperparameters.
  const Model converted = load_gguf(path);
  EXPECT_EQ(converted.config.dim, source.config.dim);
  EXPECT_EQ(converted.config.hidden_dim, source.config.hidden_dim);
  EXPECT_EQ(converted.config.n_layers, source.config.n_layers);
  EXPECT_EQ(converted.config.n_heads, source.config.n_heads);
  EXPECT_EQ(converted.config.n_kv_heads, source.config.n_kv_heads);
  EXPECT_EQ(converted.config.head_dim, source.config.head_dim);
  EXPECT_EQ(converted.config.vocab_size, source.config.vocab_size);
  EXPECT_EQ(converted.config.seq_len, source.config.seq_len);
  EXPECT_EQ(converted.config.rope_neox, false);
  EXPECT_TRUE(converted.config.tied_embeddings);
  std::remove(path.c_str());
}

INSTANTIATE_TEST_SUITE_P(Types, Convert, testing::Values("f32", "f16", "q8_0"));

TEST(Convert, EveryTypeNameParses) {
  for (uint32_t raw = 0; raw < 64; ++raw) {
    if (!is_supported_type(raw)) continue;
    std::string name = type_name(static_cast<GgmlType>(raw));
    for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    EXPECT_EQ(parse_weight_type(name), static_cast<GgmlType>(raw)) << name;
  }
  EXPECT_THROW(parse_weight_type("q4_K"), Error);
  EXPECT_THROW(parse_weight_type("iq2_xxs"), Error);
}

// stories260K's rows (64 and 172 values) fill no 256-value super-block: Q4_K falls back to Q5_0
// where rows fill blocks of 32 (llama.cpp's choice), and to F16 for ffn_down's 172.
TEST(Convert, SuperBlockTypesFallBackLikeLlamaCpp) {
  if (!have_model()) TURBOKV_SKIP_MISSING() << "stories260K.bin / tok512.bin not in " << kModels;
  const std::string path = out_path("q4_k.gguf");
  ConvertOptions options;
  options.type = GgmlType::Q4_K;
  options.tokenizer_path = kTokenizer;
  const ConvertSummary summary = convert_llama2c_to_gguf(kCheckpoint, path, options);
  EXPECT_EQ(summary.n_fallback, 1 + 5 * 7);
  {
    const GgufFile f = GgufFile::open(path);
    EXPECT_EQ(f.get_int("general.file_type"), 14);  // LLAMA_FTYPE_MOSTLY_Q4_K_S
    EXPECT_EQ(f.find_tensor("token_embd.weight")->type, GgmlType::Q5_0);
    EXPECT_EQ(f.find_tensor("blk.0.attn_q.weight")->type, GgmlType::Q5_0);
    EXPECT_EQ(f.find_tensor("blk.0.ffn_down.weight")->type, GgmlType::F16);
  }
  const Model m = load_gguf(path);
  EXPECT_EQ(m.config.dim, 64);
  std::remove(path.c_str());
}

// A NaN or infinite block scale makes the whole block NaN / inf: the loader refuses the file
// and says where, instead of producing NaN logits later.
TEST(ConvertErrors, NonFiniteScaleInAFileIsAnError) {
  if (!have_model()) TURBOKV_SKIP_MISSING() << "stories260K.bin / tok512.bin not in " << kModels;
  const std::string path = out_path("nan_scale.gguf");
  ConvertOptions options;
  options.type = GgmlType::Q8_0;
  options.tokenizer_path = kTokenizer;
  convert_llama2c_to_gguf(kCheckpoint, path, options);
  size_t at = 0;
  {
    const GgufFile f = GgufFile::open(path);
    at = f.data_offset() + f.find_tensor("blk.1.attn_q.weight")->offset + 2 * 34;  // row 1 (2 blocks a row), block 0
  }
  for (const auto& [bits, what] : {std::pair<uint16_t, std::string>{0x7E00, "NaN"}, {0xFC00, "infinite"}}) {
    {
      std::FILE* file = std::fopen(path.c_str(), "r+b");
      ASSERT_NE(file, nullptr);
      ASSERT_EQ(std::fseek(file, static_cast<long>(at), SEEK_SET), 0);
      ASSERT_EQ(std::fwrite(&bits, 2, 1, file), 1u);
      std::fclose(file);
    }
    try {
      load_gguf(path);
      ADD_FAILURE() << "a " << what << " scale was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("tensor blk.1.attn_q.weight: Q8_0 row 1 block 0: scale is " + what),
                std::string::npos)
          << e.what();
    }
  }
  std::remove(path.c_str());
}

TEST(ConvertErrors, BadArgumentsAreErrors) {
  EXPECT_THROW(parse_weight_type("q4_2"), Error);  // a type ggml removed
  EXPECT_EQ(parse_weight_type("q8_0"), GgmlType::Q8_0);
  ConvertOptions options;
  EXPECT_THROW(convert_llama2c_to_gguf(out_path("missing.bin"), out_path("x.gguf"), options), Error);
  if (!have_model()) return;
  options.tokenizer_path = out_path("no_tokenizer.bin");
  EXPECT_THROW(convert_llama2c_to_gguf(kCheckpoint, out_path("x.gguf"), options), Error);
  options.tokenizer_path = kModels + "/llama2-tokenizer.bin";  // 32000 tokens, the model has 512
  EXPECT_THROW(convert_llama2c_to_gguf(kCheckpoint, out_path("x.gguf"), options), Error);
}

TEST(ConvertErrors, CommandLineWritesAFile) {
  const std::string tool = TURBOKV_TOOL_PATH;
  if (!have_model() || tool.empty() || !std::filesystem::exists(tool)) TURBOKV_SKIP_MISSING() << "turbokv tool not built";
  const std::string path = out_path("cli.gguf");
  const std::string command = "'" + tool + "' convert '" + kCheckpoint + "' '" + path + "' --type q8_0 > /dev/null";
  ASSERT_EQ(std::system(command.c_str()), 0);
  const GgufFile f = GgufFile::open(path);
  EXPECT_EQ(f.find_tensor("blk.4.attn_q.weight")->type, GgmlType::Q8_0);
  EXPECT_EQ(f.get_int("general.file_type"), 7);
  std::remove(path.c_str());
  const std::string bad = "'" + tool + "' convert '" + kCheckpoint + "' '" + path + "' --type iq2_xxs 2> /dev/null";
  EXPECT_NE(std::system(bad.c_str()), 0);
}

}  // namespace
}  // namespace turbokv::engine
