// Scheduler: continuous batching under one KV memory budget.
//
// One thread (the engine loop) owns the model's forward pass, every running sequence's caches
// and the prefix cache. Each step it
//   1. drops cancelled sequences (their pages are freed before the step runs);
//   2. admits waiting requests in arrival order while fewer than `parallel` run and the
//      request's reservation (KvFootprint for prompt + max_tokens tokens) fits in the budget
//      left by the running sequences' reservations and the prefix cache (whose least recently
//      used entries are evicted to make room); an admitted request first restores the longest
//      stored prefix of its prompt; a request whose prompt a running sequence is computing
//      (n choices of one request, or the same prompt sent twice) waits until that one has
//      stored it, so the prompt is computed once;
//   3. builds one batch, decode first: one token of every decoding sequence, then prompt chunks
//      of the prefilling ones (oldest first) within the step's prompt budget -- at least one
//      chunk, at most what a step of `max_step_ms` (or of twice the decode rows' time, if that
//      is longer) leaves after the decode rows by StepCost's running fit of this machine's
//      step times, never past `step_tokens` rows (all of them
//      when nothing decodes: no stream waits on that step) -- and runs it through
//      BatchForward (each weight matrix read once for the whole batch). A running stream so
//      gets a token about every max_step_ms while prompts are computed, and every decode step
//      when none are (stall-free batching, as Sarathi-Serve; vLLM's max_num_batched_tokens is
//      the row cap, here derived from a time);
//   4. samples each sequence that produced logits, streams its text, finishes it on an
//      end-of-generation token, a stop string, max_tokens or the context's end. A request
//      scoring its prompt (prompt_logprobs) runs its chunks with every row's logits and gets
//      each prompt token's log-probability; it never restores a stored prefix.
// Below the prefix cache, a disk tier (SchedulerOptions::prefix_disk, this machine's disk) keeps
// the prefixes the cache evicts, those it has no room for, and each finished sequence's prompt
// plus answer up to its last page boundary; submit() looks it up before the shared store (and asks
// the store only for prefixes longer than the disk's), so the order is RAM -> disk -> store ->
// compute, and admission takes the longest (RAM, then disk, on a tie).
// With a shared prefix store (SchedulerOptions::prefix_store), submit() -- on the caller's HTTP
// thread, never the engine loop -- looks up the longest prefix of the prompt another replica
// stored, and admission takes whichever of that and the in-process prefix is longer; the
// prefixes this replica computes (at the same page-aligned snapshot points) are queued for the
// store by the engine loop, which only serializes them (the store's thread sends them); so is
// the prompt plus the generated answer up to its last page boundary, when the sequence ends
// (a chat's next turn starts with it).
// Prompts are cut at fixed positions (multiples of chunk_tokens), whatever the traffic, so with
// BatchForward's batch invariance a request's output does not depend on the other requests
// (and a restored prefix gives what recomputing it would: entries are taken at those cuts).
//
// Thread-safety: submit(), metrics() and the lifecycle calls may come from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "engine/model/model.hpp"
#include "engine/tokenizer/tokenizer.hpp"
#include "server/scheduling/kv_budget.hpp"
#include "server/scheduling/request.hpp"
#include "server/prefix/prefix_cache.hpp"
#include "server/prefix/shared_prefixes.hpp"
#include "turbokv/prompt_cache.hpp"

