#include "engine/eval/llama_logits_file.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "turbokv/error.hpp"

namespace turbokv::engine {

namespace {

// The floor below the best logit that a record resolves: 16 nats, as llama.cpp.
constexpr float kLogitRange = 16.0f;

void put_float(uint16_t* out, float v) { std::memcpy(out, &v, sizeof v); }

float get_float(const uint16_t* in) {
  float v;
  std::memcpy(&v, in, sizeof v);
  return v;
}

}  // namespace

size_t llama_logits_record_size(int n_vocab) { return 2 * ((static_cast<size_t>(n_vocab) + 1) / 2) + 4; }

std::vector<uint16_t> encode_llama_logits_record(std::span<const float> logits) {
  if (logits.empty()) throw Error("llama logits record: no logits");
  const auto [lo, hi] = std::minmax_element(logits.begin(), logits.end());
  const float max_logit = *hi;
  const float min_logit = std::max(*lo, max_logit - kLogitRange);
  double sum_exp = 0.0;  // in float terms of each logit, double sum: as llama.cpp
  for (const float l : logits) sum_exp += std::exp(l - max_logit);
  const float log_sum_exp = static_cast<float>(std::log(sum_exp));
  const float scale = (max_logit - min_logit) / 65535.0f;
  std::vector<uint16_t> record(llama_logits_record_size(static_cast<int>(logits.size())), 0);
  put_float(record.data(), scale);
  put_float(record.data() + 2, min_logit - max_logit - log_sum_exp);
  if (scale > 0.0f) {
    const float inv_scale = 1.0f / scale;
    for (size_t i = 0; i < logits.size(); ++i) {
      if (logits[i] <= min_logit) continue;
      const long q = std::lround(inv_scale * (logits[i] - min_logit));
      record[4 + i] = static_cast<uint16_t>(std::clamp(q, 0L, 65535L));
    }
  }
  return record;
}

std::vector<double> decode_llama_logits_record(std::span<const uint16_t> record, int n_vocab) {
  if (n_vocab < 1 || record.size() != llama_logits_record_size(n_vocab)) {
    throw Error(fmt::format("llama logits record: {} values for a vocabulary of {}", record.size(), n_vocab));
  }
  const double scale = get_float(record.data()), floor = get_float(record.data() + 2);
  std::vector<double> log_probs(static_cast<size_t>(n_vocab));
  for (size_t i = 0; i < log_probs.size(); ++i) log_probs[i] = floor + scale * record[4 + i];
  return log_probs;
}

LlamaLogitsWriter::LlamaLogitsWriter(const std::string& path, int n_ctx, int n_vocab, std::span<const int> tokens)
    : path_(path), out_(path, std::ios::binary | std::ios::trunc), n_vocab_(n_vocab) {
  if (!out_) throw Error(fmt::format("cannot create logits file '{}'", path));
  if (n_ctx < 2 || n_vocab < 1) throw Error(fmt::format("logits file: bad n_ctx {} or n_vocab {}", n_ctx, n_vocab));
  const size_t n_chunk = tokens.size() / static_cast<size_t>(n_ctx);
  expected_ = n_chunk * static_cast<size_t>(n_ctx - 1 - n_ctx / 2);
  const int32_t header[3] = {n_ctx, n_vocab, static_cast<int32_t>(n_chunk)};
  out_.write("_logits_", 8);
  out_.write(reinterpret_cast<const char*>(header), sizeof header);
  const std::vector<int32_t> ids(tokens.begin(), tokens.begin() + static_cast<std::ptrdiff_t>(n_chunk * n_ctx));
  out_.write(reinterpret_cast<const char*>(ids.data()), static_cast<std::streamsize>(ids.size() * sizeof(int32_t)));
}

void LlamaLogitsWriter::add(std::span<const float> logits) {
  if (logits.size() != static_cast<size_t>(n_vocab_)) {
    throw Error(fmt::format("logits file: {} logits for a vocabulary of {}", logits.size(), n_vocab_));
  }
  if (written_ == expected_) throw Error(fmt::format("logits file: more than the {} scored positions", expected_));
  const std::vector<uint16_t> record = encode_llama_logits_record(logits);
  out_.write(reinterpret_cast<const char*>(record.data()), static_cast<std::streamsize>(record.size() * 2));
  ++written_;
}

void LlamaLogitsWriter::finish() {
  if (written_ != expected_) {
    throw Error(fmt::format("logits file '{}': {} of {} scored positions written", path_, written_, expected_));
  }
  out_.flush();
  if (!out_) throw Error(fmt::format("error writing logits file '{}'", path_));
}

}  // namespace turbokv::engine
