#include "engine/model/gguf_convert.hpp"

#include <fmt/format.h>

#include <cctype>
#include <cstring>
#include <filesystem>

#include "engine/model/gguf.hpp"
#include "engine/model/model.hpp"
#include "engine/tokenizer/tokenizer.hpp"
#include "turbokv/error.hpp"

namespace turbokv::engine {
namespace {

// llama.cpp's general.file_type values (LLAMA_FTYPE_*); a K-quant written uniformly is the
// "_S" (small) mix, the one without higher-precision tensors.
uint32_t file_type(GgmlType type) {
  switch (type) {
    case GgmlType::F32: return 0;
    case GgmlType::F16: return 1;
    case GgmlType::Q4_0: return 2;
    case GgmlType::Q4_1: return 3;
    case GgmlType::Q8_0: return 7;
    case GgmlType::Q5_0: return 8;
    case GgmlType::Q5_1: return 9;
    case GgmlType::Q2_K: return 10;
    case GgmlType::Q3_K: return 11;
    case GgmlType::Q4_K: return 14;
    case GgmlType::Q5_K: return 16;
    case GgmlType::Q6_K: return 18;
    case GgmlType::IQ4_NL: return 25;
    case GgmlType::IQ4_XS: return 30;
    case GgmlType::BF16: return 32;
  }
  throw Error(fmt::format("convert: cannot write matrices as {}", type_name(type)));
}

// The type a matrix is stored in when its rows do not fill whole blocks of `wanted`: for the
// 256-value super-block types, the 32-value type llama.cpp falls back to, when rows fill that;
// otherwise F16.
GgmlType storable_type(GgmlType wanted, int64_t cols) {
  if (cols % static_cast<int64_t>(block_size(wanted)) == 0) return wanted;
  GgmlType small = GgmlType::F16;
  switch (wanted) {
    case GgmlType::Q2_K:
    case GgmlType::Q3_K:
    case GgmlType::IQ4_XS: small = GgmlType::IQ4_NL; break;
    case GgmlType::Q4_K: small = GgmlType::Q5_0; break;
    case GgmlType::Q5_K: small = GgmlType::Q5_1; break;
    case GgmlType::Q6_K: small = GgmlType::Q8_0; break;
    default: break;
  }
  return cols % static_cast<int64_t>(block_size(small)) == 0 ? small : GgmlType::F16;
}

std::string find_tokenizer(const std::string& checkpoint, const std::string& given) {
  if (!given.empty()) return given;
  const auto folder = std::filesystem::path(checkpoint).parent_path();
  for (const char* name : {"tok512.bin", "tokenizer.bin"}) {
    const auto candidate = folder / name;
    if (std::filesystem::exists(candidate)) return candidate.string();
  }
  throw Error(fmt::format("convert: no tokenizer given and neither tok512.bin nor tokenizer.bin is next to '{}' "
                          "(use --tokenizer)", checkpoint));
}

std::string sentencepiece_spaces(const std::string& piece) {
  std::string out;
  for (char c : piece) {
    if (c == ' ') {
      out += "\xE2\x96\x81";  // U+2581, SentencePiece's visible space
    } else {
      out += c;
    }
  }
  return out;
}

bool is_byte_piece(const std::string& p) {
  return p.size() == 6 && p.starts_with("<0x") && p.back() == '>' && std::isxdigit(static_cast<unsigned char>(p[3])) &&
         std::isxdigit(static_cast<unsigned char>(p[4]));
}

std::vector<uint8_t> encode_matrix(const WeightMatrix& w, GgmlType type) {
  const size_t stride = row_bytes(type, w.cols);
  std::vector<uint8_t> bytes(stride * static_cast<size_t>(w.rows));
  std::vector<float> row(static_cast<size_t>(w.cols));
  for (int64_t r = 0; r < w.rows; ++r) {
    dequantize_row(w, r, row.data());
    quantize_row(type, row.data(), w.cols, bytes.data() + static_cast<size_t>(r) * stride);
  }
  return bytes;
}

std::vector<uint8_t> float_bytes(const std::vector<float>& v) {
  std::vector<uint8_t> bytes(v.size() * 4);
  if (!v.empty()) std::memcpy(bytes.data(), v.data(), bytes.size());
  return bytes;
}

}  // namespace

GgmlType parse_weight_type(const std::string& name) {
  std::string known;
  for (uint32_t raw = 0; raw < 64; ++raw) {
    if (!is_supported_type(raw)) continue;
    std::string lower = type_name(static_cast<GgmlType>(raw));
    for (char& ch : lower) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    if (lower == name) return static_cast<GgmlType>(raw);
    known += (known.empty() ? "" : ", ") + lower;
  }
  throw Error(fmt::format("unknown weight type '{}' ({})", name, known));
}

ConvertSummary convert_llama2c_to_gguf(const std::string& checkpoint, const std::string& output,
                                       const ConvertOptions& options) {
  const uint32_t ftype = file_type(options.type);
  const Model model = load_llama2c(checkpoint);
  const ModelConfig& c = model.config;
  ConvertSummary summary;
  summary.tokenizer_path = find_tokenizer(checkpoint, options.tokenizer_path);
  const auto tokenizer = load_llama2c_tokenizer(summary.tokenizer_path, c.vocab_size);

  GgufWriter w;
  w.set_string("general.architecture", "llama");
  w.set_string("general.name", std::filesystem::path(checkpoint).stem().string());
  w.set_uint32("general.file_type", ftype);
  if (block_size(options.type) > 1) w.set_uint32("general.quantization_version", 2);
  w.set_uint32("llama.context_length", static_cast<uint32_t>(c.seq_len));
  w.set_uint32("llama.embedding_length", static_cast<uint32_t>(c.dim));
  w.set_uint32("llama.block_count", static_cast<uint32_t>(c.n_layers));
  w.set_uint32("llama.feed_forward_length", static_cast<uint32_t>(c.hidden_dim));
  w.set_uint32("llama.attention.head_count", static_cast<uint32_t>(c.n_heads));
  w.set_uint32("llama.attention.head_count_kv", static_cast<uint32_t>(c.n_kv_heads));
  w.set_uint32("llama.rope.dimension_count", static_cast<uint32_t>(c.head_dim));
  w.set_float32("llama.rope.freq_base", c.rope_theta);
  w.set_float32("llama.attention.layer_norm_rms_epsilon", c.norm_eps);
  w.set_uint32("llama.vocab_size", static_cast<uint32_t>(c.vocab_size));

  std::vector<std::string> pieces;
  std::vector<float> scores;
  std::vector<int32_t> types;
  for (int id = 0; id < tokenizer->vocab_size(); ++id) {
    const std::string& piece = tokenizer->piece(id);
    pieces.push_back(sentencepiece_spaces(piece));
    scores.push_back(tokenizer->score(id));
    int32_t type = 1;  // normal
    if (id == 0) {
      type = 2;  // unknown
    } else if (id == tokenizer->bos_id() || id == tokenizer->eos_id()) {
      type = 3;  // control
    } else if (is_byte_piece(piece)) {
      type = 6;  // byte
    }
    types.push_back(type);
  }
  w.set_string("tokenizer.ggml.model", "llama");
  w.set_string_array("tokenizer.ggml.tokens", pieces);
  w.set_float32_array("tokenizer.ggml.scores", scores);
  w.set_int32_array("tokenizer.ggml.token_type", types);
  w.set_uint32("tokenizer.ggml.bos_token_id", static_cast<uint32_t>(tokenizer->bos_id()));
  w.set_uint32("tokenizer.ggml.eos_token_id", static_cast<uint32_t>(tokenizer->eos_id()));
  w.set_uint32("tokenizer.ggml.unknown_token_id", 0);
  w.set_bool("tokenizer.ggml.add_bos_token", true);
  w.set_bool("tokenizer.ggml.add_eos_token", false);
  w.set_bool("tokenizer.ggml.add_space_prefix", true);

  const auto add_matrix = [&](const std::string& name, const WeightMatrix& m) {
    const GgmlType type = storable_type(options.type, m.cols);
    if (type != options.type) ++summary.n_fallback;
    w.add_tensor(name, type, {m.cols, m.rows}, encode_matrix(m, type));
    ++summary.n_tensors;
  };
  const auto add_vector = [&](const std::string& name, const std::vector<float>& v) {
    w.add_tensor(name, GgmlType::F32, {static_cast<int64_t>(v.size())}, float_bytes(v));
    ++summary.n_tensors;
  };

  add_matrix("token_embd.weight", model.token_embedding);
  for (int l = 0; l < c.n_layers; ++l) {
    const LayerWeights& lw = model.layers[static_cast<size_t>(l)];
    const std::string b = fmt::format("blk.{}.", l);
    add_vector(b + "attn_norm.weight", lw.attn_norm);
    add_matrix(b + "attn_q.weight", lw.wq);
    add_matrix(b + "attn_k.weight", lw.wk);
    add_matrix(b + "attn_v.weight", lw.wv);
    add_matrix(b + "attn_output.weight", lw.wo);
    add_vector(b + "ffn_norm.weight", lw.ffn_norm);
    add_matrix(b + "ffn_gate.weight", lw.w_gate);
    add_matrix(b + "ffn_down.weight", lw.w_down);
    add_matrix(b + "ffn_up.weight", lw.w_up);
  }
  add_vector("output_norm.weight", model.final_norm);
  if (!c.tied_embeddings) add_matrix("output.weight", model.output);

  w.write(output);
  summary.file_bytes = static_cast<size_t>(std::filesystem::file_size(output));
  return summary;
}

}  // namespace turbokv::engine
