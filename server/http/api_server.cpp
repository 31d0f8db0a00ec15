#include "server/http/api_server.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <map>
#include <mutex>
#include <optional>
#include <span>
#include <nlohmann/json.hpp>

#include "server/http/metrics_text.hpp"
#include "server/http/openai_request.hpp"
#include "server/http/chat_reply.hpp"
#include "turbokv/error.hpp"

namespace turbokv::server {

using nlohmann::json;

struct ApiServer::Counters {
  std::mutex mutex;
  std::map<int, uint64_t> responses;  // by HTTP status
  std::atomic<uint64_t> next_id{1};
  void count(int status) {
    std::lock_guard lock(mutex);
    ++responses[status];
  }
};

namespace {

// Invalid UTF-8 (a model can emit any bytes) becomes U+FFFD instead of an exception.
std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

json error_body(const std::string& message, const std::string& type, const std::string& code,
                const std::string& param = "") {
  return {{"error",
           {{"message", message}, {"type", type}, {"code", code}, {"param", param.empty() ? json() : json(param)}}}};
}

HttpResponse error_response(const ApiError& e) {
  HttpResponse r;
  r.status = e.status;
  r.body = dump(error_body(e.what(), e.type, e.code, e.param));
  return r;
}

HttpResponse json_response(const json& body) { return HttpResponse{200, "application/json", dump(body), {}}; }

long long now_seconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

json usage_json(const Usage& u) {
  return {{"prompt_tokens", u.prompt_tokens},
          {"completion_tokens", u.completion_tokens},
          {"total_tokens", u.prompt_tokens + u.completion_tokens},
          // disk_tokens and store_tokens (not OpenAI fields; clients ignore them): the parts of
          // cached_tokens that came from this server's disk tier and from the shared prefix store
          // rather than its in-process prefix cache.
          {"prompt_tokens_details",
           {{"cached_tokens", u.cached_tokens}, {"disk_tokens", u.disk_tokens}, {"store_tokens", u.store_tokens}}}};
}

}  // namespace

size_t parse_byte_size(const std::string& text) {
  size_t i = 0;
  while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) ++i;
  if (i == 0 || i > 18) throw Error(fmt::format("'{}' is not a size (e.g. 512MiB, 2GiB, 1000000)", text));
  const unsigned long long number = std::stoull(text.substr(0, i));
  const std::string unit = text.substr(i);
  unsigned long long scale = 0;
  if (unit.empty() || unit == "B") scale = 1;
  else if (unit == "KiB" || unit == "K" || unit == "k") scale = 1ull << 10;
  else if (unit == "MiB" || unit == "M") scale = 1ull << 20;
  else if (unit == "GiB" || unit == "G") scale = 1ull << 30;
  else if (unit == "KB" || unit == "kB") scale = 1000ull;
  else if (unit == "MB") scale = 1000ull * 1000;
  else if (unit == "GB") scale = 1000ull * 1000 * 1000;
  else throw Error(fmt::format("'{}': unknown size unit '{}' (B, KiB, MiB, GiB, KB, MB, GB)", text, unit));
  if (number > (1ull << 50) / scale) throw Error(fmt::format("'{}' is too large", text));
  return static_cast<size_t>(number * scale);
}

ApiServer::ApiServer(HttpOptions options) : options_(std::move(options)), counters_(std::make_unique<Counters>()) {}

ApiServer::~ApiServer() { shutdown(std::chrono::milliseconds(0)); }

int ApiServer::listen() {
  http_ = std::make_unique<HttpServer>(
      options_.limits, [this](const HttpRequest& req) { return route(req); },
      [this](int status) { counters_->count(status); });
  return http_->listen(options_.host, options_.port);
}

void ApiServer::attach(const Backend& backend) {
  backend_storage_ = backend;
  backend_.store(&backend_storage_);
}

void ApiServer::shutdown(std::chrono::milliseconds grace) {
  stopping_.store(true);
  if (const Backend* b = backend_.load(); b != nullptr && b->scheduler != nullptr) b->scheduler->drain(grace);
  if (http_) http_->stop();
}

