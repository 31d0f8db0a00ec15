// Argument checking for the API boundary: throw turbokv::Error with a formatted message.
#pragma once

#include <fmt/format.h>

#include <utility>

#include "turbokv/error.hpp"

namespace turbokv::detail {

template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> format, Args&&... args) {
  throw Error(fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace turbokv::detail

// TURBOKV_CHECK(cond, "fmt {}", args...): throws turbokv::Error when cond is false.
#define TURBOKV_CHECK(cond, ...)                 \
  do {                                           \
    if (!(cond)) ::turbokv::detail::fail(__VA_ARGS__); \
  } while (false)
