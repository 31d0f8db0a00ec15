// Skips for a missing tool, model file or test corpus. Outside CI such a test skips (a partial
// checkout, a library-only build); with TURBOKV_REQUIRE_ALL=1 in the environment (.ci/run sets
// it) it fails instead, so CI can never pass by not running a test.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>

namespace turbokv::test {

inline bool missing_is_an_error() {
  const char* v = std::getenv("TURBOKV_REQUIRE_ALL");
  return v != nullptr && *v != '\0' && std::strcmp(v, "0") != 0;
}

}  // namespace turbokv::test

// Use as a statement: TURBOKV_SKIP_MISSING() << "turbokv tool not built"; (returns from the test,
// like GTEST_SKIP(), with a skip or, under TURBOKV_REQUIRE_ALL, a fatal failure).
#define TURBOKV_SKIP_MISSING()                                                                   \
  return GTEST_MESSAGE_(::turbokv::test::missing_is_an_error()                                   \
                            ? "TURBOKV_REQUIRE_ALL is set, so this is an error, not a skip: "     \
                            : "",                                                                \
                        ::turbokv::test::missing_is_an_error()                                   \
                            ? ::testing::TestPartResult::kFatalFailure                           \
                            : ::testing::TestPartResult::kSkip)
