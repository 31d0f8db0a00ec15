#include "server/scheduling/scheduler.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <optional>

#include "engine/runtime/batch_forward.hpp"
#include "engine/runtime/sampler.hpp"
#include "server/prefix/prefix_cache.hpp"
#include "server/scheduling/step_cost.hpp"
#include "server/text/text_stream.hpp"
#include "turbokv/error.hpp"
#include "turbokv/thread_pool.hpp"

namespace turbokv::server {

struct Scheduler::Sequence {
  GenerationRequest request;
  std::shared_ptr<RequestHandle> handle;
  PromptCache cache;
  std::vector<KVCache*> layers;
  size_t reservation = 0;
  size_t fed = 0;                   // prompt tokens in the cache
  size_t cached = 0;                // of which restored from the prefix cache or the store
  size_t from_store = 0;            // of which restored from the shared store
  size_t from_disk = 0;             // of which restored from the disk tier
  std::vector<bool> in_store;       // per page boundary: the shared store already holds it
  std::vector<bool> in_disk;        // per page boundary: the disk tier already holds it
  // The prompt and generated tokens up to the last page boundary the answer crossed, encoded for
  // the disk tier and the shared store: queued when the sequence ends (the next turn of a chat
  // starts with them).
  std::optional<SharedPrefixes::Encoded> answer_prefix;
  std::vector<int> generated;       // sampled tokens (the last one not yet fed)
  std::vector<engine::TokenLogprob> prompt_logprobs;  // with request.prompt_logprobs, during prefill
  std::optional<engine::Sampler> sampler;
  std::optional<TextStream> text;
  std::vector<size_t> snapshot_at;  // page-aligned prompt positions to keep, ascending
  bool done = false;

