// What the scheduler and API tests share: the kjv model with its tokenizer (loaded once per test
// binary) and the small scheduler every one of them starts from (2 threads, pages of 16 tokens so
// expectations can count in pages), which each test then adjusts.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

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

// A greedy completion of `prompt` run to its end (60 s at most per event): its text and usage, or
// why it was refused or failed.
struct GreedyResult {
  std::string text;
  server::Usage usage;
  std::string error;
};

inline GreedyResult run(server::Scheduler& s, const std::vector<int>& prompt, int max_tokens = 24) {
  server::GenerationRequest g;
  g.prompt = prompt;
  g.max_tokens = max_tokens;
  g.sampling.temperature = 0;
  auto h = std::make_shared<server::RequestHandle>();
  std::string why;
  GreedyResult r;
  if (s.submit(std::move(g), h, &why) != server::Scheduler::Admission::accepted) {
    r.error = why;
    return r;
  }
  server::StreamEvent ev;
  for (;;) {
    if (!h->wait_next(ev, std::chrono::seconds(60))) {
      r.error = "timeout";
      return r;
    }
    if (ev.kind == server::StreamEvent::Kind::text) r.text += ev.text;
    if (ev.kind == server::StreamEvent::Kind::failed) {
      r.error = ev.error;
      return r;
    }
    if (ev.kind == server::StreamEvent::Kind::finished) {
      r.usage = ev.usage;
      return r;
    }
  }
}

}  // namespace turbokv::test
