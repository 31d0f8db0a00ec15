#include "server/http/connection_probe.hpp"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <cstdlib>
#include <string>

namespace turbokv::server {
namespace {

// The numeric host and port of a socket address (IPv4 or IPv6), or port -1.
std::pair<std::string, int> host_port(const sockaddr_storage& a) {
  char host[INET6_ADDRSTRLEN] = {};
  if (a.ss_family == AF_INET) {
    const auto& v4 = reinterpret_cast<const sockaddr_in&>(a);
    inet_ntop(AF_INET, &v4.sin_addr, host, sizeof host);
    return {host, ntohs(v4.sin_port)};
  }
  if (a.ss_family == AF_INET6) {
    const auto& v6 = reinterpret_cast<const sockaddr_in6&>(a);
    inet_ntop(AF_INET6, &v6.sin6_addr, host, sizeof host);
    return {host, ntohs(v6.sin6_port)};
  }
  return {"", -1};
}

bool is_the_connection(int fd, const httplib::Request& r) {
  sockaddr_storage local{}, peer{};
  socklen_t local_len = sizeof local, peer_len = sizeof peer;
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &local_len) != 0) return false;  // not a socket
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &peer_len) != 0) return false;    // not connected
  const auto [local_host, local_port] = host_port(local);
  const auto [peer_host, peer_port] = host_port(peer);
  return local_port == r.local_port && peer_port == r.remote_port && peer_host == r.remote_addr;
}

}  // namespace

ConnectionProbe::ConnectionProbe(const httplib::Request& request) {
  if (request.remote_port < 0 || request.local_port < 0) return;
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return;
  const int own = dirfd(dir);
  while (const dirent* entry = readdir(dir)) {
    char* end = nullptr;
    const long fd = std::strtol(entry->d_name, &end, 10);
    if (end == entry->d_name || *end != '\0' || fd == own) continue;
    if (is_the_connection(static_cast<int>(fd), request)) {
      fd_ = static_cast<int>(fd);
      break;
    }
  }
  closedir(dir);
}

bool ConnectionProbe::peer_gone() const {
  if (fd_ < 0) return false;
  pollfd p{fd_, POLLRDHUP, 0};
  if (poll(&p, 1, 0) <= 0) return false;
  return (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) != 0;
}

void ConnectionProbe::stop_reading() const {
  if (fd_ < 0) return;
  // What has arrived, at most a socket buffer's worth (a client that keeps sending is not
  // waited for).
  char discard[4096];
  for (int i = 0; i < 256 && recv(fd_, discard, sizeof discard, MSG_DONTWAIT) > 0; ++i) {
  }
  shutdown(fd_, SHUT_RD);
}

}  // namespace turbokv::server
