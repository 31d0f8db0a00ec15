// The kjv model served in-process: a scheduler and its HTTP front (ApiServer) on 127.0.0.1, any
// free port, stopped by the destructor; for the tests that talk to the API as a client does.
#pragma once

#include <httplib.h>

#include <chrono>

#include "kjv_server_fixture.hpp"
#include "server/http/api_server.hpp"

namespace turbokv::test {

struct ServedKjv {
  explicit ServedKjv(const server::SchedulerOptions& options, server::ChatTemplate chat = server::ChatFormat::plain,
                     server::HttpOptions http = {})
      : scheduler(kjv().model, *kjv().tok, options), api(local(std::move(http))) {
    port = api.listen();
    api.attach({"kjv", &kjv().model, kjv().tok.get(), std::move(chat), &scheduler});
  }
  ~ServedKjv() { api.shutdown(std::chrono::milliseconds(0)); }
  ServedKjv(const ServedKjv&) = delete;
  ServedKjv& operator=(const ServedKjv&) = delete;

  // A client with a 60 s read timeout (a generation on two threads under sanitizers).
  httplib::Client client() const {
    httplib::Client c("127.0.0.1", port);
    c.set_read_timeout(60, 0);
    return c;
  }

  server::Scheduler scheduler;
  server::ApiServer api;
  int port = 0;

 private:
  static server::HttpOptions local(server::HttpOptions http) {
    http.host = "127.0.0.1";
    http.port = 0;
    return http;
  }
};

}  // namespace turbokv::test
