// Multiple-choice scoring through `turbokv serve` (a child process) the way lm-evaluation-harness's
// local-completions model does it: the context and a continuation as token ids, echo: true,
// logprobs: 1, max_tokens: 0 (or 1, its newer form, dropping the generated token), summing the
// continuation tokens' token_logprobs. The sums must be the engine's teacher-forced
// log-likelihoods of the same tokens (Forward::run_all_logits over the same cache configuration,
// negated token_nll as `turbokv eval` computes it), within float tolerance, so the chosen
// answers are the same; with a dense cache and with a TurboQuant cache whose window is smaller
// than the prompts (so compressed keys and values are scored). A batch (all of an item's
// continuations in one request, as the harness sends with batch_size > 1) scores each the same.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <string>
#include <vector>

#include "engine/eval/evaluate.hpp"
#include "engine/model/model.hpp"
#include "engine/runtime/forward.hpp"
#include "engine/tokenizer/tokenizer_factory.hpp"
#include "serve_process.hpp"
#include "skip_policy.hpp"
#include "turbokv/prompt_cache.hpp"

namespace {

using namespace turbokv::test;
using nlohmann::json;

struct Item {
  std::string context;
  std::vector<std::string> continuations;
};

const std::vector<Item> kItems = {
    {"In the beginning God created the", {" heaven and the earth.", " sea", " light of the day", " children of Israel"}},
    {"And God said, Let there be", {" light: and there was light.", " darkness", " a king over Israel"}},
    {"The LORD is my shepherd; I shall not", {" want.", " die.", " eat bread"}},
};

// The context's tokens and the continuation's, as lm-evaluation-harness splits them: the whole
// text encoded once, the context's part being the context's own encoding.
struct Request {
  std::vector<int> tokens;
  size_t context = 0;
};

Request split(const turbokv::engine::Tokenizer& tok, const Item& item, const std::string& continuation) {
  Request r;
  r.tokens = tok.encode(item.context + continuation, true);
  r.context = tok.encode(item.context, true).size();
  return r;
}

// The server's sums of the continuations' token_logprobs, one request for all (max_tokens 0:
// every token is the prompt's; max_tokens 1: the last is the generated one, dropped as
// lm-evaluation-harness does).
std::vector<double> served(const Serve& s, const std::vector<Request>& requests, int max_tokens) {
  json prompts = json::array();
  for (const Request& r : requests) prompts.push_back(r.tokens);
  const json body = {{"prompt", requests.size() == 1 ? prompts[0] : prompts}, {"max_tokens", max_tokens},
                     {"echo", true}, {"logprobs", 1}, {"temperature", 0}};
  const std::string response = s.post("/v1/completions", body.dump(), 60000ms);
  EXPECT_EQ(status_of(response), 200) << response;
  const json answer = json::parse(body_of(response), nullptr, false);
  if (answer.is_discarded() || !answer.contains("choices") || answer["choices"].size() != requests.size()) {
    ADD_FAILURE() << response;
    return std::vector<double>(requests.size(), NAN);
  }
  EXPECT_EQ(answer["usage"]["completion_tokens"], max_tokens * static_cast<int>(requests.size()));
  std::vector<double> sums;
  for (size_t k = 0; k < requests.size(); ++k) {
    const Request& r = requests[k];
    const json& choice = answer["choices"][k];
    EXPECT_EQ(choice["index"], k);
    const json& values = choice["logprobs"]["token_logprobs"];
    EXPECT_EQ(values.size(), r.tokens.size() + static_cast<size_t>(max_tokens));
    EXPECT_TRUE(values[0].is_null());
    EXPECT_TRUE(choice["logprobs"]["top_logprobs"][0].is_null());
    double sum = 0;
    for (size_t i = r.context; i < r.tokens.size(); ++i) sum += values[i].get<double>();
    sums.push_back(sum);
  }
  return sums;
}

// The engine's teacher-forced log-likelihood of the continuation.
double reference(const turbokv::engine::Model& model, const std::string& spec, const Request& r) {
  turbokv::ThreadPool pool(2);
  turbokv::engine::Forward forward(model, pool, 16);  // the server's prompt chunks (half its pages of 32)
  const auto& c = model.config;
  turbokv::PromptCache cache = turbokv::make_prompt_cache(
      c.n_layers, c.n_kv_heads, c.head_dim,
      turbokv::parse_cache_config(spec + (spec.find(':') == std::string::npos ? ":" : ",") + "page_tokens=32"));
  std::vector<turbokv::KVCache*> layers;
  for (size_t l = 0; l < cache.n_layers(); ++l) layers.push_back(&cache.layer(l));
  const size_t vocab = static_cast<size_t>(c.vocab_size);
  std::vector<float> logits(r.tokens.size() * vocab);
  forward.run_all_logits(r.tokens, layers, logits);
  double sum = 0;
  for (size_t i = r.context; i < r.tokens.size(); ++i) {
    sum -= turbokv::engine::token_nll(std::span<const float>(logits).subspan((i - 1) * vocab, vocab), r.tokens[i]);
  }
  return sum;
}

TEST(ServeLoglikelihood, EchoLogprobsScoreMultipleChoiceAsTheEngine) {
  if (!have_tool()) TURBOKV_SKIP_MISSING() << "turbokv tool not built";
  const std::string model_path = std::string(TURBOKV_MODELS_DIR) + "/kjv-llama-3M.bin";
  const turbokv::engine::Model model = turbokv::engine::load_model(model_path);
  const auto tok = turbokv::engine::load_tokenizer_for_model(model);
  std::vector<std::vector<double>> by_cache;
  for (const std::string spec : {"dense", "turboquant:bits=4,window=4,sinks=1"}) {
    SCOPED_TRACE(spec);
    Serve s({"--model", model_path, "--cache", spec, "--parallel", "4"});
    ASSERT_TRUE(s.ready());
    std::vector<double> sums;
    double worst = 0;
    for (const Item& item : kItems) {
      size_t served_choice = 0, reference_choice = 0;
      std::vector<double> got, want;
      std::vector<Request> requests;
      for (const std::string& continuation : item.continuations) {
        const Request r = split(*tok, item, continuation);
        ASSERT_GT(r.tokens.size(), r.context) << continuation;
        ASSERT_GT(r.tokens.size(), 4u + 1u) << "the prompt must outgrow the window";
        got.push_back(served(s, {r}, 0)[0]);
        want.push_back(reference(model, spec, r));
        worst = std::max(worst, std::abs(got.back() - want.back()));
        EXPECT_LT(got.back(), 0.0);
        requests.push_back(r);
      }
      // The batch, with lm-evaluation-harness's newer request (max_tokens 1): the same bits.
      EXPECT_EQ(served(s, requests, 1), got) << item.context;
      for (size_t i = 1; i < got.size(); ++i) {
        if (got[i] > got[served_choice]) served_choice = i;
        if (want[i] > want[reference_choice]) reference_choice = i;
      }
      EXPECT_EQ(served_choice, reference_choice) << item.context;
      sums.insert(sums.end(), got.begin(), got.end());
    }
    // Measured: 2.0e-5 (dense), 1.9e-6 (TurboQuant); BatchForward's rows differ from Forward's
    // float prefill in the last bits (docs/architecture.md).
    EXPECT_LT(worst, 1e-3);
    std::printf("%s: largest |served - engine| of a continuation's log-likelihood: %.3g\n", spec.c_str(), worst);
    by_cache.push_back(sums);
    EXPECT_GE(s.terminate(30s), 0.0);
  }
  // The --cache flag reached the scores: 4-bit codes outside a window of 4 change them.
  double moved = 0;
  for (size_t i = 0; i < by_cache[0].size(); ++i) moved = std::max(moved, std::abs(by_cache[0][i] - by_cache[1][i]));
  EXPECT_GT(moved, 1e-3);
  std::printf("largest |dense - TurboQuant| of a log-likelihood: %.3g\n", moved);
}

}  // namespace
