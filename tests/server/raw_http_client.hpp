// A raw TCP client for the server tests on 127.0.0.1: what hostile or careless clients send is
// written byte for byte (no HTTP library in between to fix it up).
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <string>

namespace turbokv::test {

// A connected socket to 127.0.0.1:port, or -1.
inline int connect_to(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// Sends what it can (the server may close early); false once the peer refused more.
inline bool send_all(int fd, const std::string& data) {
  size_t at = 0;
  while (at < data.size()) {
    const ssize_t n = send(fd, data.data() + at, data.size() - at, MSG_NOSIGNAL);
    if (n <= 0) return false;
    at += static_cast<size_t>(n);
  }
  return true;
}

// Whether `out` holds `count` whole responses framed by Content-Length (or none).
inline bool has_responses(const std::string& out, int count) {
  size_t at = 0;
  for (int i = 0; i < count; ++i) {
    const size_t head_end = out.find("\r\n\r\n", at);
    if (head_end == std::string::npos) return false;
    const size_t cl = out.find("Content-Length: ", at);
    const size_t len = cl != std::string::npos && cl < head_end ? std::stoul(out.substr(cl + 16)) : 0;
    if (out.size() < head_end + 4 + len) return false;
    at = head_end + 4 + len;
  }
  return true;
}

// Reads until `count` whole responses are in (count 0: until the peer closes), or the timeout.
inline std::string read_responses(int fd, int count, std::chrono::milliseconds timeout) {
  std::string out;
  const auto end = std::chrono::steady_clock::now() + timeout;
  char buf[65536];
  while ((count == 0 || !has_responses(out, count)) && std::chrono::steady_clock::now() < end) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 20) <= 0) continue;
    const ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

inline std::string read_until_closed(int fd, std::chrono::milliseconds timeout) { return read_responses(fd, 0, timeout); }

// The status of the first response in `r`, or -1.
inline int status_of(const std::string& r) {
  return r.rfind("HTTP/1.", 0) == 0 && r.size() >= 12 ? std::stoi(r.substr(9, 3)) : -1;
}

}  // namespace turbokv::test
