// llama2.c checkpoint + tokenizer.bin -> GGUF (architecture "llama"), what `turbokv convert` runs.
//
// Metadata uses llama.cpp's key names (llama.context_length, llama.embedding_length,
// llama.block_count, llama.feed_forward_length, llama.attention.head_count[_kv],
// llama.rope.dimension_count, llama.rope.freq_base, llama.attention.layer_norm_rms_epsilon,
// llama.vocab_size) and its SentencePiece vocabulary keys (tokenizer.ggml.model "llama", tokens
// with U+2581 for spaces, scores, token_type, bos/eos/unknown ids). Tensor names are llama.cpp's
// (token_embd, blk.N.attn_q, ..., output_norm; output only when the classifier is not shared).
// llama2.c rotates adjacent pairs, as GGUF's llama architecture does, so Q and K are stored as
// they are. Norm vectors stay F32; a matrix whose row length is not a multiple of the chosen
// type's block falls back as llama.cpp's quantizer does: a 256-value K-quant / IQ4_XS to a
// 32-value type (Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0, Q2_K / Q3_K / IQ4_XS -> IQ4_NL) when
// the rows fill that, else F16 (stories260K's hidden size 172 with Q8_0). Matrices are encoded
// with quantize_row's simple encoders, not llama-quantize's error-minimizing ones.
#pragma once

#include <string>

#include "engine/tensor/tensor_types.hpp"

namespace turbokv::engine {

struct ConvertOptions {
  GgmlType type = GgmlType::F32;  // the matrices' type: any type the engine reads
  std::string tokenizer_path;     // empty: tok512.bin, then tokenizer.bin, next to the checkpoint
};

struct ConvertSummary {
  int n_tensors = 0;
  int n_fallback = 0;  // matrices stored in a fallback type because their rows do not fill whole blocks
  size_t file_bytes = 0;
  std::string tokenizer_path;
};

// Throws turbokv::Error on a bad checkpoint, tokenizer or output path.
ConvertSummary convert_llama2c_to_gguf(const std::string& checkpoint, const std::string& output,
                                       const ConvertOptions& options);

// A supported type's name in lower case ("f32", "q8_0", "q4_k", "iq4_xs", ...) -> the type;
// throws turbokv::Error listing the names for anything else.
GgmlType parse_weight_type(const std::string& name);

}  // namespace turbokv::engine