namespace turbokv::server {

struct SchedulerOptions {
  CacheConfig cache;            // page_tokens is taken from page_tokens below
  size_t kv_budget = 512ull << 20;
  int parallel = 16;            // running sequences at most
  int max_queue = 64;           // waiting requests at most (more: rejected)
  int ctx = 0;                  // context per sequence (0: the model's)
  int threads = 0;              // matmul and attention threads (0: all cores)
  // Cache page and prompt chunk size (tokens). 32: at head_dim 64 a 4-bit record is 34 bytes, and
  // 32 of them fill whole 64-byte lines (16 would waste 6% of every page to slab alignment);
  // a half-empty last page costs at most 31 tokens per sequence.
  size_t page_tokens = 32;
  size_t step_tokens = 128;     // rows per step at most (decode tokens + prompt chunks)
  // Prompt chunk size (tokens): prompts are cut at its multiples; divides page_tokens (0: half
  // the page, or the page if it is odd). A budget fills in whole chunks and a step carries at
  // least one, so smaller chunks fit a step's time more closely (a chunk of 32 rows alone is
  // ~0.25 s of a 1B model on 2 cores: one chunk beside 4 streams made every step ~0.31 s, and
  // the streams' ITL p90 0.42 s, more than llama-server's 0.34 s); each chunk's attention reads
  // its cache once, so smaller ones cost a little more per row.
  size_t chunk_tokens = 0;
  // Target step time while sequences decode (ms): the prompt rows a step carries are what fits
  // after its decode rows, at least one chunk. 0: no target (steps fill up to step_tokens).
  double max_step_ms = 250;
  // One stderr line per step (rows, prompt budget, predicted and measured seconds): how the step
  // policy behaves on a machine, for tuning --max-step-ms and --chunk-tokens.
  bool log_steps = false;
  bool prefix_cache = true;
  // The tier shared with other replicas (server/prefix/shared_prefixes.hpp): null for none. Blocks are
  // pages.
  std::shared_ptr<PrefixStore> prefix_store;
  // This server's disk tier (server/prefix/prefix_store_disk.hpp; any PrefixStore in tests): null for
  // none. Same values as the shared tier.
  std::shared_ptr<PrefixStore> prefix_disk;
};

// Counters and gauges for /metrics (a consistent snapshot).
struct SchedulerMetrics {
  size_t running = 0, waiting = 0;
  size_t kv_budget = 0, kv_reserved = 0, kv_allocated = 0, kv_tokens = 0;
  size_t prefix_cache_bytes = 0, prefix_cache_entries = 0;
  uint64_t prompt_tokens_total = 0, prompt_tokens_computed_total = 0, prompt_tokens_cached_total = 0;
  uint64_t prompt_tokens_store_total = 0;  // restored from the shared store (not in cached_total)
  uint64_t prefix_store_hits_total = 0, prefix_store_misses_total = 0;
  bool prefix_store = false;  // a shared store is configured (then `shared` is filled in)
  SharedPrefixMetrics shared;
  uint64_t prompt_tokens_disk_total = 0;  // restored from the disk tier (not in cached_total)
  uint64_t prefix_disk_hits_total = 0, prefix_disk_misses_total = 0;
  bool prefix_disk = false;  // a disk tier is configured (then `disk` is filled in)
  SharedPrefixMetrics disk;
  uint64_t generated_tokens_total = 0;
  uint64_t prefix_cache_hits_total = 0, prefix_cache_misses_total = 0, prefix_cache_evictions_total = 0;
  uint64_t requests_finished_total = 0, requests_cancelled_total = 0, requests_failed_total = 0;
  uint64_t requests_rejected_total = 0;
  uint64_t steps_total = 0;
  uint64_t prompt_steps_total = 0;  // steps that carried prompt rows (with or without decode rows)
  size_t last_batch_sequences = 0, last_batch_rows = 0;
  size_t peak_running = 0, peak_kv_allocated = 0;
  double step_seconds_total = 0;
  // StepCost's fit (seconds): a step's fixed cost, and the cost of each decode and prompt row.
  double step_base_seconds = 0, step_decode_row_seconds = 0, step_prompt_row_seconds = 0;
  size_t step_prompt_budget_rows = 0;  // the last step's prompt budget
};

class Scheduler {
 public:
  // Throws turbokv::Error on options the model cannot run (e.g. a cache class that does not fit
  // its head size, a budget smaller than one page).
  Scheduler(const engine::Model& model, const engine::Tokenizer& tokenizer, SchedulerOptions options);
  ~Scheduler();
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // prompt_too_long: the prompt (with one generated token) does not fit the context -- the one
  // place that limit is checked; too_large: what it would reserve exceeds the whole budget.
  enum class Admission { accepted, queue_full, prompt_too_long, too_large, draining };
  // Queues the request; events arrive on `handle`. On anything but accepted, *why says why.
  Admission submit(GenerationRequest request, std::shared_ptr<RequestHandle> handle, std::string* why);

