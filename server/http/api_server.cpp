#include "server/http/api_server.hpp"

#include <fmt/format.h>
#include <httplib.h>

#include <cctype>
#include <chrono>
#include <mutex>
#include <nlohmann/json.hpp>

#include "server/http/connection_probe.hpp"
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

void send_error(httplib::Response& res, const ApiError& e) {
  res.status = e.status;
  res.set_content(dump(error_body(e.what(), e.type, e.code, e.param)), "application/json");
}

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

// Whether the request has Content-Length headers that disagree (see the pre-routing handler).
bool conflicting_lengths(const httplib::Request& req) {
  const size_t n = req.get_header_value_count("Content-Length");
  for (size_t i = 1; i < n; ++i) {
    if (req.get_header_value("Content-Length", i) != req.get_header_value("Content-Length", 0)) return true;
  }
  return false;
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

ApiServer::ApiServer(HttpOptions options)
    : options_(std::move(options)), http_(std::make_unique<httplib::Server>()), counters_(std::make_unique<Counters>()) {
  routes();
}

ApiServer::~ApiServer() {
  if (listener_.joinable()) shutdown(std::chrono::milliseconds(0));
}

int ApiServer::listen(int http_threads) {
  const int threads = std::max(4, http_threads);
  http_->new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<size_t>(threads)); };
  // The body limit is ours (413 as an OpenAI error); httplib's is a hard stop well above it.
  http_->set_payload_max_length(options_.max_body_bytes + 1);
  http_->set_read_timeout(30, 0);
  http_->set_write_timeout(30, 0);
  int port = options_.port;
  if (port == 0) {
    port = http_->bind_to_any_port(options_.host);
    if (port < 0) throw Error(fmt::format("cannot bind {}:any port", options_.host));
  } else if (!http_->bind_to_port(options_.host, port)) {
    throw Error(fmt::format("cannot bind {}:{} (in use, or not an address of this machine)", options_.host, port));
  }
  listener_ = std::thread([this] { http_->listen_after_bind(); });
  return port;
}

void ApiServer::attach(const Backend& backend) {
  backend_storage_ = backend;
  backend_.store(&backend_storage_);
}

void ApiServer::shutdown(std::chrono::milliseconds grace) {
  stopping_.store(true);
  if (const Backend* b = backend_.load(); b != nullptr && b->scheduler != nullptr) b->scheduler->drain(grace);
  http_->stop();
  if (listener_.joinable()) listener_.join();
}

