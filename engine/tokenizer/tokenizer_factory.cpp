#include "engine/tokenizer/tokenizer_factory.hpp"

#include <fmt/format.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "engine/tokenizer/bpe_tokenizer.hpp"
#include "engine/model/gguf.hpp"
#include "turbokv/error.hpp"

namespace turbokv::engine {

namespace {

bool is_gguf(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  char magic[4] = {};
  in.read(magic, 4);
  return in.gcount() == 4 && std::memcmp(magic, "GGUF", 4) == 0;
}

std::string spaces_from_sentencepiece(const std::string& piece) {
  static const std::string kSpace = "\xE2\x96\x81";  // U+2581 LOWER ONE EIGHTH BLOCK
  std::string out;
  for (size_t i = 0; i < piece.size();) {
    if (piece.compare(i, kSpace.size(), kSpace) == 0) {
      out += ' ';
      i += kSpace.size();
    } else {
      out += piece[i++];
    }
  }
  return out;
}

}  // namespace

std::unique_ptr<Tokenizer> load_tokenizer_from_gguf(const GgufFile& gguf) {
  const std::string kind = gguf.get_string("tokenizer.ggml.model");
  if (kind == "gpt2") return BpeTokenizer::from_gguf(gguf);  // checks the vocabulary itself
  if (kind != "llama") {
    throw Error(fmt::format("GGUF '{}': tokenizer.ggml.model '{}' is not supported (llama, gpt2)", gguf.path(), kind));
  }
  check_gguf_vocabulary(gguf);
  auto pieces = gguf.get_string_array("tokenizer.ggml.tokens");
  for (auto& p : pieces) p = spaces_from_sentencepiece(p);
  std::vector<float> scores = gguf.has("tokenizer.ggml.scores") ? gguf.get_float_array("tokenizer.ggml.scores")
                                                                : std::vector<float>(pieces.size(), 0.0f);
  if (scores.size() != pieces.size()) {
    throw Error(fmt::format("GGUF '{}': {} tokenizer scores for {} tokens", gguf.path(), scores.size(), pieces.size()));
  }
  const int64_t bos = gguf.get_int_or("tokenizer.ggml.bos_token_id", 1);
  const int64_t eos = gguf.get_int_or("tokenizer.ggml.eos_token_id", 2);
  const auto n = static_cast<int64_t>(pieces.size());
  if (bos < 0 || bos >= n || eos < 0 || eos >= n) {
    throw Error(fmt::format("GGUF '{}': bos/eos token ids {}/{} outside the vocabulary of {}", gguf.path(), bos, eos, n));
  }
  // Gemma 2/3 GGUFs say false: their text has no dummy-prefix space.
  const bool dummy_prefix = gguf.has("tokenizer.ggml.add_space_prefix") ? gguf.get_bool("tokenizer.ggml.add_space_prefix")
                                                                         : true;
  std::vector<int32_t> types;
  if (gguf.has("tokenizer.ggml.token_type")) {
    for (const int64_t t : gguf.get_int_array("tokenizer.ggml.token_type")) types.push_back(static_cast<int32_t>(t));
  }
  std::vector<int> end_ids;
  if (const int64_t eot = gguf.get_int_or("tokenizer.ggml.eot_token_id", -1); eot >= 0) {
    end_ids.push_back(static_cast<int>(eot));  // inside the vocabulary: check_gguf_vocabulary
  }
  return std::make_unique<SentencePieceTokenizer>(std::move(pieces), std::move(scores), static_cast<int>(bos),
                                                  static_cast<int>(eos), dummy_prefix, std::move(types),
                                                  std::move(end_ids));
}

std::unique_ptr<Tokenizer> load_tokenizer_file(const std::string& path, int expected_vocab) {
  if (is_gguf(path)) {
    auto tok = load_tokenizer_from_gguf(GgufFile::open(path));
    if (expected_vocab > 0 && tok->vocab_size() != expected_vocab) {
      throw Error(fmt::format("tokenizer '{}' has {} tokens, expected {}", path, tok->vocab_size(), expected_vocab));
    }
    return tok;
  }
  return load_llama2c_tokenizer(path, expected_vocab);
}

std::unique_ptr<Tokenizer> load_tokenizer_for_model(const Model& model, const std::string& path) {
  std::unique_ptr<Tokenizer> tok;
  if (!path.empty()) {
    tok = load_tokenizer_file(path, model.format == "llama2c" ? model.config.vocab_size : 0);
  } else if (model.format == "gguf") {
    tok = load_tokenizer_from_gguf(GgufFile::open(model.path));
  } else {
    const auto next_to = std::filesystem::path(model.path).parent_path() / "tok512.bin";
    if (!std::filesystem::exists(next_to)) {
      throw Error(fmt::format("no tokenizer given and '{}' does not exist (use --tokenizer)", next_to.string()));
    }
    tok = load_llama2c_tokenizer(next_to.string(), model.config.vocab_size);
  }
  // GGUF vocabularies may be padded in the embedding (more rows than tokens), never the reverse.
  if (tok->vocab_size() > model.config.vocab_size) {
    throw Error(fmt::format("tokenizer has {} tokens but the model's vocabulary is {}", tok->vocab_size(),
                            model.config.vocab_size));
  }
  return tok;
}

}  // namespace turbokv::engine