  bool prefilling() const { return fed < request.prompt.size(); }
};

struct Scheduler::Impl {
  Impl(const engine::Model& model, int threads, size_t page_tokens)
      : pool(threads), forward(model, pool), prefixes(page_tokens) {}
  ThreadPool pool;
  engine::BatchForward forward;
  PrefixCache prefixes;
  StepCost cost;
};

struct Scheduler::Batch {
  std::vector<engine::BatchEntry> entries;
  std::vector<Sequence*> owner;  // per entry
  size_t decode_rows = 0, prompt_rows = 0;
  size_t prompt_budget = 0;      // prompt rows the step may carry (its first chunk goes in regardless)
  bool scoring = false;          // some chunk wants every row's logits
};

namespace {

CacheConfig with_pages(CacheConfig config, size_t page_tokens) {
  config.dense_page_tokens = page_tokens;
  config.tq.page_tokens = page_tokens;
  return config;
}

}  // namespace

int Scheduler::context_for(const engine::Model& model, int ctx) {
  if (ctx < 0) throw Error(fmt::format("--ctx must be >= 0, got {}", ctx));
  return ctx == 0 ? model.config.seq_len : std::min(ctx, model.config.seq_len);
}

Scheduler::Scheduler(const engine::Model& model, const engine::Tokenizer& tokenizer, SchedulerOptions options)
    : model_(model),
      tokenizer_(tokenizer),
      options_([&] {
        if (options.page_tokens < 1 || options.page_tokens > 4096) {
          throw Error(fmt::format("page size {} outside [1, 4096]", options.page_tokens));
        }
        if (options.parallel < 1) throw Error(fmt::format("--parallel must be >= 1, got {}", options.parallel));
        if (options.max_queue < 0) throw Error(fmt::format("--max-queue must be >= 0, got {}", options.max_queue));
        if (options.chunk_tokens == 0) {
          options.chunk_tokens = options.page_tokens % 2 == 0 ? options.page_tokens / 2 : options.page_tokens;
        }
        if (options.page_tokens % options.chunk_tokens != 0) {
          throw Error(fmt::format("--chunk-tokens {} does not divide the page size {}", options.chunk_tokens,
                                  options.page_tokens));
        }
        if (!(options.max_step_ms >= 0) || options.max_step_ms > 1e6) {
          throw Error(fmt::format("--max-step-ms must be in [0, 1e6], got {}", options.max_step_ms));
        }
        options.step_tokens = std::max(options.step_tokens, options.chunk_tokens);
        options.cache = with_pages(options.cache, options.page_tokens);
        return options;
      }()),
      ctx_(context_for(model, options_.ctx)),
      footprint_(options_.cache, model.config.n_layers, model.config.n_kv_heads, model.config.head_dim,
                 static_cast<size_t>(ctx_), options_.chunk_tokens, model.config.layer_windows()),
      impl_(std::make_unique<Impl>(model, options_.threads, options_.page_tokens)) {
  if (footprint_.reservation(options_.page_tokens + 1) > options_.kv_budget) {
    throw Error(fmt::format("--kv-budget {} bytes holds not even one sequence of {} tokens ({} bytes)",
                            options_.kv_budget, options_.page_tokens + 1, footprint_.reservation(options_.page_tokens + 1)));
  }
  engine::check_rope_factors_for(model.config, ctx_, "serve");
  metrics_.kv_budget = options_.kv_budget;
  if (options_.prefix_store) {
    shared_ = std::make_unique<SharedPrefixes>(options_.prefix_store, model, options_.cache, options_.page_tokens);
    metrics_.prefix_store = true;
  }
  if (options_.prefix_disk) {
    disk_ = std::make_unique<SharedPrefixes>(options_.prefix_disk, model, options_.cache, options_.page_tokens, "disk");
    metrics_.prefix_disk = true;
  }
  thread_ = std::thread([this] { loop(); });
}

Scheduler::~Scheduler() { drain(std::chrono::milliseconds(0)); }

Scheduler::Admission Scheduler::submit(GenerationRequest request, std::shared_ptr<RequestHandle> handle,
                                       std::string* why) {
  auto say = [&](std::string text) {
    if (why != nullptr) *why = std::move(text);
  };
  const size_t n = request.prompt.size();
  if (n == 0) {
    say("the prompt is empty");
    return Admission::too_large;
  }
  if (n >= static_cast<size_t>(ctx_)) {
    say(fmt::format("the prompt has {} tokens; this server's context is {} tokens (the prompt and at least one "
                    "generated token must fit)", n, ctx_));
    return Admission::prompt_too_long;
  }
  request.max_tokens = std::max(0, std::min(request.max_tokens, ctx_ - static_cast<int>(n)));
  const size_t need = footprint_.reservation(n + static_cast<size_t>(request.max_tokens));
  if (need > options_.kv_budget) {
    say(fmt::format("the request needs {} bytes of KV cache ({} prompt + {} generated tokens), more than the "
                    "whole budget of {} bytes; lower max_tokens or the prompt",
                    need, n, request.max_tokens, options_.kv_budget));
    return Admission::too_large;
  }
  // The disk tier's and the shared store's longest prefixes, fetched here so the engine loop never
  // waits on the disk or the network (at most a few round trips, each bounded by the store's
  // timeout); the store is asked only for prefixes longer than the disk's.
  SharedPrefixes::Lookup on_disk, stored;
  if (!request.prompt_logprobs) {
    if (disk_) on_disk = disk_->lookup(request.prompt, n - 1);
    if (shared_) stored = shared_->lookup(request.prompt, n - 1, on_disk.tokens);
  }
  {
    std::lock_guard lock(mutex_);
    if (draining_) {
      say("the server is shutting down");
      return Admission::draining;
    }
    // Requests beyond the free running slots wait; at most max_queue of them.
    const size_t free_slots = static_cast<size_t>(options_.parallel) - std::min<size_t>(options_.parallel, metrics_.running);
    if (waiting_.size() >= static_cast<size_t>(options_.max_queue) + free_slots) {
      ++metrics_.requests_rejected_total;
      say(fmt::format("{} requests are waiting (--max-queue {}); retry later", waiting_.size(), options_.max_queue));
      return Admission::queue_full;
    }
    waiting_.push_back({std::move(request), std::move(handle), std::move(on_disk), std::move(stored), need});
    metrics_.waiting = waiting_.size();
  }
  wake_.notify_all();
  return Admission::accepted;
}

void Scheduler::drain(std::chrono::milliseconds grace) {
  {
    std::lock_guard lock(mutex_);
    if (!thread_.joinable()) return;
    draining_ = true;
  }
  wake_.notify_all();
  const auto deadline = std::chrono::steady_clock::now() + grace;
  {
    std::unique_lock lock(mutex_);
    while (!(waiting_.empty() && metrics_.running == 0) && std::chrono::steady_clock::now() < deadline) {
      wake_.wait_for(lock, std::chrono::milliseconds(20));
    }
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

SchedulerMetrics Scheduler::metrics() const {
  SchedulerMetrics m;
  {
    std::lock_guard lock(mutex_);
    m = metrics_;
  }
  if (shared_) m.shared = shared_->metrics();
  if (disk_) m.disk = disk_->metrics();
  return m;
}

void Scheduler::loop() {
  for (;;) {
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [&] { return stopping_ || !waiting_.empty() || !running_.empty(); });
      if (stopping_) break;
    }
    try {
      admit();
      if (!step()) {
        // Nothing runnable (the head of the queue waits for room that no running sequence will
        // free): cannot happen while the budget check in submit() holds; sleep instead of spinning.
        std::unique_lock lock(mutex_);
        wake_.wait_for(lock, std::chrono::milliseconds(5));
      }
    } catch (const std::exception& e) {
      // A failed step leaves its sequences' caches in an unknown state: fail all of them.
      std::fprintf(stderr, "serve: step failed: %s\n", e.what());
      for (auto& seq : running_) fail(*seq, fmt::format("internal error: {}", e.what()));
      for (size_t i = running_.size(); i-- > 0;) release(i);
    }
    deliver();
    update_gauges();
    wake_.notify_all();  // drain() waits on the gauges
  }
  // Stopping: everything still here is cancelled.
  for (auto& seq : running_) fail(*seq, "the server shut down before the request finished");
  for (size_t i = running_.size(); i-- > 0;) release(i);
  deliver();
  std::lock_guard lock(mutex_);
  for (auto& w : waiting_) {
    w.handle->push({StreamEvent::Kind::failed, "", "", {}, "the server shut down before the request started"});
  }
  waiting_.clear();
  metrics_.waiting = 0;
  metrics_.running = 0;
}

void Scheduler::admit() {
  for (;;) {
    Waiting next;
    std::vector<PrefixCache::Entry> evicted;
    {
      std::lock_guard lock(mutex_);
      // Requests cancelled while waiting leave without ever running, from anywhere in the queue
      // (each holds a place that --max-queue counts), and the gauge says so (issue 26: it kept
      // counting them).
      const size_t queued = waiting_.size();
      std::erase_if(waiting_, [](const Waiting& w) { return w.handle->cancelled(); });
      metrics_.requests_cancelled_total += queued - waiting_.size();
      metrics_.waiting = waiting_.size();
      if (waiting_.empty() || running_.size() >= static_cast<size_t>(options_.parallel)) return;
      const auto& request = waiting_.front().request;
      if (computing(request.prompt) && !request.prompt_logprobs) return;
      const size_t need = waiting_.front().reservation;
      while (reserved_ + impl_->prefixes.bytes() + need > options_.kv_budget && impl_->prefixes.size() > 0) {
        impl_->prefixes.evict_one(disk_ ? &evicted.emplace_back() : nullptr);
        ++metrics_.prefix_cache_evictions_total;
      }
      if (reserved_ + need > options_.kv_budget) {
        if (evicted.empty()) return;  // waits for running sequences to finish
      } else {
        next = std::move(waiting_.front());
        waiting_.pop_front();
        metrics_.waiting = waiting_.size();
      }
    }
    park_on_disk(evicted);  // outside the lock: encoding copies the caches
    if (!next.handle) return;
    auto seq = std::make_unique<Sequence>();
    seq->request = std::move(next.request);
    seq->handle = std::move(next.handle);
    seq->in_store = std::move(next.stored.present);
    seq->in_disk = std::move(next.on_disk.present);
    const auto& prompt = seq->request.prompt;
    seq->reservation = next.reservation;
    reserved_ += seq->reservation;
    const Source source = restore_prefix(*seq, next);
    for (size_t l = 0; l < seq->cache.n_layers(); ++l) seq->layers.push_back(&seq->cache.layer(l));
    seq->sampler.emplace(seq->request.sampling);
    seq->text.emplace(tokenizer_, prompt.back(), seq->request.stop);
    plan_prefix_snapshots(*seq);
    {
      std::lock_guard lock(mutex_);
      metrics_.prompt_tokens_total += prompt.size();
      metrics_.prompt_tokens_cached_total += seq->cached - seq->from_store - seq->from_disk;
      metrics_.prompt_tokens_store_total += seq->from_store;
      metrics_.prompt_tokens_disk_total += seq->from_disk;
      metrics_.prompt_tokens_computed_total += prompt.size() - seq->cached;
      if (options_.prefix_cache) {
        ++(source == Source::ram ? metrics_.prefix_cache_hits_total : metrics_.prefix_cache_misses_total);
      }
      if (disk_) ++(source == Source::disk ? metrics_.prefix_disk_hits_total : metrics_.prefix_disk_misses_total);
      if (shared_) ++(source == Source::store ? metrics_.prefix_store_hits_total : metrics_.prefix_store_misses_total);
    }
    running_.push_back(std::move(seq));
  }
}

Scheduler::Source Scheduler::restore_prefix(Sequence& seq, Waiting& next) {
  const engine::ModelConfig& c = model_.config;
  const auto& prompt = seq.request.prompt;
  // The longest stored prefix, leaving at least one prompt token to compute (its logits start
  // the generation): the in-process one, the disk's or the shared store's, whichever is longest
  // (in that order on a tie). (None for a request that scores its prompt: that needs the logits
  // at every position.)
  const PrefixCache::Entry* hit = options_.prefix_cache && !seq.request.prompt_logprobs
                                      ? impl_->prefixes.lookup(prompt, prompt.size() - 1)
                                      : nullptr;
  const size_t ram = hit != nullptr ? hit->tokens.size() : 0;
  const size_t disk = next.on_disk.cache ? next.on_disk.tokens : 0;
  const size_t store = next.stored.cache ? next.stored.tokens : 0;
  if (store > std::max(ram, disk)) {
    seq.cache = std::move(*next.stored.cache);
    seq.fed = seq.cached = seq.from_store = store;
    return Source::store;
  }
  if (disk > ram) {
    seq.cache = std::move(*next.on_disk.cache);
    seq.fed = seq.cached = seq.from_disk = disk;
    return Source::disk;
  }
  if (hit != nullptr) {
    try {
      seq.cache = PrefixCache::restore(*hit);
      seq.fed = seq.cached = ram;
      return Source::ram;
    } catch (const std::exception& e) {
      // A stored state that no longer loads (it should not happen): compute the prompt instead.
      std::fprintf(stderr, "serve: a stored prefix did not restore (%s); computing it\n", e.what());
    }
  }
  seq.cache = make_prompt_cache(c.n_layers, c.n_kv_heads, c.head_dim, options_.cache, c.layer_windows());
  return Source::none;
}

void Scheduler::plan_prefix_snapshots(Sequence& seq) {
  // Prefixes worth keeping: each mark (and the prompt's end) rounded down to whole pages.
  if (!options_.prefix_cache && !shared_ && !disk_) return;
  const auto& prompt = seq.request.prompt;
  auto marks = seq.request.prefix_marks;
  marks.push_back(prompt.size() - 1);
  marks.push_back(impl_->prefixes.longest_seen(prompt, prompt.size() - 1));
  impl_->prefixes.remember(prompt);
  for (const size_t mark : marks) {
    const size_t at = std::min(mark, prompt.size() - 1) / options_.page_tokens * options_.page_tokens;
    if (at > seq.fed) seq.snapshot_at.push_back(at);
  }
  std::sort(seq.snapshot_at.begin(), seq.snapshot_at.end());
  seq.snapshot_at.erase(std::unique(seq.snapshot_at.begin(), seq.snapshot_at.end()), seq.snapshot_at.end());
}

void Scheduler::park_on_disk(std::vector<PrefixCache::Entry>& evicted) {
  for (const PrefixCache::Entry& entry : evicted) {
    if (disk_->holds(entry.tokens)) continue;  // e.g. restored from it
    try {
      disk_->offer(entry.tokens, PrefixCache::restore(entry));
    } catch (const std::exception& e) {
      std::fprintf(stderr, "serve: an evicted prefix was not written to disk: %s\n", e.what());
    }
  }
  evicted.clear();
}

bool Scheduler::step() {
  // Cancelled sequences leave before the step: their pages are freed now.
  for (size_t i = running_.size(); i-- > 0;) {
    if (running_[i]->handle->cancelled()) {
      {
        std::lock_guard lock(mutex_);
        ++metrics_.requests_cancelled_total;
      }
      release(i);
    }
  }
  if (running_.empty()) return false;
  Batch batch = build_batch();
  auto& entries = batch.entries;
  auto& owner = batch.owner;
  if (entries.empty()) return false;
  const auto t0 = std::chrono::steady_clock::now();
  impl_->forward.run(entries);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  // Rows that score a prompt also project every row onto the vocabulary: not the cost of a
  // prompt row the budget plans with.
  if (options_.log_steps) {
    std::fprintf(stderr, "step: %zu decode rows, %zu prompt rows (budget %zu), predicted %.3f s, took %.3f s\n",
                 batch.decode_rows, batch.prompt_rows, batch.prompt_budget,
                 impl_->cost.predict(batch.decode_rows, batch.prompt_rows), seconds);
  }
  if (!batch.scoring) impl_->cost.observe(batch.decode_rows, batch.prompt_rows, seconds);

  size_t generated = 0;
  for (size_t e = 0; e < entries.size(); ++e) {
    Sequence& seq = *owner[e];
    if (entries[e].all_logits) score_prompt_chunk(seq, entries[e].tokens, impl_->forward.all_logits(e));
    if (!entries[e].want_logits || seq.done) continue;
    if (seq.request.max_tokens == 0) {  // scoring the prompt only
      finish(seq, "length");
      continue;
    }
    const std::span<const float> logits = impl_->forward.logits(e);
    const int token = seq.sampler->sample(logits);
    seq.generated.push_back(token);
    ++generated;
    // An end-of-generation token adds no text, but is a generated token with a log-probability
    // (a scorer that drops the last token, as lm-evaluation-harness does, relies on it).
    const bool end = !seq.request.ignore_eos && tokenizer_.is_end_of_generation(token);
    StreamEvent piece{StreamEvent::Kind::text, end ? "" : seq.text->add(token), "", {}, "", {}};
    if (seq.request.logprobs >= 0) piece.logprobs.push_back(engine::token_logprob(logits, token, seq.request.logprobs));
    if (!piece.text.empty() || !piece.logprobs.empty()) send(seq, std::move(piece));
    if (end || seq.text->stopped()) {
      finish(seq, "stop");
    } else if (static_cast<int>(seq.generated.size()) >= seq.request.max_tokens ||
               seq.request.prompt.size() + seq.generated.size() >= static_cast<size_t>(ctx_)) {
      finish(seq, "length");
    }
  }
  {
    std::lock_guard lock(mutex_);
    metrics_.generated_tokens_total += generated;
    ++metrics_.steps_total;
    if (batch.prompt_rows > 0) ++metrics_.prompt_steps_total;
    metrics_.step_seconds_total += seconds;
    metrics_.last_batch_rows = batch.decode_rows + batch.prompt_rows;
    metrics_.step_base_seconds = impl_->cost.base_seconds();
    metrics_.step_decode_row_seconds = impl_->cost.decode_row_seconds();
    metrics_.step_prompt_row_seconds = impl_->cost.prompt_row_seconds();
    metrics_.step_prompt_budget_rows = batch.prompt_budget;
    size_t sequences = 0;
    for (size_t e = 0; e < entries.size(); ++e) sequences += (e == 0 || owner[e] != owner[e - 1]) ? 1 : 0;
    metrics_.last_batch_sequences = sequences;
  }
  // The step's tokens go out now, counted, before the prefix copies below (which can take
  // milliseconds on long prompts).
  deliver();
  for (auto& seq : running_) take_prefix_snapshots(*seq);
  if (shared_ || disk_) {
    for (auto& seq : running_) keep_answer_prefix(*seq);
  }
  for (size_t i = running_.size(); i-- > 0;) {
    if (running_[i]->done) release(i);
  }
  return true;
}

Scheduler::Batch Scheduler::build_batch() {
  Batch batch;
  // Decode first: every running sequence past its prompt gets its next token in every step.
  for (auto& seq : running_) {
    if (seq->prefilling()) continue;
    batch.entries.push_back({std::span<const int>(&seq->generated.back(), 1), seq->layers, true});
    batch.owner.push_back(seq.get());
    ++batch.decode_rows;
  }
  // Prompt chunks, oldest request first, fill what the budget leaves; at least one chunk per step
  // however many sequences decode, so prompts always advance. A chunk ends at the next multiple
  // of chunk_tokens (or the prompt's end) whatever the budget: the cuts, and so the sequence's
  // output, never depend on the other requests.
  batch.prompt_budget = prompt_budget(batch.decode_rows);
  const size_t chunk = options_.chunk_tokens;
  bool any_chunk = false;
  for (auto& seq : running_) {
    while (seq->prefilling()) {
      const auto& prompt = seq->request.prompt;
      const size_t end = std::min(prompt.size(), (seq->fed / chunk + 1) * chunk);
      if (any_chunk && batch.prompt_rows + (end - seq->fed) > batch.prompt_budget) break;
      any_chunk = true;
      batch.entries.push_back({std::span<const int>(prompt).subspan(seq->fed, end - seq->fed), seq->layers,
                               end == prompt.size(), seq->request.prompt_logprobs});
      batch.owner.push_back(seq.get());
      batch.prompt_rows += end - seq->fed;
      batch.scoring = batch.scoring || seq->request.prompt_logprobs;
      seq->fed = end;
      // A prefix to keep ends the sequence's part of this step: the cache holds exactly it then.
      if (!seq->snapshot_at.empty() && seq->snapshot_at.front() == end) break;
    }
  }
  return batch;
}

size_t Scheduler::prompt_budget(size_t decode_rows) const {
  const size_t cap = options_.step_tokens - std::min(options_.step_tokens, decode_rows);
  // Nobody streams (or no target): prompts take the whole step, the cheapest way through them.
  if (decode_rows == 0 || options_.max_step_ms <= 0) return cap;
  // Where the decode rows alone take more than half the target (a loaded machine, many
  // streams), prompts still get as much time as they do: a stream's step at most doubles, and
  // prompts do not crawl at one chunk a step.
  const double target = std::max(options_.max_step_ms / 1e3, 2 * impl_->cost.decode_seconds(decode_rows));
  return std::min(cap, impl_->cost.prompt_rows_within(target, decode_rows));
}

bool Scheduler::computing(const std::vector<int>& prompt) const {
  // Only a prompt past one page has a prefix worth waiting for.
  if (!options_.prefix_cache || prompt.size() <= options_.page_tokens) return false;
  return std::any_of(running_.begin(), running_.end(),
                     [&](const auto& seq) { return seq->prefilling() && seq->request.prompt == prompt; });
}

void Scheduler::score_prompt_chunk(Sequence& seq, std::span<const int> chunk, std::span<const float> logits) {
  const auto& prompt = seq.request.prompt;
  const size_t start = static_cast<size_t>(chunk.data() - prompt.data());
  const size_t vocab = logits.size() / chunk.size();
  // Row i follows prompt token start + i and predicts the next one (the last row of the prompt
  // predicts the first generated token, reported with it).
  for (size_t i = 0; i < chunk.size() && start + i + 1 < prompt.size(); ++i) {
    seq.prompt_logprobs.push_back(
        engine::token_logprob(logits.subspan(i * vocab, vocab), prompt[start + i + 1], seq.request.logprobs));
  }
  if (start + chunk.size() == prompt.size()) {
    send(seq, StreamEvent{StreamEvent::Kind::prompt, "", "", {}, "", std::move(seq.prompt_logprobs)});
  }
}

void Scheduler::take_prefix_snapshots(Sequence& seq) {
  while (!seq.snapshot_at.empty() && seq.snapshot_at.front() <= seq.fed) {
    const size_t at = seq.snapshot_at.front();
    seq.snapshot_at.erase(seq.snapshot_at.begin());
    // Only a cache holding exactly `at` tokens is that prefix (chunks end on page multiples, so
    // the cache passes every one of them at the end of some step).
    if (seq.cache.size() != at) continue;
    if (shared_) {
      const size_t block = at / options_.page_tokens - 1;
      if (block >= seq.in_store.size() || !seq.in_store[block]) shared_->offer(seq.request.prompt, seq.cache);
    }
    if (options_.prefix_cache && impl_->prefixes.contains(seq.request.prompt, at)) continue;
    // Kept in RAM only within the budget left by the running sequences' reservations; else on
    // the disk tier (unless it holds it already).
    const size_t room = options_.kv_budget - std::min(options_.kv_budget, reserved_ + impl_->prefixes.bytes());
    if (options_.prefix_cache && allocated_bytes(seq.cache) <= room) {
      impl_->prefixes.insert(seq.request.prompt, seq.cache);
    } else if (disk_) {
      const size_t block = at / options_.page_tokens - 1;
      if (block >= seq.in_disk.size() || !seq.in_disk[block]) disk_->offer(seq.request.prompt, seq.cache);
    }
  }
}

void Scheduler::keep_answer_prefix(Sequence& seq) {
  const auto& prompt = seq.request.prompt;
  const size_t n = seq.cache.size();
  // Past the prompt, on a page boundary: the cache holds the prompt and the first n - prompt
  // generated tokens (the newest sampled token is not fed yet).
  if (seq.prefilling() || n <= prompt.size() || n % options_.page_tokens != 0) return;
  if (n - prompt.size() > seq.generated.size()) return;  // cannot happen: a sampled token precedes each fed one
  std::vector<int> tokens(prompt);
  tokens.insert(tokens.end(), seq.generated.begin(), seq.generated.begin() + static_cast<long>(n - prompt.size()));
  seq.answer_prefix = (disk_ ? disk_ : shared_)->encode(tokens, seq.cache);  // one value format
}

void Scheduler::finish(Sequence& seq, const std::string& reason) {
  std::string rest = seq.text->flush();
  if (!rest.empty()) send(seq, {StreamEvent::Kind::text, std::move(rest), "", {}, ""});
  StreamEvent done{StreamEvent::Kind::finished, "", reason, {}, ""};
  done.usage.prompt_tokens = seq.request.prompt.size();
  done.usage.completion_tokens = seq.generated.size();
  done.usage.cached_tokens = seq.cached;
  done.usage.store_tokens = seq.from_store;
  done.usage.disk_tokens = seq.from_disk;
  send(seq, std::move(done));
  seq.done = true;
  std::lock_guard lock(mutex_);
  ++metrics_.requests_finished_total;
}

void Scheduler::fail(Sequence& seq, const std::string& error) {
  send(seq, {StreamEvent::Kind::failed, "", "", {}, error});
  seq.done = true;
  std::lock_guard lock(mutex_);
  ++metrics_.requests_failed_total;
}

void Scheduler::send(Sequence& seq, StreamEvent event) { outbox_.emplace_back(seq.handle, std::move(event)); }

void Scheduler::deliver() {
  for (auto& [handle, event] : outbox_) handle->push(std::move(event));
  outbox_.clear();
}

void Scheduler::release(size_t index) {
  if (auto& answer = running_[index]->answer_prefix) {
    if (disk_ && shared_) disk_->put(*answer);  // a copy: the store gets it too
    (shared_ ? shared_ : disk_)->put(std::move(*answer));
  }
  reserved_ -= running_[index]->reservation;
  running_.erase(running_.begin() + static_cast<long>(index));
}

void Scheduler::update_gauges() {
  size_t allocated = impl_->prefixes.bytes(), tokens = 0;
  for (const auto& seq : running_) {
    allocated += allocated_bytes(seq->cache);
    tokens += seq->cache.size();
  }
  std::lock_guard lock(mutex_);
  metrics_.running = running_.size();
  metrics_.kv_reserved = reserved_;
  metrics_.kv_allocated = allocated;
  metrics_.kv_tokens = tokens;
  metrics_.prefix_cache_bytes = impl_->prefixes.bytes();
  metrics_.prefix_cache_entries = impl_->prefixes.size();
  metrics_.peak_running = std::max(metrics_.peak_running, running_.size());
  metrics_.peak_kv_allocated = std::max(metrics_.peak_kv_allocated, allocated);
}

}  // namespace turbokv::server