Reply ApiServer::route(const HttpRequest& req) {
  Reply reply;
  HttpResponse& res = reply.response;
  try {
    if (req.path == "/health" && req.method == "GET") {
      const bool ready = backend_.load() != nullptr && !stopping_.load();
      res = json_response({{"status", ready ? "ok" : (stopping_.load() ? "shutting down" : "loading model")}});
      res.status = ready ? 200 : 503;
    } else if (req.path == "/metrics" && req.method == "GET") {
      // With an API key, /metrics needs it too (the counts tell the traffic and the deployment),
      // unless --metrics-public; /health stays open for load balancers.
      if (options_.metrics_public || authorized(req, res)) res = metrics();
    } else if (req.path == "/v1/models" && req.method == "GET") {
      if (const Backend* b = guard(req, res)) {
        json model = {{"id", b->model_id}, {"object", "model"}, {"created", now_seconds()}, {"owned_by", "turbokv"},
                      {"meta",
                       {{"context", b->scheduler->context()},
                        {"vocab", b->model->config.vocab_size},
                        {"kv_cache", format_cache_config(b->scheduler->options().cache)}}}};
        res = json_response({{"object", "list"}, {"data", json::array({model})}});
      }
    } else if ((req.path == "/v1/completions" || req.path == "/v1/chat/completions") && req.method == "POST") {
      if (const Backend* b = guard(req, res)) return generate(req, *b, req.path == "/v1/chat/completions");
    } else {
      res = error_response(ApiError(404, "invalid_request_error", "not_found", fmt::format("no route {} {}", req.method, req.path)));
    }
  } catch (const ApiError& e) {
    res = error_response(e);
  } catch (const Error& e) {
    res = error_response(invalid_request(e.what()));
  } catch (const std::exception& e) {
    res = error_response(ApiError(500, "server_error", "internal_error", e.what()));
  }
  return reply;
}

bool ApiServer::authorized(const HttpRequest& req, HttpResponse& refusal) const {
  if (options_.api_key.empty()) return true;
  const std::string auth = req.header("Authorization");
  if (bearer_token_matches(auth, options_.api_key)) return true;
  refusal = error_response(ApiError(401, "invalid_request_error", "invalid_api_key",
                                    auth.empty() ? "missing API key (Authorization: Bearer ...)" : "incorrect API key"));
  return false;
}

const Backend* ApiServer::guard(const HttpRequest& req, HttpResponse& refusal) const {
  if (!authorized(req, refusal)) return nullptr;
  const Backend* b = backend_.load();
  if (b == nullptr || stopping_.load()) {
    refusal = error_response(ApiError(503, "server_error", "unavailable",
                                      b == nullptr ? "the model is still loading" : "the server is shutting down"));
    refusal.headers.emplace_back("Retry-After", "1");
    return nullptr;
  }
  return b;
}

HttpResponse ApiServer::metrics() const {
  std::string out;
  if (const Backend* b = backend_.load(); b != nullptr) out += scheduler_metrics_text(b->scheduler->metrics());
  {
    std::lock_guard lock(counters_->mutex);
    out += "# HELP turbokv_http_responses_total HTTP responses by status\n# TYPE turbokv_http_responses_total counter\n";
    for (const auto& [status, count] : counters_->responses) {
      out += fmt::format("turbokv_http_responses_total{{status=\"{}\"}} {}\n", status, count);
    }
  }
  return HttpResponse{200, "text/plain; version=0.0.4", out, {}};
}

namespace {

// What identifies a completion's chunks and body.
struct CompletionHeader {
  bool chat = false;
  std::string id;
  long long created = 0;
  std::string model;
  json body(json choices) const {
    return {{"id", id},
            {"object", chat ? "chat.completion" : "text_completion"},
            {"created", created},
            {"model", model},
            {"choices", std::move(choices)}};
  }
};

json utf8_bytes(const std::string& s) {
  json out = json::array();
  for (const char c : s) out.push_back(static_cast<unsigned char>(c));
  return out;
}

// Tokens' log-probabilities in OpenAI's shapes: completions {tokens, token_logprobs,
// top_logprobs, text_offset} (parallel arrays; text_offset in bytes of the choice's text),
// chat {content: [{token, logprob, bytes, top_logprobs: [{token, logprob, bytes}]}]}. Each
// add() returns its tokens' part (a streamed chunk's) and appends it to all() (the whole answer's).
class LogprobWriter {
 public:
  LogprobWriter(const engine::Tokenizer& tok, bool chat, int prev) : tok_(tok), chat_(chat), prev_(prev) {
    all_ = empty();
  }
  // `unscored`: a first token without a log-probability (the prompt's first, echoed).
  json add(std::span<const engine::TokenLogprob> tokens, std::optional<int> unscored = std::nullopt) {
    json part = empty();
    if (unscored) put(part, *unscored, std::nullopt, {});
    for (const auto& t : tokens) put(part, t.token, t.logprob, t.top);
    for (auto& [key, values] : part.items()) {
      for (auto& v : values) all_[key].push_back(v);
    }
    return part;
  }
  void set_offset(size_t offset) { offset_ = offset; }
  const json& all() const { return all_; }

