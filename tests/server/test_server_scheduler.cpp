// The server's scheduler without HTTP, on the kjv model: admission under the KV budget,
// queueing and rejection, cancellation, reservations back to zero, prefix reuse answering
// exactly as recomputation, batch-invariant outputs; log-probabilities of the prompt (teacher
// forced, as the engine's evaluation computes them) and of generated tokens; logit_bias and
// the penalties in the scheduler's sampling; and the pieces under it (KvFootprint's bound,
// TextStream's stop strings and UTF-8 hold-back, byte sizes).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "engine/eval/evaluate.hpp"
#include "engine/model/model.hpp"
#include "engine/runtime/forward.hpp"
#include "engine/tokenizer/tokenizer_factory.hpp"
#include "server/http/api_server.hpp"
#include "server/scheduling/kv_budget.hpp"
#include "server/scheduling/scheduler.hpp"
#include "kjv_server_fixture.hpp"
#include "server/text/text_stream.hpp"
#include "turbokv/attention.hpp"
#include "turbokv/error.hpp"

namespace turbokv::server {
namespace {

using test::kjv;


SchedulerOptions options(const std::string& cache, size_t budget, int parallel = 16, int max_queue = 64) {
  SchedulerOptions o = test::small_scheduler(cache, budget);  // expectations below count in its pages of 16
  o.parallel = parallel;
  o.max_queue = max_queue;
  return o;
}

struct Result {
  std::string text;
  std::string finish;
  Usage usage;
  std::string error;
  std::vector<engine::TokenLogprob> prompt_logprobs, logprobs;
  int prompt_events = 0;
};

Result wait(RequestHandle& h) {
  Result r;
  StreamEvent ev;
  for (;;) {
    if (!h.wait_next(ev, std::chrono::seconds(60))) {
      r.error = "timeout";
      return r;
    }
    if (ev.kind == StreamEvent::Kind::text) {
      r.text += ev.text;
      r.logprobs.insert(r.logprobs.end(), ev.logprobs.begin(), ev.logprobs.end());
    }
    if (ev.kind == StreamEvent::Kind::prompt) {
      ++r.prompt_events;
      EXPECT_TRUE(r.text.empty() && r.logprobs.empty()) << "the prompt's logprobs come first";
      r.prompt_logprobs = ev.logprobs;
    }
    if (ev.kind == StreamEvent::Kind::finished) {
      r.finish = ev.finish_reason;
      r.usage = ev.usage;
      return r;
    }
    if (ev.kind == StreamEvent::Kind::failed) {
      r.error = ev.error;
      return r;
    }
  }
}

GenerationRequest greedy(const std::string& prompt, int max_tokens) {
  GenerationRequest g;
  g.prompt = kjv().tok->encode(prompt, true);
  g.max_tokens = max_tokens;
  g.sampling.temperature = 0;
  return g;
}

std::shared_ptr<RequestHandle> submit(Scheduler& s, GenerationRequest g) {
  auto h = std::make_shared<RequestHandle>();
  std::string why;
  EXPECT_EQ(s.submit(std::move(g), h, &why), Scheduler::Admission::accepted) << why;
  return h;
}

void wait_idle(Scheduler& s) {
  for (int i = 0; i < 2000; ++i) {
    const auto m = s.metrics();
    if (m.running == 0 && m.waiting == 0) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  FAIL() << "scheduler did not become idle";
}

const std::vector<std::string> kPrompts = {"In the beginning", "And God said unto Moses", "Blessed are the meek",
                                           "The LORD is my shepherd", "And it came to pass"};

TEST(ServerScheduler, BatchedOutputsEqualSoloOutputs) {
  Scheduler s(kjv().model, *kjv().tok, options("turboquant:bits=4,window=32,sinks=1", 64 << 20));
  std::vector<std::string> solo;
  for (const auto& p : kPrompts) solo.push_back(wait(*submit(s, greedy(p, 40))).text);
  std::vector<std::shared_ptr<RequestHandle>> handles;
  for (const auto& p : kPrompts) handles.push_back(submit(s, greedy(p, 40)));
  for (size_t i = 0; i < handles.size(); ++i) {
    const Result r = wait(*handles[i]);
    EXPECT_EQ(r.text, solo[i]) << kPrompts[i];
    EXPECT_EQ(r.finish, "length");
    EXPECT_EQ(r.usage.completion_tokens, 40u);
  }
  EXPECT_GE(s.metrics().peak_running, 3u);
  wait_idle(s);
  EXPECT_EQ(s.metrics().kv_reserved, 0u);
}

// A client that has its answer finds it counted: the tokens, the step and the finished request
// are in the metrics before the finish event reaches the client (a test or a dashboard reading
// /metrics right after a response once saw the last step missing).
TEST(ServerScheduler, AnAnswerIsCountedBeforeItArrives) {
  Scheduler s(kjv().model, *kjv().tok, options("turboquant:bits=4,window=32,sinks=1", 64 << 20));
  uint64_t generated = 0;
  for (int i = 0; i < 12; ++i) {
    const std::string& prompt = kPrompts[static_cast<size_t>(i) % kPrompts.size()];
    const Result r = wait(*submit(s, greedy(prompt + " and the earth", 3 + i)));
    ASSERT_EQ(r.finish, "length");
    generated += r.usage.completion_tokens;
    const SchedulerMetrics m = s.metrics();  // at once: no waiting for the engine loop
    EXPECT_EQ(m.requests_finished_total, static_cast<uint64_t>(i + 1)) << i;
    EXPECT_EQ(m.generated_tokens_total, generated) << i;
    EXPECT_GE(m.steps_total, generated) << i;
  }
}

TEST(ServerScheduler, BudgetBoundsRunningSequencesAndReservationsReturnToZero) {
  // A budget of exactly two reservations of (prompt + 60) tokens: never more than two run.
  const auto g = greedy("In the beginning God created", 60);
  SchedulerOptions probe = options("dense", 64 << 20);
  Scheduler sizing(kjv().model, *kjv().tok, probe);
  const size_t need = sizing.reservation(g.prompt.size() + 60);
  Scheduler s(kjv().model, *kjv().tok, options("dense", 2 * need + need / 2));
  std::vector<std::shared_ptr<RequestHandle>> handles;
  for (int i = 0; i < 5; ++i) handles.push_back(submit(s, g));
  for (auto& h : handles) EXPECT_EQ(wait(*h).finish, "length");
  wait_idle(s);
  const auto m = s.metrics();
  EXPECT_EQ(m.peak_running, 2u);
  EXPECT_EQ(m.kv_reserved, 0u);
  EXPECT_EQ(m.kv_tokens, 0u);
  EXPECT_EQ(m.kv_allocated, m.prefix_cache_bytes);  // only stored prefixes remain
  EXPECT_LE(m.peak_kv_allocated, m.kv_budget);
  EXPECT_EQ(m.requests_finished_total, 5u);
}

TEST(ServerScheduler, RefusesWhatCanNeverFitAndWhatOverflowsTheQueue) {
  Scheduler s(kjv().model, *kjv().tok, options("dense", 1 << 20, 1, 1));
  std::string why;
  auto h = std::make_shared<RequestHandle>();
  // Longer than the context.
  GenerationRequest too_long;
  too_long.prompt.assign(static_cast<size_t>(s.context()), 5);
  EXPECT_EQ(s.submit(too_long, h, &why), Scheduler::Admission::prompt_too_long);
  EXPECT_NE(why.find("context"), std::string::npos) << why;
  // More KV than the whole budget (1 MiB holds fewer than 256 dense tokens of this model? check).
  GenerationRequest big = greedy("In the beginning", s.context() - 10);
  if (s.reservation(big.prompt.size() + big.max_tokens) > (1u << 20)) {
    EXPECT_EQ(s.submit(big, h, &why), Scheduler::Admission::too_large);
  }
  // One running, one waiting, the rest rejected.
  auto g = greedy("In the beginning", 120);
  g.ignore_eos = true;
  auto a = submit(s, g);
  for (int i = 0; i < 20000 && s.metrics().running == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ASSERT_EQ(s.metrics().running, 1u);
  auto b = submit(s, g);
  int rejected = 0;
  for (int i = 0; i < 3; ++i) {
    rejected += s.submit(g, std::make_shared<RequestHandle>(), &why) == Scheduler::Admission::queue_full;
  }
  EXPECT_EQ(rejected, 3);
  EXPECT_EQ(s.metrics().requests_rejected_total, 3u);
  EXPECT_EQ(wait(*a).finish, "length");
  EXPECT_EQ(wait(*b).finish, "length");
}

TEST(ServerScheduler, CancelFreesTheSequenceWithinAStep) {
  Scheduler s(kjv().model, *kjv().tok, options("turboquant:bits=4", 64 << 20));
  auto g = greedy("In the beginning", 200);
  g.ignore_eos = true;
  auto h = submit(s, g);
  StreamEvent ev;
  ASSERT_TRUE(h->wait_next(ev, std::chrono::seconds(30)));  // it is running
  h->cancel();
  for (int i = 0; i < 2000 && s.metrics().requests_cancelled_total == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  wait_idle(s);
  const auto m = s.metrics();
  EXPECT_EQ(m.requests_cancelled_total, 1u);
  EXPECT_EQ(m.kv_reserved, 0u);
  EXPECT_LT(m.generated_tokens_total, 200u);
}

// Issue 26, finding 7: queued requests whose clients left were dropped at admission without
// updating the gauge, so requests_waiting stayed at 48 with nothing waiting.
TEST(ServerScheduler, CancelledQueuedRequestsLeaveTheWaitingGauge) {
  Scheduler s(kjv().model, *kjv().tok, options("turboquant:bits=4", 64 << 20, 1, 64));
  auto g = greedy("In the beginning", 240);
  g.ignore_eos = true;
  auto running = submit(s, g);
  StreamEvent ev;
  ASSERT_TRUE(running->wait_next(ev, std::chrono::seconds(30)));  // it holds the only slot
  std::vector<std::shared_ptr<RequestHandle>> queued;
  for (int i = 0; i < 48; ++i) queued.push_back(submit(s, g));
  EXPECT_EQ(s.metrics().waiting, 48u);
  for (auto& h : queued) h->cancel();
  for (int i = 0; i < 2000 && s.metrics().requests_cancelled_total < 48; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  const auto m = s.metrics();
  EXPECT_EQ(m.requests_cancelled_total, 48u);
  EXPECT_EQ(m.waiting, 0u);
  EXPECT_EQ(m.running, 1u);
  running->cancel();
  wait_idle(s);
}

TEST(ServerScheduler, PrefixReuseAnswersExactlyAsRecomputation) {
  // The last is serve's default cache (int8 attention, which a restored prefix once lost).
  for (const std::string cache : {"turboquant:bits=4,window=32,sinks=1", "dense", "turboquant:bits=3",
                                  "turboquant:bits=4,window=32,sinks=1,exact=f16,attention=int8"}) {
    SCOPED_TRACE(cache);
    SchedulerOptions off = options(cache, 64 << 20);
    off.prefix_cache = false;
    Scheduler plain(kjv().model, *kjv().tok, off);
    Scheduler reuse(kjv().model, *kjv().tok, options(cache, 64 << 20));
    const std::string base = "And the LORD God formed man of the dust of the ground, and breathed into his nostrils";
    auto first = greedy(base + " the breath of life", 30);
    auto second = greedy(base + " and man became a living soul", 30);
    const Result want = wait(*submit(plain, second));
    EXPECT_EQ(want.usage.cached_tokens, 0u);
    const Result r1 = wait(*submit(reuse, first));
    EXPECT_EQ(r1.usage.cached_tokens, 0u);
    // The second prompt shares the first's start: it stores where they part, and the third
    // (the same again) restores that.
    const Result miss = wait(*submit(reuse, second));
    EXPECT_EQ(miss.usage.cached_tokens, 0u);
    EXPECT_EQ(miss.text, want.text);
    // A third prompt with the same start restores at least the shared pages (the point where
    // the first two parted), and answers as recomputation does.
    auto third = greedy(base + " in the garden eastward in Eden", 30);
    size_t common = 0;
    while (common < first.prompt.size() && first.prompt[common] == second.prompt[common]) ++common;
    const Result want3 = wait(*submit(plain, third));
    const Result r2 = wait(*submit(reuse, third));
    EXPECT_GE(r2.usage.cached_tokens, common / 16 * 16);
    EXPECT_GE(r2.usage.cached_tokens, 16u);
    EXPECT_EQ(r2.text, want3.text);
    EXPECT_EQ(reuse.metrics().prefix_cache_hits_total, 1u);
    // A repeated prompt restores all of it but its last page's worth.
    const Result again = wait(*submit(reuse, first));
    EXPECT_EQ(again.usage.cached_tokens, (first.prompt.size() - 1) / 16 * 16);
    EXPECT_EQ(again.text, r1.text);
  }
}

TEST(ServerScheduler, SlidingWindowRingsReuseOnlyPrefixesTheyCanContinue) {
  // The kjv model with every other layer sliding over 24 positions: those layers free their
  // pages behind the window (rings), stored prefixes hold only the rings, and a request that
  // branches off an earlier point of a long conversation (it shares M tokens of a stored
  // N-token prefix, M < N, so it needs positions the N-token rings freed) answers exactly as
  // computing it whole, as does every restored prefix.
  engine::Model model = engine::load_model(kjv().model.path);
  model.config.sliding_window = 24;
  model.config.swa_pattern = 2;
  std::string base;
  for (const char* verse : {"In the beginning God created the heaven and the earth.",
                            " And the earth was without form, and void; and darkness was upon the face of the deep.",
                            " And the Spirit of God moved upon the face of the waters.",
                            " And God said, Let there be light: and there was light.",
                            " And God saw the light, that it was good: and God divided the light from the darkness.",
                            " And God called the light Day, and the darkness he called Night."}) {
    base += verse;
  }
  const auto& tok = *kjv().tok;
  for (const std::string cache : {"turboquant:bits=4,window=32,sinks=1,exact=f16,attention=int8",
                                  "turboquant:bits=4,window=32,sinks=1,exact=f16,attention=int8,sliding=same"}) {
    SCOPED_TRACE(cache);
    SchedulerOptions off = options(cache, 64 << 20);
    off.prefix_cache = false;
    Scheduler plain(model, tok, off);
    Scheduler reuse(model, tok, options(cache, 64 << 20));
    const auto first = tok.encode(base + " And the evening and the morning were the first day.", true);
    ASSERT_GT(first.size(), 120u);
    // The whole conversation twice: the second run restores its stored prefix (N tokens).
    const auto r1 = test::run(reuse, first);
    const auto again = test::run(reuse, first);
    EXPECT_EQ(again.usage.cached_tokens, (first.size() - 1) / 16 * 16);
    EXPECT_EQ(again.text, r1.text);
    EXPECT_EQ(again.text, test::run(plain, first).text);
    // Branches off earlier points: the first M tokens, then other text.
    for (const size_t m : {size_t{40}, size_t{70}, first.size() - 20}) {
      std::vector<int> branch(first.begin(), first.begin() + static_cast<long>(m));
      const auto tail = tok.encode(" And God blessed them, saying, Be fruitful", false);
      branch.insert(branch.end(), tail.begin(), tail.end());
      const auto want = test::run(plain, branch);
      const auto got = test::run(reuse, branch);
      ASSERT_TRUE(got.error.empty()) << got.error;
      EXPECT_LE(got.usage.cached_tokens, m);
      EXPECT_EQ(got.text, want.text) << "branch at " << m;
      // And once more: the branch point is stored now and restores.
      const auto repeat = test::run(reuse, branch);
      EXPECT_EQ(repeat.text, want.text) << "branch at " << m;
    }
  }
}

// A prompt scored with max_tokens 0 (lm-evaluation-harness's loglikelihood): every token after
// the first gets log softmax of the logits before it, as the engine's teacher-forced evaluation
// (Forward::run_all_logits over the same cache configuration and page cuts, token_nll) computes
// it; nothing is generated; a repeat is computed again (the logits of every position are needed,
// so no stored prefix is restored) and gives the same bits.
TEST(ServerScheduler, PromptLogprobsAreTheTeacherForcedOnes) {
  const std::string prompt_text =
      "And God said, Let there be light: and there was light. And God saw the light, that it was good";
  for (const std::string cache : {"dense", "turboquant:bits=4,window=32,sinks=1"}) {
    SCOPED_TRACE(cache);
    Scheduler s(kjv().model, *kjv().tok, options(cache, 64 << 20));
    GenerationRequest g = greedy(prompt_text, 0);
    g.logprobs = 2;
    g.prompt_logprobs = true;
    const std::vector<int> prompt = g.prompt;
    ASSERT_GT(prompt.size(), 40u);  // five chunks of 8
    const Result first = wait(*submit(s, g));
    const Result again = wait(*submit(s, g));
    ASSERT_EQ(first.error, "");
    EXPECT_EQ(first.finish, "length");
    EXPECT_EQ(first.text, "");
    EXPECT_EQ(first.usage.completion_tokens, 0u);
    EXPECT_EQ(first.prompt_events, 1);
    EXPECT_EQ(again.usage.cached_tokens, 0u);
    ASSERT_EQ(first.prompt_logprobs.size(), prompt.size() - 1);
    ASSERT_EQ(again.prompt_logprobs.size(), prompt.size() - 1);

    ThreadPool pool(2);
    engine::Forward forward(kjv().model, pool, 8);  // the server's chunks: half its pages of 16
    const auto& c = kjv().model.config;
    PromptCache ref = make_prompt_cache(c.n_layers, c.n_kv_heads, c.head_dim,
                                        parse_cache_config(cache + (cache == "dense" ? ":" : ",") + "page_tokens=16"));
    std::vector<KVCache*> layers;
    for (size_t l = 0; l < ref.n_layers(); ++l) layers.push_back(&ref.layer(l));
    const size_t vocab = static_cast<size_t>(c.vocab_size);
    std::vector<float> logits(prompt.size() * vocab);
    forward.run_all_logits(prompt, layers, logits);
    double worst = 0;
    for (size_t i = 0; i + 1 < prompt.size(); ++i) {
      const engine::TokenLogprob& lp = first.prompt_logprobs[i];
      const std::span<const float> row(logits.data() + i * vocab, vocab);
      EXPECT_EQ(lp.token, prompt[i + 1]);
      worst = std::max(worst, std::abs(lp.logprob + engine::token_nll(row, prompt[i + 1])));
      ASSERT_EQ(lp.top.size(), 2u);
      EXPECT_EQ(lp.top[0].first, engine::argmax(row)) << "position " << i;
      EXPECT_GE(lp.top[0].second, lp.top[1].second);
      EXPECT_GE(lp.top[0].second, lp.logprob);
      EXPECT_EQ(lp.logprob, again.prompt_logprobs[i].logprob) << "position " << i;
    }
    EXPECT_LT(worst, 2e-4);  // measured: 2.4e-5 dense, 1.6e-6 TurboQuant (Forward multiplies chunks in float)
  }
}

// Greedy generation with logprobs: each generated token is the most likely one, reported with its
// log-probability; logit_bias and the penalties reach the scheduler's sampler.
TEST(ServerScheduler, GeneratedLogprobsBiasAndPenalties) {
  Scheduler s(kjv().model, *kjv().tok, options("turboquant:bits=4,window=32,sinks=1", 64 << 20));
  GenerationRequest g = greedy("In the beginning", 24);
  g.logprobs = 1;
  const Result plain = wait(*submit(s, g));
  ASSERT_EQ(plain.logprobs.size(), 24u);
  std::string text;
  int prev = g.prompt.back();
  std::map<int, int> count;
  for (const auto& lp : plain.logprobs) {
    ASSERT_EQ(lp.top.size(), 1u);
    EXPECT_EQ(lp.token, lp.top[0].first);
    EXPECT_EQ(lp.logprob, lp.top[0].second);
    EXPECT_LT(lp.logprob, 0.0f);
    text += kjv().tok->token_text(prev, lp.token);
    prev = lp.token;
    ++count[lp.token];
  }
  EXPECT_EQ(text, plain.text);

  // A +100 bias makes one token the only choice.
  const int forced = kjv().tok->encode(" light", false).back();
  GenerationRequest biased = g;
  biased.sampling.logit_bias = {{forced, 100.0f}};
  for (const auto& lp : wait(*submit(s, biased)).logprobs) EXPECT_EQ(lp.token, forced);
  // The end-of-generation token (forced the same way) has no text but its log-probability.
  GenerationRequest ends = g;
  ends.sampling.logit_bias = {{kjv().tok->eos_id(), 100.0f}};
  const Result ended = wait(*submit(s, ends));
  EXPECT_EQ(ended.finish, "stop");
  EXPECT_EQ(ended.text, "");
  EXPECT_EQ(ended.usage.completion_tokens, 1u);
  ASSERT_EQ(ended.logprobs.size(), 1u);
  EXPECT_EQ(ended.logprobs[0].token, kjv().tok->eos_id());

  // A frequency penalty of 2 stops greedy decoding from repeating its most frequent token as often.
  int most = 0;
  for (const auto& [t, n] : count) most = std::max(most, n);
  ASSERT_GE(most, 3) << "the unpenalized text repeats a token (the test needs one)";
  GenerationRequest penalized = g;
  penalized.sampling.frequency_penalty = 2.0f;
  std::map<int, int> penalized_count;
  for (const auto& lp : wait(*submit(s, penalized)).logprobs) ++penalized_count[lp.token];
  int penalized_most = 0;
  for (const auto& [t, n] : penalized_count) penalized_most = std::max(penalized_most, n);
  EXPECT_LT(penalized_most, most);
  EXPECT_GT(penalized_count.size(), count.size());
  wait_idle(s);
  EXPECT_EQ(s.metrics().kv_reserved, 0u);
}

// Requests for one prompt at once (an n-choice request): the first computes it, the others wait
// for its stored prefix and compute only what follows it, and each answers as it would alone.
TEST(ServerScheduler, OnePromptForManyChoicesIsComputedOnce) {
  const std::string text = "And God said, Let there be light: and there was light. And God saw the light, that it was good";
  GenerationRequest g = greedy(text, 12);
  g.sampling.temperature = 1.0f;
  const size_t n = g.prompt.size();
  ASSERT_GT(n, 40u);
  std::vector<std::string> solo;  // each choice alone, on a scheduler with nothing stored
  for (uint64_t seed = 0; seed < 3; ++seed) {
    Scheduler alone(kjv().model, *kjv().tok, options("turboquant:bits=4,window=32,sinks=1", 64 << 20));
    GenerationRequest one = g;
    one.sampling.seed = seed;
    solo.push_back(wait(*submit(alone, one)).text);
  }
  Scheduler s(kjv().model, *kjv().tok, options("turboquant:bits=4,window=32,sinks=1", 64 << 20));
  std::vector<std::shared_ptr<RequestHandle>> handles;
  for (uint64_t seed = 0; seed < 3; ++seed) {
    GenerationRequest one = g;
    one.sampling.seed = seed;
    handles.push_back(submit(s, one));
  }
  const size_t stored = (n - 1) / 16 * 16;  // the prompt's last page boundary before its end
  for (size_t i = 0; i < handles.size(); ++i) {
    const Result r = wait(*handles[i]);
    EXPECT_EQ(r.text, solo[i]) << "choice " << i;
    EXPECT_EQ(r.usage.cached_tokens, i == 0 ? 0u : stored) << "choice " << i;
  }
  EXPECT_EQ(s.metrics().prompt_tokens_computed_total, n + 2 * (n - stored));
}

// A prompt of `n` tokens: `lead` then Genesis 1 until it is long enough.
GenerationRequest long_prompt(const std::string& lead, size_t n, int max_tokens) {
  std::string text = lead;
  while (kjv().tok->encode(text, true).size() < n) {
    text += " In the beginning God created the heaven and the earth. And the earth was without form, and void; and "
            "darkness was upon the face of the deep. And the Spirit of God moved upon the face of the waters.";
  }
  GenerationRequest g = greedy(text, max_tokens);
  g.prompt.resize(n);
  return g;
}

SchedulerOptions step_options(double max_step_ms) {
  SchedulerOptions o = options("turboquant:bits=4,window=32,sinks=1", 64 << 20);
  o.chunk_tokens = 8;  // half a page
  o.max_step_ms = max_step_ms;
  o.prefix_cache = false;
  return o;
}

// The step budget decides when a prompt's chunks run, never where it is cut: long prompts (many
// chunks) answer the same alone, in a mix whose steps carry one chunk beside the decoding
// sequences (a budget nothing fits in), and in a mix whose steps fill up to step_tokens.
TEST(ServerScheduler, TheStepBudgetChangesTimingNotText) {
  std::vector<GenerationRequest> requests;
  for (size_t i = 0; i < 4; ++i) requests.push_back(long_prompt(kPrompts[i], 60 + 37 * i, 24));
  std::vector<std::string> solo;
  {
    Scheduler s(kjv().model, *kjv().tok, step_options(0));
    for (const auto& g : requests) solo.push_back(wait(*submit(s, g)).text);
  }
  for (const double max_step_ms : {1e-6, 0.0}) {
    Scheduler s(kjv().model, *kjv().tok, step_options(max_step_ms));
    std::vector<std::shared_ptr<RequestHandle>> handles;
    for (const auto& g : requests) {
      handles.push_back(submit(s, g));
      std::this_thread::sleep_for(std::chrono::milliseconds(3));  // arrivals mid-prefill and mid-decode
    }
    for (size_t i = 0; i < handles.size(); ++i) {
      EXPECT_EQ(wait(*handles[i]).text, solo[i]) << "request " << i << ", max_step_ms " << max_step_ms;
    }
    EXPECT_GE(s.metrics().peak_running, 2u);
  }
}

// Decode first: while a long prompt is computed, a sequence that streams gets its token in every
// step, with a target no step meets (the prompt then advances by what twice the decode rows'
// time allows, at least a chunk) and without one (the prompt takes whole steps, through in a
// few). How many chunks a timed step takes depends on the machine's speed: StepCost's tests
// check that arithmetic.
TEST(ServerScheduler, AStreamGetsATokenEveryStepWhileAPromptIsComputed) {
  for (const double max_step_ms : {1e-6, 0.0}) {
    Scheduler s(kjv().model, *kjv().tok, step_options(max_step_ms));
    GenerationRequest long_one = long_prompt("Blessed are the meek", 200, 4);  // 25 chunks of 8
    long_one.ignore_eos = true;  // its first token never ends it in the step that counts
    auto streaming = submit(s, greedy("And God said unto Moses", 150));
    StreamEvent ev;
    ASSERT_TRUE(streaming->wait_next(ev, std::chrono::seconds(60)));
    ASSERT_EQ(ev.kind, StreamEvent::Kind::text);
    // Steps that carried the prompt's rows: counting all steps since the submission would also
    // count the stream's decode-only steps (about a millisecond each on this model) while this
    // thread builds and submits the prompt, which a loaded machine stretches (13 steps once).
    const uint64_t before = s.metrics().prompt_steps_total;
    auto prompt = submit(s, long_one);
    ASSERT_TRUE(prompt->wait_next(ev, std::chrono::seconds(60)));
    ASSERT_EQ(ev.kind, StreamEvent::Kind::text);
    int tokens = 0;  // what the stream got meanwhile
    while (streaming->wait_next(ev, std::chrono::milliseconds(0))) tokens += ev.kind == StreamEvent::Kind::text ? 1 : 0;
    // A step counts itself after it has sent its tokens, so the prompt's last step may not be
    // counted yet when its first token arrives; its three decode steps later it is.
    wait(*prompt);
    const uint64_t steps = s.metrics().prompt_steps_total - before;
    EXPECT_GE(tokens, static_cast<int>(steps) - 2) << "a token in every step; max_step_ms " << max_step_ms;
    EXPECT_GE(steps, 2u);
    if (max_step_ms == 0) {
      EXPECT_LE(steps, 4u) << "200 rows in steps of up to 128";
    }
    streaming->cancel();
  }
}

TEST(ServerScheduler, RefusesChunksThatSplitPagesAndBadStepTargets) {
  SchedulerOptions o = step_options(100);
  o.chunk_tokens = 6;  // pages of 16
  EXPECT_THROW(Scheduler(kjv().model, *kjv().tok, o), Error);
  o.chunk_tokens = 16;
  o.max_step_ms = std::nan("");
  EXPECT_THROW(Scheduler(kjv().model, *kjv().tok, o), Error);
  o.max_step_ms = -1;
  EXPECT_THROW(Scheduler(kjv().model, *kjv().tok, o), Error);
  o.max_step_ms = 250;
  EXPECT_NO_THROW(Scheduler(kjv().model, *kjv().tok, o));
}

TEST(KvFootprint, ReservationBoundsWhatCachesAllocate) {
  const auto& c = kjv().model.config;
  for (const std::string spec : {"dense:page_tokens=16", "turboquant:bits=4,window=32,sinks=1,page_tokens=16",
                                 "turboquant:key_bits=3,value_bits=2,page_tokens=16",
                                 // per-layer widths (tq4's kind) and a dense layer: each layer's own bytes
                                 "turboquant:key_bits=3,value_bits=2.5,layer_bits=0k4v4;-1k5v4,sinks=1,window=4,exact=f16,"
                                 "dense_layers=1,page_tokens=16"}) {
    const CacheConfig config = parse_cache_config(spec);
    const KvFootprint fp(config, c.n_layers, c.n_kv_heads, c.head_dim, 200, 16);
    std::mt19937 rng(5);
    auto cache = make_prompt_cache(c.n_layers, c.n_kv_heads, c.head_dim, config);
    std::vector<float> kv(static_cast<size_t>(c.n_kv_heads) * c.head_dim * 20, 0.5f);
    size_t n = 0;
    while (n < 200) {
      const size_t count = std::min<size_t>(200 - n, 1 + rng() % 20);
      for (size_t l = 0; l < cache.n_layers(); ++l) {
        cache.layer(l).append(std::span<const float>(kv.data(), count * c.n_kv_heads * c.head_dim),
                              std::span<const float>(kv.data(), count * c.n_kv_heads * c.head_dim), count);
      }
      n += count;
      EXPECT_LE(allocated_bytes(cache), fp.reservation(n)) << spec << " at " << n;
      // Not a loose bound: within a page of tokens and the window's spare capacity.
      EXPECT_LE(fp.reservation(n), allocated_bytes(cache) + fp.reservation(48) + 4096) << spec << " at " << n;
    }
    EXPECT_THROW(fp.reservation(201), Error);
  }
}

TEST(KvFootprint, SlidingLayersReserveTheirRingNotEveryToken) {
  // Every other layer slides over 40 positions and frees behind it as the decoder does
  // (drop_before after each append): the reservation still bounds what the caches allocate, and
  // the sliding layers' part stops growing, so a long sequence reserves far less.
  const auto& c = kjv().model.config;
  std::vector<size_t> windows(static_cast<size_t>(c.n_layers), 0);
  for (size_t l = 0; l < windows.size(); l += 2) windows[l] = 40;
  for (const std::string spec : {"dense:page_tokens=16", "turboquant:bits=4,window=8,sinks=1,exact=f16,page_tokens=16",
                                 "turboquant:bits=4,window=8,sinks=1,exact=f16,page_tokens=16,sliding=same"}) {
    const CacheConfig config = parse_cache_config(spec);
    const KvFootprint ring(config, c.n_layers, c.n_kv_heads, c.head_dim, 400, 16, windows);
    const KvFootprint full(config, c.n_layers, c.n_kv_heads, c.head_dim, 400, 16);
    std::mt19937 rng(6);
    // Sliding layers dense (the default) or as the others (sliding=same), as the footprint counts.
    auto cache = make_prompt_cache(c.n_layers, c.n_kv_heads, c.head_dim, config, windows);
    EXPECT_EQ(cache.layer(0).class_name(), config.sliding == "same" ? config.kind : std::string("dense")) << spec;
    EXPECT_EQ(cache.layer(1).class_name(), config.kind) << spec;
    std::vector<float> kv(static_cast<size_t>(c.n_kv_heads) * c.head_dim * 16, 0.5f);
    size_t n = 0;
    while (n < 400) {
      const size_t count = std::min<size_t>(400 - n, 1 + rng() % 16);
      n += count;
      for (size_t l = 0; l < cache.n_layers(); ++l) {
        const std::span<const float> part(kv.data(), count * c.n_kv_heads * c.head_dim);
        cache.layer(l).append(part, part, count);
      }
      EXPECT_LE(allocated_bytes(cache), ring.reservation(n)) << spec << " at " << n;
      for (size_t l = 0; l < cache.n_layers(); ++l) {
        if (windows[l] > 0) cache.layer(l).drop_before(sliding_window_keep_from(n, windows[l]));
      }
    }
    // Sliding layers flat past window + a block + pages; the global ones grow per token.
    const size_t per_token_global = (full.reservation(400) - full.reservation(200)) / 2;
    EXPECT_LE(ring.reservation(400) - ring.reservation(200), per_token_global + 4096) << spec;
    // Same class on every layer: half the layers hold ~120 positions instead of 400.
    if (config.kind == "dense" || config.sliding == "same") {
      EXPECT_LT(ring.reservation(400), full.reservation(400) * 3 / 4) << spec;
    }
    EXPECT_THROW(KvFootprint(config, c.n_layers, c.n_kv_heads, c.head_dim, 10, 16, std::vector<size_t>{40}), Error);
  }
}

TEST(TextStream, StopStringsAcrossTokensAndUtf8HoldBack) {
  const auto& tok = *kjv().tok;
  const auto ids = tok.encode("And God said, Let there be light", true);
  TextStream plain(tok, ids[0], {});
  std::string all;
  for (size_t i = 1; i < ids.size(); ++i) all += plain.add(ids[i]);
  all += plain.flush();
  EXPECT_EQ(all, tok.decode_all(ids));
  TextStream stopping(tok, ids[0], {"Let th", "never"});
  std::string got;
  for (size_t i = 1; i < ids.size(); ++i) {
    got += stopping.add(ids[i]);
    if (stopping.stopped()) break;
  }
  EXPECT_TRUE(stopping.stopped());
  EXPECT_EQ(got, all.substr(0, all.find("Let th")));
  EXPECT_EQ(complete_utf8_prefix("ab\xC3"), 2u);
  EXPECT_EQ(complete_utf8_prefix("ab\xC3\xA9"), 4u);
  EXPECT_EQ(complete_utf8_prefix("\xE2\x82"), 0u);
  EXPECT_EQ(complete_utf8_prefix("\xF0\x9F\x98\x80"), 4u);
}

TEST(ServerOptions, ByteSizes) {
  EXPECT_EQ(parse_byte_size("512MiB"), 512u << 20);
  EXPECT_EQ(parse_byte_size("2GiB"), 2ull << 30);
  EXPECT_EQ(parse_byte_size("1000"), 1000u);
  EXPECT_EQ(parse_byte_size("3MB"), 3000000u);
  for (const char* bad : {"", "MiB", "12XB", "-5", "99999999999999999999", "4096000GiB"}) {
    EXPECT_THROW(parse_byte_size(bad), Error) << bad;
  }
}

}  // namespace
}  // namespace turbokv::server
