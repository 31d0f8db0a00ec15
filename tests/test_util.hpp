// Small helpers every kind of test uses: random data, bit-exact comparison, scratch file paths.
// One home, so that "random" means the same thing (a seeded standard normal) in every test and
// a test's data does not change when another test's helper does.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
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

// A path in the test temp directory, unique to this process (ctest runs tests in parallel).
inline std::string temp_path(const std::string& name) {
  return (std::filesystem::path(testing::TempDir()) /
          ("turbokv_test_" + std::to_string(::getpid()) + "_" + name))
      .string();
}

}  // namespace turbokv::test