 private:
  json empty() const {
    if (chat_) return {{"content", json::array()}};
    return {{"tokens", json::array()}, {"token_logprobs", json::array()}, {"top_logprobs", json::array()},
            {"text_offset", json::array()}};
  }
  // A token's text as the answer shows it: end-of-generation tokens show none.
  std::string shown(int id) const { return tok_.is_end_of_generation(id) ? "" : tok_.token_text(prev_, id); }
  void put(json& part, int id, std::optional<float> logprob, const std::vector<std::pair<int, float>>& top) {
    const std::string text = shown(id);
    if (chat_) {
      json alternatives = json::array();
      for (const auto& [alt, lp] : top) {
        const std::string s = shown(alt);
        alternatives.push_back({{"token", s}, {"logprob", lp}, {"bytes", utf8_bytes(s)}});
      }
      part["content"].push_back(
          {{"token", text}, {"logprob", *logprob}, {"bytes", utf8_bytes(text)}, {"top_logprobs", alternatives}});
    } else {
      json alternatives = logprob ? json::object() : json();
      for (const auto& [alt, lp] : top) alternatives[shown(alt)] = lp;
      part["tokens"].push_back(text);
      part["token_logprobs"].push_back(logprob ? json(*logprob) : json());
      part["top_logprobs"].push_back(alternatives);
      part["text_offset"].push_back(offset_);
    }
    offset_ += text.size();
    prev_ = id;
  }
  const engine::Tokenizer& tok_;
  bool chat_;
  int prev_;
  size_t offset_ = 0;
  json all_;
};

// What an answer needs besides the scheduler's events: how to name tokens, what to echo.
struct AnswerSpec {
  CompletionHeader header;
  const engine::Tokenizer* tok = nullptr;
  bool logprobs = false;
  bool echo = false;           // completions: the prompt's text (and with logprobs its tokens') first
  bool include_usage = false;  // streams
  ChatReplyOptions reply;  // chat: how replies split into reasoning, content and tool calls
};

// One choice of an answer: its request's events turned into text and log-probabilities.
struct Choice {
  Choice(std::shared_ptr<RequestHandle> h, const AnswerSpec& spec, std::vector<int> prompt_tokens,
         std::string echo, bool first)
      : handle(std::move(h)), prompt(std::move(prompt_tokens)), echo_text(std::move(echo)), first_of_prompt(first) {
    if (spec.logprobs) logprobs.emplace(*spec.tok, spec.header.chat, spec.echo ? -1 : prompt.back());
    if (spec.header.chat) reply.emplace(spec.reply);
    text = echo_text;
  }
  std::shared_ptr<RequestHandle> handle;
  std::vector<int> prompt;
  std::string echo_text;      // with echo
  bool first_of_prompt;       // the prompt's first choice (its tokens count once in usage)
  std::string text;
  std::optional<LogprobWriter> logprobs;
  std::optional<ChatReplyStream> reply;  // streamed chats: reasoning and tool calls split off
  bool finished = false;
  StreamEvent last;  // the finished event
};

// The events' part of the logprobs (the prompt's, with its first token unscored, or generated
// tokens'); null without logprobs.
json logprob_part(Choice& c, const StreamEvent& ev) {
  if (!c.logprobs) return nullptr;
  if (ev.kind != StreamEvent::Kind::prompt) return c.logprobs->add(ev.logprobs);
  json part = c.logprobs->add(ev.logprobs, c.prompt.front());
  c.logprobs->set_offset(c.echo_text.size());  // the generated text follows the echoed prompt
  return part;
}

Usage total_usage(const std::vector<Choice>& choices) {
  // Each prompt counts once however many choices it has (as OpenAI counts n); generated tokens
  // add up.
  Usage u;
  for (const auto& c : choices) {
    u.completion_tokens += c.last.usage.completion_tokens;
    if (!c.first_of_prompt) continue;
    u.prompt_tokens += c.last.usage.prompt_tokens;
    u.cached_tokens += c.last.usage.cached_tokens;
    u.store_tokens += c.last.usage.store_tokens;
    u.disk_tokens += c.last.usage.disk_tokens;
  }
  return u;
}

void set_all_wakes(std::vector<Choice>& choices, const std::function<void()>& wake) {
  for (auto& c : choices) c.handle->set_notify(wake);
}

// A non-streamed completion: each choice's text gathered as the scheduler produces it,
// answered whole when every choice has finished.
class CompletionAnswer : public PendingAnswer {
 public:
  CompletionAnswer(std::vector<Choice> choices, AnswerSpec spec) : spec_(std::move(spec)), choices_(std::move(choices)) {}
  void set_wake(std::function<void()> wake) override { set_all_wakes(choices_, wake); }
  void cancel() override {
    for (auto& c : choices_) c.handle->cancel();
  }
  std::optional<HttpResponse> poll() override {
    StreamEvent ev;
    for (auto& c : choices_) {
      while (!c.finished && c.handle->try_next(ev)) {
        if (ev.kind == StreamEvent::Kind::failed) {
          cancel();
          return error_response(ApiError(500, "server_error", "internal_error", ev.error));
        }
        if (ev.kind == StreamEvent::Kind::finished) {
          c.finished = true;
          c.last = std::move(ev);
          break;
        }
        c.text += ev.text;
        logprob_part(c, ev);
      }
    }
    if (!std::all_of(choices_.begin(), choices_.end(), [](const Choice& c) { return c.finished; })) return std::nullopt;
    json choices = json::array();
    for (size_t i = 0; i < choices_.size(); ++i) {
      const Choice& c = choices_[i];
      json choice = {{"index", i}, {"logprobs", c.logprobs ? c.logprobs->all() : json()},
                     {"finish_reason", c.last.finish_reason}};
      if (spec_.header.chat) {
        bool called = false;
        choice["message"] = assistant_message(c.text, spec_.reply, called);
        choice["finish_reason"] = chat_finish_reason(c.last.finish_reason, called);
      } else {
        choice["text"] = c.text;
      }
      choices.push_back(std::move(choice));
    }
    json body = spec_.header.body(std::move(choices));
    body["usage"] = usage_json(total_usage(choices_));
    return json_response(body);
  }

