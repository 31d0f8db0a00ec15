// What the HTTP layer hands the scheduler (a tokenized generation request) and what comes back
// (a stream of events through a RequestHandle shared by both threads).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "engine/runtime/sampler.hpp"

namespace turbokv::server {

struct GenerationRequest {
  std::vector<int> prompt;
  // Token counts at which the prompt's prefix is worth keeping for reuse (e.g. where each chat
  // message ends); the prompt's own end is always considered.
  std::vector<size_t> prefix_marks;
  // >= 0; the scheduler clamps it to the context left. 0 (with prompt_logprobs: scoring a
  // prompt) computes the prompt and finishes with "length".
  int max_tokens = 16;
  engine::SamplerOptions sampling;
  std::vector<std::string> stop;  // generation ends before any of these strings (not returned)
  bool ignore_eos = false;        // benchmarks: generate max_tokens whatever the model says
  // Log-probabilities (of the model's distribution, before bias, penalties and temperature):
  // -1 none; else each generated token's, with this many most likely alternatives.
  int logprobs = -1;
  // Also every prompt token's after the first (needs the logits at every prompt position, so
  // the prompt is computed whole, never restored from a stored prefix). Needs logprobs >= 0.
  bool prompt_logprobs = false;
};

struct Usage {
  size_t prompt_tokens = 0;
  size_t completion_tokens = 0;
  size_t cached_tokens = 0;  // prompt tokens restored (prefix cache, disk or shared store), not computed
  size_t disk_tokens = 0;    // of which from this server's disk tier (--prefix-disk)
  size_t store_tokens = 0;   // of which from the shared store (other replicas' work)
};

struct StreamEvent {
  // prompt: once, before any text, with prompt_logprobs (logprobs of prompt tokens 1..n-1).
  enum class Kind { text, finished, failed, prompt };
  Kind kind = Kind::text;
  std::string text;           // Kind::text: the next piece of generated text (whole UTF-8 characters)
  std::string finish_reason;  // Kind::finished: "stop" or "length"
  Usage usage;                // Kind::finished
  std::string error;          // Kind::failed
  // Kind::text with logprobs: the tokens sampled since the last event (their text may be held
  // back for later events, or dropped at a stop string); Kind::prompt: the prompt's.
  std::vector<engine::TokenLogprob> logprobs{};
};

// One request in flight: the scheduler pushes events, the HTTP side pops them, either blocking
// (wait_next) or, on an event-driven transport, when the notify hook tells it an event arrived
// (try_next). cancel() (a client that went away) makes the scheduler drop the sequence at its
// next step.
class RequestHandle {
 public:
  void push(StreamEvent event) {
    std::function<void()> notify;
    {
      std::lock_guard lock(mutex_);
      events_.push_back(std::move(event));
      notify = notify_;
    }
    ready_.notify_all();
    if (notify) notify();
  }
  // `notify` runs on the pushing thread after every later push (it must not block), and once now
  // if events are already waiting.
  void set_notify(std::function<void()> notify) {
    bool waiting = false;
    {
      std::lock_guard lock(mutex_);
      notify_ = notify;
      waiting = !events_.empty();
    }
    if (waiting && notify) notify();
  }
  // The next event if one is queued.
  bool try_next(StreamEvent& out) {
    std::lock_guard lock(mutex_);
    if (events_.empty()) return false;
    out = std::move(events_.front());
    events_.pop_front();
    return true;
  }
  // Waits up to `timeout` for the next event; false on timeout.
  bool wait_next(StreamEvent& out, std::chrono::milliseconds timeout) {
    std::unique_lock lock(mutex_);
    if (!ready_.wait_for(lock, timeout, [&] { return !events_.empty(); })) return false;
    out = std::move(events_.front());
    events_.pop_front();
    return true;
  }
  void cancel() { cancelled_.store(true, std::memory_order_relaxed); }
  bool cancelled() const { return cancelled_.load(std::memory_order_relaxed); }

 private:
  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<StreamEvent> events_;
  std::function<void()> notify_;
  std::atomic<bool> cancelled_{false};
};

}  // namespace turbokv::server
