// Known-answer values for what the rest depends on bit for bit: SplitMix64 and derive_seed seed
// every rotation, QJL matrix and synthetic tensor, and the codec checksums saved files carry, so
// a change to them silently changes every saved cache's meaning. The expected values were
// computed outside the project, with this Python (3.11) transcription of the published
// algorithms (SplitMix64: Steele, Lea & Flood 2014, as in Vigna's splitmix64.c):
//
//   M = 2**64 - 1
//   def splitmix64(seed):
//       s = seed
//       while True:
//           s = (s + 0x9e3779b97f4a7c15) & M
//           z = s
//           z = ((z ^ (z >> 30)) * 0xbf58476d1ce4e5b9) & M
//           z = ((z ^ (z >> 27)) * 0x94d049bb133111eb) & M
//           yield z ^ (z >> 31)
//   def derive_seed(seed, tag): return next(splitmix64(seed ^ ((tag * 0xd1b54a32d192ed03) & M)))
//
// Seed 0's first three outputs are also the widely published ones (e220a8397b1dcdaf, ...).
// And the version: one string everywhere (library, CMake project, CLI's --version and version).
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
// libstdc++ 12's regex compiler, at -O1 (the sanitizer builds), trips GCC's
// -Wmaybe-uninitialized in std::function's moves: a false positive in the library's code.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <regex>
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#include <sstream>
#include <string>

#include "skip_policy.hpp"
#include "turbokv/prng.hpp"
#include "turbokv/version.hpp"

namespace turbokv {
namespace {

TEST(KnownAnswers, SplitMix64) {
  SplitMix64 zero(0);
  EXPECT_EQ(zero.next(), 0xe220a8397b1dcdafULL);
  EXPECT_EQ(zero.next(), 0x6e789e6aa1b965f4ULL);
  EXPECT_EQ(zero.next(), 0x06c45d188009454fULL);
  SplitMix64 other(1234567);
  EXPECT_EQ(other.next(), 0x599ed017fb08fc85ULL);
  EXPECT_EQ(other.next(), 0x2c73f08458540fa5ULL);
  EXPECT_EQ(other.next(), 0x883ebce5a3f27c77ULL);
  // uniform(): the top 53 bits over 2^53 (seed 99's first output is 0x42f3a9364c476be3).
  SplitMix64 u(99);
  EXPECT_EQ(u.uniform(), static_cast<double>(0x42f3a9364c476be3ULL >> 11) * 0x1.0p-53);
  EXPECT_NEAR(SplitMix64(99).uniform(), 0.2615304715693846, 1e-16);
}

TEST(KnownAnswers, DeriveSeed) {
  EXPECT_EQ(derive_seed(42, 0), 0xbdd732262feb6e95ULL);
  EXPECT_EQ(derive_seed(42, 7), 0xf08aaefcec7303c2ULL);
  EXPECT_EQ(derive_seed(0xdeadbeef, 3), 0x66fc4d0e2b9a1c25ULL);
}

TEST(KnownAnswers, OneVersionEverywhere) {
  const std::string v = version();
  EXPECT_TRUE(std::regex_match(v, std::regex(R"(\d+\.\d+\.\d+)"))) << v;
  EXPECT_EQ(v, TURBOKV_VERSION_STRING);  // the definition the library was built with
  // The CMake project's VERSION (the source of both), read from the top-level CMakeLists.txt.
  std::ifstream in(std::filesystem::path(TURBOKV_TEST_DATA_DIR).parent_path().parent_path() / "CMakeLists.txt");
  std::stringstream text;
  text << in.rdbuf();
  std::smatch m;
  const std::string s = text.str();
  ASSERT_TRUE(std::regex_search(s, m, std::regex(R"(project\(turbokv VERSION (\d+\.\d+\.\d+))")));
  EXPECT_EQ(m[1].str(), v);
}

TEST(KnownAnswers, TheCliPrintsTheSameVersion) {
  const std::string tool = TURBOKV_TOOL_PATH;
  if (tool.empty() || !std::filesystem::exists(tool)) TURBOKV_SKIP_MISSING() << "turbokv tool not built";
  for (const char* args : {" --version", " version"}) {
    FILE* pipe = popen(("'" + tool + "'" + args + " 2>&1").c_str(), "r");
    ASSERT_NE(pipe, nullptr);
    char buf[256] = {};
    const size_t n = fread(buf, 1, sizeof(buf) - 1, pipe);
    EXPECT_EQ(pclose(pipe), 0) << args;
    EXPECT_EQ(std::string(buf, n), std::string("turbokv ") + version() + "\n") << args;
  }
}

}  // namespace
}  // namespace turbokv