 private:
  AnswerSpec spec_;
  std::vector<Choice> choices_;
};

// A streamed completion: one SSE event per text piece of each choice (with its index), a finish
// chunk per choice, then usage if asked and [DONE] once all have finished. While nothing comes
// (queued, or a long prompt) an SSE comment every 10 s keeps proxies and clients from timing out.
class CompletionStream : public StreamBody {
 public:
  CompletionStream(std::vector<Choice> choices, AnswerSpec spec) : spec_(std::move(spec)), choices_(std::move(choices)) {}
  void set_wake(std::function<void()> wake) override { set_all_wakes(choices_, wake); }
  void cancel() override {
    for (auto& c : choices_) c.handle->cancel();
  }
  Pull pull(std::string& out) override {
    const auto now = std::chrono::steady_clock::now();
    if (!started_) {
      started_ = true;
      for (size_t i = 0; i < choices_.size(); ++i) {
        if (spec_.header.chat) out += chunk(i, {{"role", "assistant"}, {"content", ""}}, nullptr, nullptr);
        // An echo without logprobs goes first; with them, with the prompt's logprobs (below).
        if (spec_.echo && !spec_.logprobs) out += chunk(i, json(choices_[i].echo_text), nullptr, nullptr);
      }
    }
    StreamEvent ev;
    for (size_t i = 0; i < choices_.size(); ++i) {
      Choice& c = choices_[i];
      while (!c.finished && c.handle->try_next(ev)) {
        if (ev.kind == StreamEvent::Kind::failed) {
          cancel();
          out += "data: " + dump(error_body(ev.error, "server_error", "internal_error")) + "\n\n";
          return Pull::end;
        }
        if (ev.kind == StreamEvent::Kind::finished) {
          c.finished = true;
          c.last = std::move(ev);
          if (c.reply && c.reply->splits()) {
            if (json delta = c.reply->finish(); !delta.empty()) out += chunk(i, delta, nullptr, nullptr);
          }
          out += chunk(i, spec_.header.chat ? json::object() : json(""), nullptr,
                       c.reply ? chat_finish_reason(c.last.finish_reason, c.reply->called()) : c.last.finish_reason);
          break;
        }
        const std::string& text = ev.kind == StreamEvent::Kind::prompt ? c.echo_text : ev.text;
        json logprobs = logprob_part(c, ev);
        if (c.reply && c.reply->splits()) {
          json delta = c.reply->feed(text);
          if (delta.empty() && logprobs.is_null()) continue;  // all held back (a possible tag or call)
          out += chunk(i, delta.empty() ? json{{"content", ""}} : std::move(delta), std::move(logprobs), nullptr);
          continue;
        }
        out += chunk(i, spec_.header.chat ? json{{"content", text}} : json(text), std::move(logprobs), nullptr);
      }
    }
    if (std::all_of(choices_.begin(), choices_.end(), [](const Choice& c) { return c.finished; })) {
      if (spec_.include_usage) {
        json body = spec_.header.body(json::array());
        if (spec_.header.chat) body["object"] = "chat.completion.chunk";
        body["usage"] = usage_json(total_usage(choices_));
        out += "data: " + dump(body) + "\n\n";
      }
      out += "data: [DONE]\n\n";
      return Pull::end;
    }
    if (out.empty() && now - last_output_ >= std::chrono::seconds(10)) out += ": waiting\n\n";
    if (out.empty()) return Pull::wait;
    last_output_ = now;
    return Pull::more;
  }

