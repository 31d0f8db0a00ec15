// Small helpers every kind of test uses: random data, bit-exact comparison, scratch file paths,
// running a command.
// One home, so that "random" means the same thing (a seeded standard normal) in every test and
// a test's data does not change when another test's helper does.
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <filesystem>
#include <random>
#include <span>
#include <string>
#include <vector>

namespace turbokv::test {

// n draws of N(0, scale^2) from `rng` (the caller's stream, for data drawn in sequence).
inline std::vector<float> random_normal(size_t n, std::mt19937& rng, float scale = 1.0f) {
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// n draws of N(0, scale^2) from a fresh mt19937 seeded with `seed`.
inline std::vector<float> random_normal(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  return random_normal(n, rng, scale);
}

// Bit-for-bit equality (a NaN equals the same NaN; 0.0 and -0.0 differ): what "the same bits
// come out" means for the batch-invariance and SIMD-vs-scalar tests.
inline bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof(float)) == 0; }
inline bool same_bits(std::span<const float> a, std::span<const float> b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// A folder of the system's temp directory for this process's files, created on first use and
// removed with them when the process exits: ctest runs test processes two at a time, and a folder
// they shared was removed by one while another opened its file from it (CI, issue 27).
inline std::filesystem::path scratch_dir(const std::string& name) {
  struct Folders {
    std::vector<std::filesystem::path> paths;
    ~Folders() {
      std::error_code ignored;
      for (const auto& p : paths) std::filesystem::remove_all(p, ignored);
    }
  };
  static Folders folders;
  const auto path = std::filesystem::temp_directory_path() / ("turbokv_" + name + "-" + std::to_string(::getpid()));
  bool known = false;
  for (const auto& p : folders.paths) known = known || p == path;
  if (!known) folders.paths.push_back(path);
  std::filesystem::create_directories(path);
  return path;
}

// A path unique to this process (ctest runs tests in parallel), in its scratch folder so that
// the file goes when the process exits: files written straight into the temp directory stayed
// there after every run (fourteen GGUFs of test_moe per run on the developers' machines).
inline std::string temp_path(const std::string& name) { return (scratch_dir("test") / name).string(); }

// What a command printed on standard output (standard error too where the command says 2>&1) and
// its exit status: -1 when it could not start or did not exit (killed by a signal).
struct CommandOutput {
  std::string text;
  int status = -1;
};

// Runs `command` through the shell, with `input` (when given) on its standard input.
inline CommandOutput run_command(const std::string& command, const std::string* input = nullptr) {
  std::string line = command;
  std::string input_path;
  if (input != nullptr) {
    static int calls = 0;
    input_path = temp_path("command-input-" + std::to_string(++calls));
    std::ofstream(input_path, std::ios::binary) << *input;
    line = "(" + command + ") < '" + input_path + "'";
  }
  CommandOutput out;
  FILE* pipe = ::popen(line.c_str(), "r");
  if (pipe != nullptr) {
    char buf[65536];
    for (size_t n; (n = std::fread(buf, 1, sizeof buf, pipe)) > 0;) out.text.append(buf, n);
    const int status = ::pclose(pipe);
    out.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }
  if (!input_path.empty()) std::remove(input_path.c_str());
  return out;
}

}  // namespace turbokv::test
