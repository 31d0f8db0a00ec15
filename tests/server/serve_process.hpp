// `turbokv serve` as a child process on an ephemeral port, and raw HTTP/1.1 over sockets to it:
// the harness of the tests that drive the real binary (TURBOKV_TOOL names it, else the build's).
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <regex>
#include <string>
#include <thread>
#include <vector>

namespace serve_test {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;


inline double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

inline std::string tool() {
  const char* env = std::getenv("TURBOKV_TOOL");
  return env != nullptr && *env != '\0' ? env : TURBOKV_TOOL_PATH;
}

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

inline bool send_all(int fd, const std::string& data) {
  size_t at = 0;
  while (at < data.size()) {
    const ssize_t n = send(fd, data.data() + at, data.size() - at, MSG_NOSIGNAL);
    if (n <= 0) return false;
    at += static_cast<size_t>(n);
  }
  return true;
}

// What arrives until the peer closes, a whole Content-Length response is in, or the timeout.
inline std::string read_response(int fd, std::chrono::milliseconds timeout) {
  std::string out;
  const auto end = Clock::now() + timeout;
  char buf[65536];
  while (Clock::now() < end) {
    const size_t head = out.find("\r\n\r\n");
    if (head != std::string::npos) {
      const size_t cl = out.find("Content-Length: ");
      if (cl != std::string::npos && cl < head && out.size() >= head + 4 + std::stoul(out.substr(cl + 16))) break;
    }
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 20) <= 0) continue;
    const ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

inline int status_of(const std::string& r) { return r.rfind("HTTP/1.", 0) == 0 && r.size() >= 12 ? std::stoi(r.substr(9, 3)) : -1; }

// A `turbokv serve --port 0 ARGS` child process.
class Serve {
 public:
  explicit Serve(const std::vector<std::string>& args) {
    int out[2];
    if (pipe(out) != 0) return;
    pid_ = fork();
    if (pid_ == 0) {
      dup2(out[1], 1);
      close(out[0]);
      std::vector<std::string> all = {tool(), "serve", "--port", "0", "--host", "127.0.0.1"};
      all.insert(all.end(), args.begin(), args.end());
      std::vector<char*> argv;
      for (auto& a : all) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(argv[0], argv.data());
      _exit(127);
    }
    close(out[1]);
    stdout_ = fdopen(out[0], "r");
    char line[512];
    const std::regex listening("listening on http://[^:]+:([0-9]+)");
    while (port_ == 0 && std::fgets(line, sizeof line, stdout_) != nullptr) {
      std::cmatch m;
      if (std::regex_search(line, m, listening)) port_ = std::stoi(m[1]);
    }
    const auto t0 = Clock::now();
    while (port_ > 0 && seconds_since(t0) < 60 && status_of(get("/health")) != 200) std::this_thread::sleep_for(50ms);
  }
  ~Serve() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    if (stdout_ != nullptr) fclose(stdout_);
  }
  int port() const { return port_; }
  bool ready() { return port_ > 0 && status_of(get("/health")) == 200; }
  size_t rss_bytes() const {
    std::ifstream status("/proc/" + std::to_string(pid_) + "/status");
    std::string key;
    size_t kb = 0;
    while (status >> key) {
      if (key == "VmRSS:") {
        status >> kb;
        break;
      }
    }
    return kb * 1024;
  }
  std::string request(const std::string& raw, std::chrono::milliseconds timeout = 5000ms) const {
    const int fd = connect_to(port_);
    if (fd < 0) return "";
    send_all(fd, raw);
    std::string r = read_response(fd, timeout);
    close(fd);
    return r;
  }
  std::string get(const std::string& path) const {
    return request("GET " + path + " HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", 2000ms);
  }
  std::string post(const std::string& path, const std::string& body, std::chrono::milliseconds timeout = 10000ms) const {
    return request("POST " + path + " HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: " +
                       std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body,
                   timeout);
  }
  double metric(const std::string& name) const {
    const std::string m = get("/metrics");
    const size_t at = m.find("\n" + name + " ");
    return at == std::string::npos ? -1 : std::stod(m.substr(at + name.size() + 2));
  }
  // SIGTERM, then seconds until it exited (or -1 past `limit`).
  double terminate(std::chrono::seconds limit) {
    const auto t0 = Clock::now();
    kill(pid_, SIGTERM);
    while (seconds_since(t0) < static_cast<double>(limit.count())) {
      if (waitpid(pid_, nullptr, WNOHANG) == pid_) {
        pid_ = -1;
        return seconds_since(t0);
      }
      std::this_thread::sleep_for(20ms);
    }
    return -1;
  }

 private:
  pid_t pid_ = -1;
  int port_ = 0;
  FILE* stdout_ = nullptr;
};

inline bool have_tool() { return !tool().empty() && access(tool().c_str(), X_OK) == 0; }
// The body of an HTTP response ("" if none arrived).
inline std::string body_of(const std::string& response) {
  const size_t head = response.find("\r\n\r\n");
  return head == std::string::npos ? "" : response.substr(head + 4);
}

}  // namespace serve_test