  // Stop admitting; let queued and running requests finish for up to `grace`, then cancel the
  // rest (their handles get a failed event). Returns when the engine loop has stopped.
  void drain(std::chrono::milliseconds grace);

  SchedulerMetrics metrics() const;
  const SchedulerOptions& options() const { return options_; }
  int context() const { return ctx_; }
  // The context per sequence for SchedulerOptions::ctx (0: the model's seq_len; capped by it).
  // A LongRoPE model must have its factors selected for it (engine::select_rope_factors).
  static int context_for(const engine::Model& model, int ctx);
  // Bytes reserved for a sequence growing to n tokens.
  size_t reservation(size_t n_tokens) const { return footprint_.reservation(n_tokens); }
  const KvFootprint& footprint() const { return footprint_; }

 private:
  struct Sequence;
  struct Batch;
  void loop();
  void admit();
  bool step();
  Batch build_batch();
  size_t prompt_budget(size_t decode_rows) const;
  void finish(Sequence& seq, const std::string& reason);
  void fail(Sequence& seq, const std::string& error);
  // A sequence's events wait in outbox_ until deliver(), which the loop calls once the step's
  // counts are in metrics_: a client that has its answer finds it counted.
  void send(Sequence& seq, StreamEvent event);
  void deliver();
  void release(size_t index);
  // A running sequence is computing `prompt` now (and will store its page-aligned prefix).
  bool computing(const std::vector<int>& prompt) const;
  // Logprobs of the prompt tokens a chunk's logits predict; the prompt event after the last chunk.
  void score_prompt_chunk(Sequence& seq, std::span<const int> chunk, std::span<const float> logits);
  struct Waiting;
  // Restores the longest stored prefix `next` may start from (RAM, disk, store); says which.
  enum class Source { none, ram, disk, store };
  Source restore_prefix(Sequence& seq, Waiting& next);
  void plan_prefix_snapshots(Sequence& seq);
  // Writes prefixes the prefix cache evicted to the disk tier (unless it holds them).
  void park_on_disk(std::vector<PrefixCache::Entry>& evicted);
  void take_prefix_snapshots(Sequence& seq);
  void keep_answer_prefix(Sequence& seq);
  void update_gauges();

  const engine::Model& model_;
  const engine::Tokenizer& tokenizer_;
  SchedulerOptions options_;
  int ctx_;
  KvFootprint footprint_;

  mutable std::mutex mutex_;  // guards waiting_, draining_, stopping_, metrics_
  std::condition_variable wake_;
  struct Waiting {
    GenerationRequest request;
    std::shared_ptr<RequestHandle> handle;
    SharedPrefixes::Lookup on_disk;  // what the disk tier had, fetched before queueing
    SharedPrefixes::Lookup stored;   // what the shared store had beyond that
    size_t reservation = 0;          // KV bytes for prompt + max_tokens (KvFootprint), computed once
  };
  std::deque<Waiting> waiting_;
  bool draining_ = false;
  bool stopping_ = false;
  SchedulerMetrics metrics_;

  // Engine-loop state (the loop thread only).
  std::vector<std::unique_ptr<Sequence>> running_;
  std::vector<std::pair<std::shared_ptr<RequestHandle>, StreamEvent>> outbox_;
  size_t reserved_ = 0;
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::unique_ptr<SharedPrefixes> shared_;  // null without a store
  std::unique_ptr<SharedPrefixes> disk_;    // null without a disk tier
  std::thread thread_;
};

}  // namespace turbokv::server
