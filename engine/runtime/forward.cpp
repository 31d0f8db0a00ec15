#include "engine/runtime/forward.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <numeric>

#include "turbokv/error.hpp"

namespace turbokv::engine {

Forward::Forward(const Model& model, ThreadPool& pool, int max_chunk)
    : pool_(pool), max_chunk_(max_chunk), decoder_(model, pool, WeightProducts::chunk, pool.size()) {
  if (max_chunk_ < 1 || max_chunk_ > 4096) throw Error(fmt::format("Forward: max_chunk {} outside [1, 4096]", max_chunk_));
  decoder_.reserve(static_cast<size_t>(max_chunk_));
  rows_.resize(static_cast<size_t>(max_chunk_));
  std::iota(rows_.begin(), rows_.end(), size_t{0});
  logits_.resize(static_cast<size_t>(model.config.vocab_size));
}

template <typename AfterChunk>
void Forward::run_chunks(std::span<const int> tokens, std::span<KVCache* const> caches, AfterChunk after_chunk) {
  decoder_.check(tokens, caches, "Forward");  // all of it, before any chunk touches a cache
  for (size_t begin = 0; begin < tokens.size(); begin += static_cast<size_t>(max_chunk_)) {
    const size_t n = std::min(tokens.size() - begin, static_cast<size_t>(max_chunk_));
    const TokenRun run{tokens.subspan(begin, n), caches, caches[0]->size()};
    decoder_.run(std::span<const TokenRun>(&run, 1));
    after_chunk(begin, n);
  }
}

std::span<const float> Forward::run(std::span<const int> tokens, std::span<KVCache* const> caches) {
  size_t last_row = 0;
  run_chunks(tokens, caches, [&](size_t, size_t n) { last_row = n - 1; });
  decoder_.logits(std::span<const size_t>(&last_row, 1), logits_.data());
  return logits_;
}

void Forward::run_all_logits(std::span<const int> tokens, std::span<KVCache* const> caches,
                             std::span<float> all_logits) {
  const size_t vocab = logits_.size();
  if (all_logits.size() != tokens.size() * vocab) {
    throw Error(fmt::format("Forward::run_all_logits: logits buffer holds {} floats, need {}", all_logits.size(),
                            tokens.size() * vocab));
  }
  run_chunks(tokens, caches, [&](size_t begin, size_t n) {
    decoder_.logits(std::span<const size_t>(rows_.data(), n), all_logits.data() + begin * vocab);
  });
}

}  // namespace turbokv::engine
