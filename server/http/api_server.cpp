#include "server/http/api_server.hpp"

#include <fmt/format.h>

#include <cctype>
#include <chrono>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>

#include "server/http/openai_request.hpp"
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
          // store_tokens (not an OpenAI field; clients ignore it): the part of cached_tokens that
          // came from the shared prefix store rather than this replica's own prefix cache.
          {"prompt_tokens_details", {{"cached_tokens", u.cached_tokens}, {"store_tokens", u.store_tokens}}}};
}

void metric(std::string& out, const char* name, const char* type, const char* help, double value) {
  out += fmt::format("# HELP {} {}\n# TYPE {} {}\n{} {}\n", name, help, name, type, name, value);
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
                      {"meta", {{"context", b->scheduler->context()}, {"vocab", b->model->config.vocab_size}}}};
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
  if (const Backend* b = backend_.load(); b != nullptr) {
      const SchedulerMetrics m = b->scheduler->metrics();
      const struct {
        const char* name;
        const char* type;
        const char* help;
        double value;
      } metrics[] = {
          {"turbokv_requests_running", "gauge", "Sequences in the running batch", static_cast<double>(m.running)},
          {"turbokv_requests_waiting", "gauge", "Requests queued for admission", static_cast<double>(m.waiting)},
          {"turbokv_requests_running_peak", "gauge", "Most sequences ever running at once",
            static_cast<double>(m.peak_running)},
          {"turbokv_kv_budget_bytes", "gauge", "The KV memory budget (--kv-budget)",
            static_cast<double>(m.kv_budget)},
          {"turbokv_kv_reserved_bytes", "gauge", "KV bytes reserved by running sequences",
            static_cast<double>(m.kv_reserved)},
          {"turbokv_kv_used_bytes", "gauge", "KV bytes allocated (running caches and prefix cache)",
            static_cast<double>(m.kv_allocated)},
          {"turbokv_kv_used_bytes_peak", "gauge", "Most KV bytes ever allocated at once",
            static_cast<double>(m.peak_kv_allocated)},
          {"turbokv_kv_tokens", "gauge", "Tokens held by running sequences' caches",
            static_cast<double>(m.kv_tokens)},
          {"turbokv_prefix_cache_bytes", "gauge", "Bytes held by the prefix cache",
            static_cast<double>(m.prefix_cache_bytes)},
          {"turbokv_prefix_cache_entries", "gauge", "Prefixes held by the prefix cache",
            static_cast<double>(m.prefix_cache_entries)},
          {"turbokv_prefix_cache_hits_total", "counter", "Admitted requests that restored a prefix",
            static_cast<double>(m.prefix_cache_hits_total)},
          {"turbokv_prefix_cache_misses_total", "counter", "Admitted requests with no stored prefix",
            static_cast<double>(m.prefix_cache_misses_total)},
          {"turbokv_prefix_cache_evictions_total", "counter", "Prefixes evicted for room",
            static_cast<double>(m.prefix_cache_evictions_total)},
          {"turbokv_prompt_tokens_total", "counter", "Prompt tokens of admitted requests",
            static_cast<double>(m.prompt_tokens_total)},
          {"turbokv_prompt_tokens_cached_total", "counter", "Prompt tokens restored from the prefix cache",
            static_cast<double>(m.prompt_tokens_cached_total)},
          {"turbokv_prompt_tokens_computed_total", "counter", "Prompt tokens computed",
            static_cast<double>(m.prompt_tokens_computed_total)},
          {"turbokv_generation_tokens_total", "counter", "Tokens generated",
            static_cast<double>(m.generated_tokens_total)},
          {"turbokv_requests_finished_total", "counter", "Requests finished",
            static_cast<double>(m.requests_finished_total)},
          {"turbokv_requests_cancelled_total", "counter", "Requests cancelled (client gone)",
            static_cast<double>(m.requests_cancelled_total)},
          {"turbokv_requests_failed_total", "counter", "Requests failed",
            static_cast<double>(m.requests_failed_total)},
          {"turbokv_requests_rejected_total", "counter", "Requests refused with 429 (queue full)",
            static_cast<double>(m.requests_rejected_total)},
          {"turbokv_batch_sequences", "gauge", "Sequences in the last step",
            static_cast<double>(m.last_batch_sequences)},
          {"turbokv_batch_rows", "gauge", "Token rows in the last step", static_cast<double>(m.last_batch_rows)},
          {"turbokv_steps_total", "counter", "Batched forward steps", static_cast<double>(m.steps_total)},
          {"turbokv_step_seconds_total", "counter", "Seconds spent in forward steps",
            static_cast<double>(m.step_seconds_total)},
      };
      for (const auto& x : metrics) metric(out, x.name, x.type, x.help, x.value);
      if (m.prefix_store) {
        const SharedPrefixMetrics& p = m.shared;
        const std::remove_reference_t<decltype(metrics[0])> store[] = {
            {"turbokv_prompt_tokens_store_total", "counter", "Prompt tokens restored from the shared prefix store",
              static_cast<double>(m.prompt_tokens_store_total)},
            {"turbokv_prefix_store_hits_total", "counter", "Admitted requests that restored a prefix from the store",
              static_cast<double>(m.prefix_store_hits_total)},
            {"turbokv_prefix_store_misses_total", "counter", "Admitted requests that took nothing from the store",
              static_cast<double>(m.prefix_store_misses_total)},
            {"turbokv_prefix_store_lookups_total", "counter", "Store lookups", static_cast<double>(p.lookups_total)},
            {"turbokv_prefix_store_unavailable_total", "counter",
              "Lookups that found the store down, slow or failing (the prompt was computed)",
              static_cast<double>(p.unavailable_total)},
            {"turbokv_prefix_store_evicted_total", "counter", "Values gone between EXISTS and GET",
              static_cast<double>(p.evicted_total)},
            {"turbokv_prefix_store_rejected_total", "counter",
              "Stored values refused: truncated, corrupt, another model's or configuration's",
              static_cast<double>(p.rejected_total)},
            {"turbokv_prefix_store_offers_total", "counter", "Prefixes queued for the store",
              static_cast<double>(p.offers_total)},
            {"turbokv_prefix_store_offer_bytes_total", "counter", "Bytes of the prefixes queued for the store",
              static_cast<double>(p.offer_bytes_total)},
            {"turbokv_prefix_store_writes_total", "counter", "Values written to the store",
              static_cast<double>(p.store.writes_total)},
            {"turbokv_prefix_store_write_bytes_total", "counter", "Bytes written to the store",
              static_cast<double>(p.store.write_bytes_total)},
            {"turbokv_prefix_store_writes_failed_total", "counter", "Writes that failed (store down, slow, full)",
              static_cast<double>(p.store.writes_failed_total)},
            {"turbokv_prefix_store_writes_dropped_total", "counter", "Writes dropped: the write queue was full",
              static_cast<double>(p.store.writes_dropped_total)},
            {"turbokv_prefix_store_calls_failed_total", "counter", "Store calls that failed or timed out",
              static_cast<double>(p.store.calls_failed_total)},
        };
        for (const auto& x : store) metric(out, x.name, x.type, x.help, x.value);
      }
    }
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

