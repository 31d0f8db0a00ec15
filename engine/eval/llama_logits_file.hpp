// llama-perplexity's per-token distribution file (its --kl-divergence-base FILE, written by a
// run with that option and without --kl-divergence), so that `turbokv eval --logits-out` and
// llama.cpp write one format and one reader compares them (scripts/compare_llamacpp.py), and
// llama-perplexity itself can read turbokv's file with --kl-divergence.
//
// Layout (little-endian, as llama.cpp tools/perplexity writes it at commit 81ff7abe50b9):
//   char[8]  "_logits_"
//   int32    n_ctx, n_vocab, n_chunk
//   int32    tokens[n_chunk * n_ctx]      the token stream as given (before BOS replaced the
//                                         first token of each chunk)
//   then, for each chunk and each scored position i (ctx/2 <= i < ctx-1, in order), one record
//   of nv = 2 * ((n_vocab + 1) / 2) + 4 uint16:
//     float32  scale                      (max_logit - min_logit) / 65535
//     float32  min_log_prob               min_logit - max_logit - log(sum exp(logit - max_logit))
//     uint16   q[n_vocab]                 round((logit - min_logit) / scale) if logit > min_logit,
//                                         else 0; then zero padding up to nv
//   where min_logit is the smallest logit but at least max_logit - 16; a token's log-probability
//   is min_log_prob + scale * q (tokens 16 nats or more below the best all read as the floor).
#pragma once

#include <cstdint>
#include <fstream>
#include <span>
#include <string>
#include <vector>

namespace turbokv::engine {

// The record's length in uint16 for a vocabulary of n_vocab.
size_t llama_logits_record_size(int n_vocab);

// One position's record (llama_logits_record_size(logits.size()) values).
std::vector<uint16_t> encode_llama_logits_record(std::span<const float> logits);

// The log-probabilities a record stands for (n_vocab values).
std::vector<double> decode_llama_logits_record(std::span<const uint16_t> record, int n_vocab);

class LlamaLogitsWriter {
 public:
  // tokens: the n_chunk * n_ctx tokens of the chunks (a partial last chunk is not written).
  // Throws turbokv::Error if the file cannot be created.
  LlamaLogitsWriter(const std::string& path, int n_ctx, int n_vocab, std::span<const int> tokens);
  // One scored position's logits (n_vocab of them), in chunk order.
  void add(std::span<const float> logits);
  // Checks every scored position was added and the bytes reached the file; throws otherwise.
  void finish();

 private:
  std::string path_;
  std::ofstream out_;
  int n_vocab_;
  size_t expected_, written_ = 0;
};

}  // namespace turbokv::engine
