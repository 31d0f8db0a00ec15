// turbokv::Error: the one exception type the library throws at its API boundary.
//
// Every rejected input (bad shape, unsupported bit width, NaN/Inf under the default policy,
// a truncated or corrupt file, a newer format version) surfaces as an Error whose message
// names the problem, e.g. "TurboQuantMse: bits must be in [1, 8], got 9".
#pragma once

#include <stdexcept>
#include <string>

namespace turbokv {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

}  // namespace turbokv