 private:
  std::string chunk(size_t index, const json& delta_or_text, json logprobs, const json& finish) const {
    json choice = {{"index", index}, {"logprobs", std::move(logprobs)}, {"finish_reason", finish}};
    if (spec_.header.chat) {
      choice["delta"] = delta_or_text;
    } else {
      choice["text"] = delta_or_text;
    }
    json body = spec_.header.body(json::array({choice}));
    if (spec_.header.chat) body["object"] = "chat.completion.chunk";
    if (spec_.include_usage) body["usage"] = nullptr;
    return "data: " + dump(body) + "\n\n";
  }

  AnswerSpec spec_;
  std::vector<Choice> choices_;
  bool started_ = false;
  std::chrono::steady_clock::time_point last_output_ = std::chrono::steady_clock::now();
};

}  // namespace

Reply ApiServer::generate(const HttpRequest& req, const Backend& b, bool chat) {
  const engine::Tokenizer& tok = *b.tokenizer;
  const int ctx = b.scheduler->context();
  ParsedRequest p = parse_request(req.body, chat, ctx, tok.vocab_size());
  if (p.model && *p.model != b.model_id) {
    throw ApiError(404, "invalid_request_error", "model_not_found",
                   fmt::format("the model '{}' does not exist; this server serves '{}'", *p.model, b.model_id), "model");
  }
  // The prompts as tokens: a chat's rendered messages, or each completions prompt.
  struct Prompt {
    std::vector<int> tokens;
    std::vector<size_t> marks;
    std::string echo_text;
  };
  std::vector<Prompt> prompts;
  RenderedChat rendered;
  if (chat && !p.tools.tools.is_null() && b.chat_template.tool_format() == ToolCallFormat::none) {
    throw unsupported_parameter(
        fmt::format("'tools' needs a chat template that renders tools in a format this server reads back (Hermes "
                    "<tool_call> or Llama 3.1 JSON); this model's chat is rendered by {}", b.chat_template.describe()),
        "tools");
  }
  if (chat) {
    try {
      rendered = b.chat_template.render(p.messages, p.chat_template_kwargs, p.tools.tools);
    } catch (const ChatTemplateError& e) {
      throw invalid_request(e.what(), "messages");
    }
    prompts.push_back({rendered.encode(tok), {}, ""});
  }
  for (const PromptInput& in : p.prompts) {
    Prompt one{in.is_tokens ? in.tokens : tok.encode(in.text, true), {}, ""};
    if (p.echo) one.echo_text = in.is_tokens ? tok.decode_all(one.tokens) : in.text;
    prompts.push_back(std::move(one));
  }
  for (const Prompt& prompt : prompts) {
    for (const int id : prompt.tokens) {
      if (id >= tok.vocab_size()) {
        throw invalid_request(fmt::format("token id {} is outside the vocabulary of {}", id, tok.vocab_size()), "prompt");
      }
    }
  }
  const SchedulerOptions& so = b.scheduler->options();
  if (prompts.size() * static_cast<size_t>(p.n) > static_cast<size_t>(so.parallel + so.max_queue)) {
    throw invalid_request(fmt::format("{} prompts x n = {} sequences; this server runs and queues at most {}",
                                      prompts.size(), p.n, so.parallel + so.max_queue), "n");
  }
  // Where the rendered messages end among the tokens: the points the prefix cache may store at.
  if (chat) prompts.front().marks = message_marks(tok, rendered, prompts.front().tokens);

  AnswerSpec spec;
  spec.header = {chat, fmt::format("{}-{}", chat ? "chatcmpl" : "cmpl", counters_->next_id.fetch_add(1)), now_seconds(),
                 b.model_id};
  spec.tok = &tok;
  spec.logprobs = p.generation.logprobs >= 0;
  spec.echo = p.echo;
  spec.include_usage = p.include_usage;
  spec.reply.split_reasoning = chat && b.chat_template.thinks();
  spec.reply.prompt_opens_reasoning = spec.reply.split_reasoning && prompt_opens_reasoning(rendered.text);
  spec.reply.tool_format = p.tools.tools.is_null() ? ToolCallFormat::none : b.chat_template.tool_format();
  spec.reply.parallel_tool_calls = p.tools.parallel;
  // Each prompt's n choices are n sequences, sampled with seeds seed, seed + 1, ...; the
  // scheduler computes a prompt once (its other choices wait for its stored prefix).
  std::vector<Choice> choices;
  Reply reply;
  for (const Prompt& prompt : prompts) {
    for (int i = 0; i < p.n; ++i) {
      GenerationRequest g = p.generation;
      g.prompt = prompt.tokens;
      g.prefix_marks = prompt.marks;
      if (!p.max_tokens_given) g.max_tokens = ctx - static_cast<int>(prompt.tokens.size());
      g.sampling.seed += static_cast<uint64_t>(i);
      auto handle = std::make_shared<RequestHandle>();
      std::string why;
      const Scheduler::Admission admission = b.scheduler->submit(std::move(g), handle, &why);
      if (admission != Scheduler::Admission::accepted) {
        for (auto& c : choices) c.handle->cancel();
      }
      switch (admission) {
        case Scheduler::Admission::queue_full:
          reply.response = error_response(ApiError(429, "rate_limit_exceeded", "rate_limit_exceeded", why));
          reply.response.headers.emplace_back("Retry-After", "1");
          return reply;
        case Scheduler::Admission::draining:
          reply.response = error_response(ApiError(503, "server_error", "unavailable", why));
          reply.response.headers.emplace_back("Retry-After", "1");
          return reply;
        case Scheduler::Admission::prompt_too_long:
          throw invalid_request(why, chat ? "messages" : "prompt");
        case Scheduler::Admission::too_large:
          throw invalid_request(why, "max_tokens");
        default:
          break;
      }
      choices.emplace_back(std::move(handle), spec, prompt.tokens, prompt.echo_text, i == 0);
    }
  }
  if (!p.stream) {
    reply.pending = std::make_shared<CompletionAnswer>(std::move(choices), std::move(spec));
    return reply;
  }
  reply.response = HttpResponse{200, "text/event-stream", "", {{"Cache-Control", "no-cache"}}};
  reply.stream = std::make_shared<CompletionStream>(std::move(choices), std::move(spec));
  return reply;
}

}  // namespace turbokv::server
