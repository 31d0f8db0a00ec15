// Random-weight GGUF files of every architecture the engine runs, written with llama.cpp's names,
// shapes and metadata keys (GgufWriter), with a small byte-level BPE vocabulary: the one writer of
// such files for the tests (tests/cli/test_generate_gguf.cpp, tests/engine/test_moe.cpp) and,
// through the `random_gguf` helper (random_gguf_main.cpp), for the end-to-end tests that serve
// each family (tests/e2e/family_serving.test.mjs).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "engine/model/gguf.hpp"

namespace turbokv::test {

// 256 byte symbols, 4 merges, 2 control tokens (BOS, EOS).
constexpr int kRandomGgufVocab = 256 + 4 + 2;

struct RandomGgufShape {
  std::string arch;  // llama, qwen2, qwen3, qwen3moe, gemma2, gemma3, olmo2, granite, phi3
  int dim, hidden, layers, heads, kv_heads, head_dim;
  bool tied;
  bool rope_freqs;  // Llama 3 rope_freqs.weight
  engine::GgmlType type;
  int vocab = kRandomGgufVocab;
  bool keep_values = true;  // keep the source floats (small models only)
  int window = 0;           // > 0: attention.sliding_window (Gemma, Mistral, Phi-3)
  int context = 512;
  int experts = 4, experts_used = 2;  // qwen3moe: experts of `hidden` rows each
  // qwen3moe: write expert_feed_forward_length (without it llama.cpp takes feed_forward_length /
  // expert_used_count; feed_forward_length is otherwise a dense width the experts do not use).
  bool expert_width_key = true;
  std::string chat_template = {};     // tokenizer.chat_template, when not empty
  // User-defined tokens (matched whole in text, decoded as written), in the vocabulary after the
  // merges: a test can make the model emit a whole string with one forced token.
  std::vector<std::string> user_tokens = {};
  std::vector<std::string> left_out = {};  // tensors not written: a file that lacks them
};

struct RandomGguf {
  std::string path;
  std::map<std::string, std::vector<float>> values;  // source floats of each tensor
};

bool is_gemma(const std::string& arch);

// The byte-level BPE vocabulary of these files ("gpt2" model, pre-tokenizer `pre`): the 256 byte
// symbols, a few merges, `user_tokens`, unused padding up to `vocab`, two control tokens last.
void add_bpe_vocab(engine::GgufWriter& w, const std::string& pre, bool with_bos, int vocab,
                   const std::vector<std::string>& user_tokens = {});

// The file's metadata and tensors, to change before writing (tests of bad files); weights
// N(0, 1/fan-in) from `seed`, norms near 1. `values` (when given and s.keep_values) receives
// each tensor's source floats.
engine::GgufWriter random_gguf_writer(const RandomGgufShape& s, uint32_t seed,
                                      std::map<std::string, std::vector<float>>* values = nullptr);

// random_gguf_writer's file, written to `path`.
RandomGguf write_random_gguf(const RandomGgufShape& s, const std::string& path, uint32_t seed);

// The small served shape of each architecture (head_dim 16-32, 2 layers; gemma3 6 layers of
// head_dim 256 with a window of 4), in F32 weights: what random_gguf writes for a family name.
RandomGgufShape served_shape(const std::string& arch);

}  // namespace turbokv::test