// A non-streamed completion: the text gathered as the scheduler produces it, answered whole.
class CompletionAnswer : public PendingAnswer {
 public:
  CompletionAnswer(std::shared_ptr<RequestHandle> handle, CompletionHeader header)
      : handle_(std::move(handle)), header_(std::move(header)) {}
  void set_wake(std::function<void()> wake) override { handle_->set_notify(std::move(wake)); }
  void cancel() override { handle_->cancel(); }
  std::optional<HttpResponse> poll() override {
    StreamEvent ev;
    while (handle_->try_next(ev)) {
      if (ev.kind == StreamEvent::Kind::text) {
        text_ += ev.text;
        continue;
      }
      if (ev.kind == StreamEvent::Kind::failed) return error_response(ApiError(500, "server_error", "internal_error", ev.error));
      json choice = {{"index", 0}, {"logprobs", nullptr}, {"finish_reason", ev.finish_reason}};
      if (header_.chat) {
        choice["message"] = {{"role", "assistant"}, {"content", text_}};
      } else {
        choice["text"] = text_;
      }
      json body = header_.body(json::array({choice}));
      body["usage"] = usage_json(ev.usage);
      return json_response(body);
    }
    return std::nullopt;
  }

 private:
  std::shared_ptr<RequestHandle> handle_;
  CompletionHeader header_;
  std::string text_;
};