void ApiServer::routes() {
  auto& svr = *http_;
  // Every error status without a body gets an OpenAI error object (404 route, 413, 400 ...).
  svr.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    if (res.status == 404) {
      send_error(res, ApiError(404, "invalid_request_error", "not_found", fmt::format("no route {} {}", req.method, req.path)));
    } else if (res.status == 413) {
      send_error(res, ApiError(413, "invalid_request_error", "request_too_large", "the request body is too large"));
    } else {
      send_error(res, ApiError(res.status, res.status >= 500 ? "server_error" : "invalid_request_error",
                               std::to_string(res.status), fmt::format("HTTP status {}", res.status)));
    }
  });
  svr.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    std::string what = "internal error";
    try {
      std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    send_error(res, ApiError(500, "server_error", "internal_error", what));
  });
  // Content-Length headers that disagree: a proxy in front may frame the body by another one
  // than httplib (the first), and what one takes for the next request the other takes for body
  // (request smuggling). Refused before the body is read, and once the answer is out (the
  // logger runs then; httplib 0.11 closes a connection only when the request asks to) nothing
  // more is read from the connection.
  svr.set_pre_routing_handler([](const httplib::Request& req, httplib::Response& res) {
    if (!conflicting_lengths(req)) return httplib::Server::HandlerResponse::Unhandled;
    res.set_header("Connection", "close");
    send_error(res, ApiError(400, "invalid_request_error", "invalid_request", "conflicting Content-Length headers"));
    return httplib::Server::HandlerResponse::Handled;
  });
  svr.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
    counters_->count(res.status);
    if (conflicting_lengths(req)) ConnectionProbe(req).stop_reading();
  });

  svr.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    const bool ready = backend_.load() != nullptr && !stopping_.load();
    res.status = ready ? 200 : 503;
    res.set_content(dump({{"status", ready ? "ok" : (stopping_.load() ? "shutting down" : "loading model")}}),
                    "application/json");
  });

  // Whether the request carries the API key (if there is one); answers the 401 itself.
  auto authorized = [this](const httplib::Request& req, httplib::Response& res) {
    if (options_.api_key.empty()) return true;
    const std::string auth = req.get_header_value("Authorization");
    if (bearer_token_matches(auth, options_.api_key)) return true;
    send_error(res, ApiError(401, "invalid_request_error", "invalid_api_key",
                             auth.empty() ? "missing API key (Authorization: Bearer ...)" : "incorrect API key"));
    return false;
  };

  // Authentication and readiness for /v1/*; returns the backend or answers the error itself.
  auto guard = [this, authorized](const httplib::Request& req, httplib::Response& res) -> const Backend* {
    if (!authorized(req, res)) return nullptr;
    const Backend* b = backend_.load();
    if (b == nullptr || stopping_.load()) {
      res.set_header("Retry-After", "1");
      send_error(res, ApiError(503, "server_error", "unavailable",
                               b == nullptr ? "the model is still loading" : "the server is shutting down"));
      return nullptr;
    }
    return b;
  };

  svr.Get("/v1/models", [this, guard](const httplib::Request& req, httplib::Response& res) {
    const Backend* b = guard(req, res);
    if (b == nullptr) return;
    json model = {{"id", b->model_id}, {"object", "model"}, {"created", now_seconds()}, {"owned_by", "turbokv"},
                  {"meta", {{"context", b->scheduler->context()}, {"vocab", b->model->config.vocab_size}}}};
    res.set_content(dump({{"object", "list"}, {"data", json::array({model})}}), "application/json");
  });

  // With an API key, /metrics needs it too (the counts tell the traffic and the deployment),
  // unless --metrics-public; /health stays open for load balancers.
  svr.Get("/metrics", [this, authorized](const httplib::Request& req, httplib::Response& res) {
    if (!options_.metrics_public && !authorized(req, res)) return;
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
    res.set_content(out, "text/plain; version=0.0.4");
  });

  auto generate = [this, guard](const httplib::Request& req, httplib::Response& res, bool chat) {
    const Backend* b = guard(req, res);
    if (b == nullptr) return;
    try {
      if (req.body.size() > options_.max_body_bytes) {
        throw ApiError(413, "invalid_request_error", "request_too_large",
                       fmt::format("the body has {} bytes; at most {} are accepted", req.body.size(), options_.max_body_bytes));
      }
      ParsedRequest p = parse_request(req.body, chat, b->scheduler->context());
      if (p.model && *p.model != b->model_id) {
        throw ApiError(404, "invalid_request_error", "model_not_found",
                       fmt::format("the model '{}' does not exist; this server serves '{}'", *p.model, b->model_id),
                       "model");
      }
      const engine::Tokenizer& tok = *b->tokenizer;
      RenderedChat rendered;
      if (chat) {
        rendered = render_chat(b->chat_format, p.messages);
        p.generation.prompt = tok.encode(rendered.text, rendered.add_bos);
      } else if (!p.prompt_is_tokens) {
        p.generation.prompt = tok.encode(p.prompt_text, true);
      }
      for (const int id : p.generation.prompt) {
        if (id >= tok.vocab_size()) throw invalid_request(fmt::format("token id {} is outside the vocabulary of {}", id, tok.vocab_size()), "prompt");
      }
      const int ctx = b->scheduler->context();
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
      const auto admission = b->scheduler->submit(p.generation, handle, &why);
      if (admission == Scheduler::Admission::queue_full) {
        res.set_header("Retry-After", "1");
        throw ApiError(429, "rate_limit_exceeded", "rate_limit_exceeded", why);
      }
      if (admission == Scheduler::Admission::draining) {
        res.set_header("Retry-After", "1");
        throw ApiError(503, "server_error", "unavailable", why);
      }
      if (admission == Scheduler::Admission::too_large) throw invalid_request(why, "max_tokens");

      const std::string id = fmt::format("{}-{}", chat ? "chatcmpl" : "cmpl", counters_->next_id.fetch_add(1));
      const long long created = now_seconds();
      const std::string model_id = b->model_id;
      if (!p.stream) {
        // A blocking request's client can only be seen leaving on its socket (nothing is
        // written before the answer): poll it (without waiting) after every event and every
        // 200 ms without one, and cancel if it hung up. Polling only after 200 ms without an
        // event missed a client that left while tokens kept coming (issue 26).
        const ConnectionProbe probe(req);
        std::string text;
        StreamEvent ev;
        for (;;) {
          const bool got = handle->wait_next(ev, std::chrono::milliseconds(200));
          if (probe.peer_gone()) {
            handle->cancel();
            res.status = 499;  // nginx's "client closed request"; nobody reads it
            return;
          }
          if (!got) continue;
          if (ev.kind == StreamEvent::Kind::text) {
            text += ev.text;
            continue;
          }
          if (ev.kind == StreamEvent::Kind::failed) throw ApiError(500, "server_error", "internal_error", ev.error);
          break;
        }
        json choice = {{"index", 0}, {"logprobs", nullptr}, {"finish_reason", ev.finish_reason}};
        if (chat) {
          choice["message"] = {{"role", "assistant"}, {"content", text}};
        } else {
          choice["text"] = text;
        }
        json body = {{"id", id},
                     {"object", chat ? "chat.completion" : "text_completion"},
                     {"created", created},
                     {"model", model_id},
                     {"choices", json::array({choice})},
                     {"usage", usage_json(ev.usage)}};
        res.set_content(dump(body), "application/json");
        return;
      }
      // Streaming: one SSE event per text piece, then the finish chunk, usage if asked, [DONE].
      const bool include_usage = p.include_usage;
      auto chunk = [=](const json& delta_or_text, const json& finish) {
        json choice = {{"index", 0}, {"logprobs", nullptr}, {"finish_reason", finish}};
        if (chat) {
          choice["delta"] = delta_or_text;
        } else {
          choice["text"] = delta_or_text;
        }
        json body = {{"id", id},
                     {"object", chat ? "chat.completion.chunk" : "text_completion"},
                     {"created", created},
                     {"model", model_id},
                     {"choices", json::array({choice})}};
        if (include_usage) body["usage"] = nullptr;
        return "data: " + dump(body) + "\n\n";
      };
      auto started = std::make_shared<bool>(false);
      auto idle_polls = std::make_shared<int>(0);
      res.set_header("Cache-Control", "no-cache");
      res.set_chunked_content_provider(
          "text/event-stream",
          [=](size_t, httplib::DataSink& sink) {
            auto write = [&](const std::string& s) {
              if (!sink.write(s.data(), s.size())) {
                handle->cancel();  // the client went away
                return false;
              }
              return true;
            };
            if (chat && !*started) {
              *started = true;
              if (!write(chunk({{"role", "assistant"}, {"content", ""}}, nullptr))) return false;
            }
            StreamEvent ev;
            if (!handle->wait_next(ev, std::chrono::milliseconds(200))) {
              // Waiting (queued, or a long prompt): an SSE comment every 10 s keeps proxies and
              // clients from timing out, and finds a client that went away while it waited.
              if (++*idle_polls % 50 == 0 && !write(": waiting\n\n")) return false;
              if (sink.is_writable && !sink.is_writable()) {
                handle->cancel();
                return false;
              }
              return true;
            }
            *idle_polls = 0;
            if (ev.kind == StreamEvent::Kind::text) {
              return write(chunk(chat ? json{{"content", ev.text}} : json(ev.text), nullptr));
            }
            if (ev.kind == StreamEvent::Kind::failed) {
              write("data: " + dump(error_body(ev.error, "server_error", "internal_error")) + "\n\n");
              sink.done();
              return true;
            }
            if (!write(chunk(chat ? json::object() : json(""), ev.finish_reason))) return false;
            if (include_usage) {
              json body = {{"id", id},
                           {"object", chat ? "chat.completion.chunk" : "text_completion"},
                           {"created", created},
                           {"model", model_id},
                           {"choices", json::array()},
                           {"usage", usage_json(ev.usage)}};
              if (!write("data: " + dump(body) + "\n\n")) return false;
            }
            if (!write("data: [DONE]\n\n")) return false;
            sink.done();
            return true;
          },
          [handle](bool success) {
            if (!success) handle->cancel();
          });
    } catch (const ApiError& e) {
      send_error(res, e);
    } catch (const Error& e) {
      send_error(res, invalid_request(e.what()));
    }
  };
  svr.Post("/v1/completions", [generate](const httplib::Request& req, httplib::Response& res) { generate(req, res, false); });
  svr.Post("/v1/chat/completions",
           [generate](const httplib::Request& req, httplib::Response& res) { generate(req, res, true); });
}

}  // namespace turbokv::server
