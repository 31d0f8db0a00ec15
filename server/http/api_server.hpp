// ApiServer: the OpenAI-compatible HTTP front of the scheduler, on HttpServer (libmicrohttpd,
// server/http/http_server.hpp: the limits hostile clients meet).
//
// Routes: POST /v1/completions, POST /v1/chat/completions (JSON or server-sent events),
// GET /v1/models, GET /health (503 until a backend is attached, then 200), GET /metrics
// (Prometheus text). Every error is an OpenAI error object {"error": {message, type, code,
// param}}. With an API key, /v1/* and /metrics (unless metrics_public) need
// "Authorization: Bearer KEY"; /health never does.
//
// Lifecycle: construct, listen() (binds and serves on the transport's threads), attach() a
// Backend once the model is loaded, shutdown() to stop: new requests get 503, in-flight ones
// finish (within the grace period) or are cancelled, then every connection is closed.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <string>

#include "engine/model/model.hpp"
#include "server/http/http_server.hpp"
#include "engine/tokenizer/tokenizer.hpp"
#include "server/text/chat_template.hpp"
#include "server/scheduling/scheduler.hpp"

namespace turbokv::server {

struct Backend {
  std::string model_id;  // what /v1/models lists and requests may name
  const engine::Model* model = nullptr;
  const engine::Tokenizer* tokenizer = nullptr;
  ChatTemplate chat_template;  // the model's Jinja template, or a native format
  Scheduler* scheduler = nullptr;
};

struct HttpOptions {
  std::string host = "127.0.0.1";
  int port = 8080;              // 0: any free port
  std::string api_key;          // empty: no authentication
  bool metrics_public = false;  // with an API key: /metrics answers without it too
  HttpLimits limits;            // headers, bodies, connections, deadlines (docs/reliability.md)
};

class ApiServer {
 public:
  explicit ApiServer(HttpOptions options);
  ~ApiServer();

  // Binds and starts serving; returns the bound port. Throws turbokv::Error.
  int listen();
  void attach(const Backend& backend);
  void shutdown(std::chrono::milliseconds grace);

 private:
  Reply route(const HttpRequest& req);
  // Whether the request carries the API key (if one is set); else `refusal` is the 401.
  bool authorized(const HttpRequest& req, HttpResponse& refusal) const;
  // The backend for a /v1/* request, or the response that refuses it (auth, loading, stopping).
  const Backend* guard(const HttpRequest& req, HttpResponse& refusal) const;
  Reply generate(const HttpRequest& req, const Backend& b, bool chat);
  HttpResponse metrics() const;
  struct Counters;
  HttpOptions options_;
  std::unique_ptr<Counters> counters_;
  std::unique_ptr<HttpServer> http_;
  std::atomic<const Backend*> backend_{nullptr};
  Backend backend_storage_;
  std::atomic<bool> stopping_{false};
};

// "512MiB", "2GiB", "1G", "300000000" -> bytes; throws turbokv::Error.
size_t parse_byte_size(const std::string& text);

}  // namespace turbokv::server
