// Whether the client of a blocking (non-streaming) request is still connected.
//
// cpp-httplib 0.11 gives a handler no access to its socket and writes nothing before the handler
// returns, so a client that hangs up while its completion is being generated would otherwise
// keep its sequence (and its KV reservation) running to the end. The probe finds the
// connection's socket once, by the addresses httplib records in the request (the socket whose
// local port, peer address and peer port are the request's), and then polls it for the peer's
// hang-up. The socket stays open while the handler runs (the handler's thread owns the
// connection), so the descriptor cannot be reused under the probe.
#pragma once

#include <httplib.h>

namespace turbokv::server {

class ConnectionProbe {
 public:
  explicit ConnectionProbe(const httplib::Request& request);

  // True once the peer has closed or reset the connection (a half-close counts: an HTTP/1.1
  // client does not half-close while it waits for its response). False when the socket was not
  // found (then the request simply runs to its end, as before).
  bool peer_gone() const;
  bool found() const { return fd_ >= 0; }
  // Ends reading from the connection once a response that closes it is out: discards what the
  // client has sent (closing with unread bytes resets the connection, and a reset may destroy
  // the response before the client reads it: RFC 7230, 6.6) and shuts the read side, so
  // httplib reads no further request from it. No-op when the socket was not found.
  void stop_reading() const;

 private:
  int fd_ = -1;
};

}  // namespace turbokv::server
