#include "engine/runtime/batch_forward.hpp"

#include <fmt/format.h>

#include <limits>

#include "turbokv/error.hpp"

namespace turbokv::engine {

namespace {
constexpr size_t kNoLogits = std::numeric_limits<size_t>::max();
}

BatchForward::BatchForward(const Model& model, ThreadPool& pool, int attention_threads)
    : decoder_(model, pool, WeightProducts::row_by_row, attention_threads > 0 ? attention_threads : pool.size()) {}

void BatchForward::plan(std::span<const BatchEntry> entries) {
  const ModelConfig& c = decoder_.model().config;
  runs_.clear();
  for (size_t e = 0; e < entries.size(); ++e) {
    const BatchEntry& entry = entries[e];
    decoder_.check(entry.tokens, entry.caches, fmt::format("BatchForward: entry {}", e));
    size_t position = entry.caches[0]->size();
    for (size_t p = 0; p < e; ++p) {  // an earlier entry of the same sequence
      if (entries[p].caches[0] == entry.caches[0]) position = runs_[p].position + entries[p].tokens.size();
    }
    if (position + entry.tokens.size() > static_cast<size_t>(c.seq_len)) {
      throw Error(fmt::format("BatchForward: entry {} reaches position {}, past the model's context of {}", e,
                              position + entry.tokens.size(), c.seq_len));
    }
    runs_.push_back(TokenRun{entry.tokens, entry.caches, position});
  }
}

void BatchForward::run(std::span<const BatchEntry> entries) {
  plan(entries);
  logit_slot_.assign(entries.size(), kNoLogits);
  logit_rows_.assign(entries.size(), 0);
  wanted_rows_.clear();
  size_t first_row = 0;
  for (size_t e = 0; e < entries.size(); ++e) {
    const size_t n = entries[e].tokens.size();
    if (entries[e].want_logits || entries[e].all_logits) {
      // The entry's last logit_rows_[e] rows (all of them, or its last token's).
      logit_slot_[e] = wanted_rows_.size();
      logit_rows_[e] = entries[e].all_logits ? n : 1;
      for (size_t r = first_row + n - logit_rows_[e]; r < first_row + n; ++r) wanted_rows_.push_back(r);
    }
    first_row += n;
  }
  decoder_.run(runs_);
  logits_.resize(wanted_rows_.size() * static_cast<size_t>(decoder_.model().config.vocab_size));
  decoder_.logits(wanted_rows_, logits_.data());
}

std::span<const float> BatchForward::logits(size_t entry) const {
  const std::span<const float> rows = all_logits(entry);
  return rows.last(static_cast<size_t>(decoder_.model().config.vocab_size));
}

std::span<const float> BatchForward::all_logits(size_t entry) const {
  if (entry >= logit_slot_.size() || logit_slot_[entry] == kNoLogits) {
    throw Error(fmt::format("BatchForward: entry {} has no logits", entry));
  }
  const size_t vocab = static_cast<size_t>(decoder_.model().config.vocab_size);
  return std::span<const float>(logits_.data() + logit_slot_[entry] * vocab, logit_rows_[entry] * vocab);
}

}  // namespace turbokv::engine