// A streamed completion: one SSE event per text piece, then the finish chunk, usage if asked,
// [DONE]. While nothing comes (queued, or a long prompt) an SSE comment every 10 s keeps proxies
// and clients from timing out.
class CompletionStream : public StreamBody {
 public:
  CompletionStream(std::shared_ptr<RequestHandle> handle, CompletionHeader header, bool include_usage)
      : handle_(std::move(handle)), header_(std::move(header)), include_usage_(include_usage) {}
  void set_wake(std::function<void()> wake) override { handle_->set_notify(std::move(wake)); }
  void cancel() override { handle_->cancel(); }
  Pull pull(std::string& out) override {
    const auto now = std::chrono::steady_clock::now();
    if (header_.chat && !started_) {
      started_ = true;
      out += chunk({{"role", "assistant"}, {"content", ""}}, nullptr);
    }
    StreamEvent ev;
    while (handle_->try_next(ev)) {
      if (ev.kind == StreamEvent::Kind::text) {
        out += chunk(header_.chat ? json{{"content", ev.text}} : json(ev.text), nullptr);
        continue;
      }
      if (ev.kind == StreamEvent::Kind::failed) {
        out += "data: " + dump(error_body(ev.error, "server_error", "internal_error")) + "\n\n";
        return Pull::end;
      }
      out += chunk(header_.chat ? json::object() : json(""), ev.finish_reason);
      if (include_usage_) {
        json body = header_.body(json::array());
        if (header_.chat) body["object"] = "chat.completion.chunk";
        body["usage"] = usage_json(ev.usage);
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
  std::string chunk(const json& delta_or_text, const json& finish) const {
    json choice = {{"index", 0}, {"logprobs", nullptr}, {"finish_reason", finish}};
    if (header_.chat) {
      choice["delta"] = delta_or_text;
    } else {
      choice["text"] = delta_or_text;
    }
    json body = header_.body(json::array({choice}));
    if (header_.chat) body["object"] = "chat.completion.chunk";
    if (include_usage_) body["usage"] = nullptr;
    return "data: " + dump(body) + "\n\n";
  }

  std::shared_ptr<RequestHandle> handle_;
  CompletionHeader header_;
  bool include_usage_;
  bool started_ = false;
  std::chrono::steady_clock::time_point last_output_ = std::chrono::steady_clock::now();
};

}  // namespace

Reply ApiServer::generate(const HttpRequest& req, const Backend& b, bool chat) {
  ParsedRequest p = parse_request(req.body, chat, b.scheduler->context());
  if (p.model && *p.model != b.model_id) {
    throw ApiError(404, "invalid_request_error", "model_not_found",
                   fmt::format("the model '{}' does not exist; this server serves '{}'", *p.model, b.model_id), "model");
  }
  const engine::Tokenizer& tok = *b.tokenizer;
  RenderedChat rendered;
  if (chat) {
    rendered = render_chat(b.chat_format, p.messages);
    p.generation.prompt = rendered.encode(tok);
  } else if (!p.prompt_is_tokens) {
    p.generation.prompt = tok.encode(p.prompt_text, true);
  }
  for (const int id : p.generation.prompt) {
    if (id >= tok.vocab_size()) {
      throw invalid_request(fmt::format("token id {} is outside the vocabulary of {}", id, tok.vocab_size()), "prompt");
    }
  }
  const int ctx = b.scheduler->context();
  if (static_cast<int64_t>(p.generation.prompt.size()) >= ctx) {
    throw invalid_request(fmt::format("the prompt has {} tokens; this server's context is {} tokens (the prompt "
                                      "and at least one generated token must fit)", p.generation.prompt.size(), ctx),
                          chat ? "messages" : "prompt");
  }
  // Only a prompt that fits is worth its marks (the work of the request ends here otherwise).
  if (chat) p.generation.prefix_marks = message_marks(tok, rendered, p.generation.prompt);
  if (!p.max_tokens_given) p.generation.max_tokens = ctx - static_cast<int>(p.generation.prompt.size());

  auto handle = std::make_shared<RequestHandle>();
  std::string why;
  Reply reply;
  switch (b.scheduler->submit(p.generation, handle, &why)) {
    case Scheduler::Admission::queue_full:
      reply.response = error_response(ApiError(429, "rate_limit_exceeded", "rate_limit_exceeded", why));
      reply.response.headers.emplace_back("Retry-After", "1");
      return reply;
    case Scheduler::Admission::draining:
      reply.response = error_response(ApiError(503, "server_error", "unavailable", why));
      reply.response.headers.emplace_back("Retry-After", "1");
      return reply;
    case Scheduler::Admission::too_large:
      throw invalid_request(why, "max_tokens");
    default:
      break;
  }
  CompletionHeader header{chat, fmt::format("{}-{}", chat ? "chatcmpl" : "cmpl", counters_->next_id.fetch_add(1)),
                          now_seconds(), b.model_id};
  if (!p.stream) {
    reply.pending = std::make_shared<CompletionAnswer>(handle, std::move(header));
    return reply;
  }
  reply.response = HttpResponse{200, "text/event-stream", "", {{"Cache-Control", "no-cache"}}};
  reply.stream = std::make_shared<CompletionStream>(handle, std::move(header), p.include_usage);
  return reply;
}

}  // namespace turbokv::server
