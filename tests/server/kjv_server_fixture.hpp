// What the scheduler and API tests share: the kjv model with its tokenizer (loaded once per test
// binary) and the small scheduler every one of them starts from (2 threads, pages of 16 tokens so
// expectations can count in pages), which each test then adjusts.
#pragma once

#include <memory>
#include <string>

#include "engine/model/model.hpp"
#include "engine/tokenizer/tokenizer.hpp"
#include "engine/tokenizer/tokenizer_factory.hpp"
#include "server/scheduling/scheduler.hpp"
#include "turbokv/prompt_cache.hpp"

namespace turbokv::test {

struct Kjv {
  engine::Model model = engine::load_model(std::string(TURBOKV_MODELS_DIR) + "/kjv-llama-3M.bin");
  std::unique_ptr<engine::Tokenizer> tok = engine::load_tokenizer_for_model(model);
};

inline const Kjv& kjv() {
  static const Kjv k;
  return k;
}

inline server::SchedulerOptions small_scheduler(const std::string& cache, size_t kv_budget) {
  server::SchedulerOptions o;
  o.cache = parse_cache_config(cache);
  o.kv_budget = kv_budget;
  o.threads = 2;
  o.page_tokens = 16;
  return o;
}

}  // namespace turbokv::test
