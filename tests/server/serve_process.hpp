// `turbokv serve` as a child process on an ephemeral port, spoken to over raw sockets
// (raw_http_client.hpp): the harness of the tests that drive the real binary (TURBOKV_TOOL names
// it, else the build's).
#pragma once

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "raw_http_client.hpp"

namespace turbokv::test {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

inline double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

inline std::string tool() {
  const char* env = std::getenv("TURBOKV_TOOL");
  return env != nullptr && *env != '\0' ? env : TURBOKV_TOOL_PATH;
}

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
    while (port_ == 0 && std::fgets(line, sizeof line, stdout_) != nullptr) {
      const std::string text = line;  // "listening on http://HOST:PORT"
      if (text.rfind("listening on http://", 0) == 0) port_ = std::atoi(text.substr(text.rfind(':') + 1).c_str());
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
    std::string r = read_responses(fd, 1, timeout);
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
  // SIGKILL now (no shutdown of any kind: a crash), and reaped.
  void kill_now() {
    if (pid_ <= 0) return;
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    pid_ = -1;
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

}  // namespace turbokv::test
