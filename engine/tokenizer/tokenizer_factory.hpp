// Picking the tokenizer for a model file.
#pragma once

#include <memory>
#include <string>

#include "engine/model/model.hpp"
#include "engine/tokenizer/tokenizer.hpp"

namespace turbokv::engine {

class GgufFile;

// Checks the vocabulary fields of a GGUF file (engine/model/gguf_vocab_check.cpp): tokenizer.ggml.tokens
// a non-empty string array; every tokenizer.ggml.*_token_id inside it (or -1, none); scores, if
// present, one finite float per token; token types, if present, one per token, each 0..6.
// Throws turbokv::Error naming the field. load_tokenizer_from_gguf and BpeTokenizer::from_gguf
// call it first.
void check_gguf_vocabulary(const GgufFile& gguf);

// The tokenizer a GGUF file's metadata describes: tokenizer.ggml.model "llama" ->
// SentencePieceTokenizer (U+2581 in pieces read as a space; token_type, add_space_prefix and
// eot_token_id honoured), "gpt2" -> BpeTokenizer.
// Throws turbokv::Error if the metadata is missing or names another model.
std::unique_ptr<Tokenizer> load_tokenizer_from_gguf(const GgufFile& gguf);

// A tokenizer file given by path: GGUF (by magic) or llama2.c tokenizer.bin (expected_vocab as
// in load_llama2c_tokenizer).
std::unique_ptr<Tokenizer> load_tokenizer_file(const std::string& path, int expected_vocab = 0);

// The tokenizer for `model`: `path` if not empty; else, for a GGUF model, the one in the file;
// for a llama2.c checkpoint, tok512.bin in the checkpoint's folder. Its vocabulary must match
// the model's (throws turbokv::Error otherwise).
std::unique_ptr<Tokenizer> load_tokenizer_for_model(const Model& model, const std::string& path = "");

}  // namespace turbokv::engine
