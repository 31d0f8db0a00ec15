#pragma once

namespace turbokv {

// The library's version, "MAJOR.MINOR.PATCH".
const char* version();

}  // namespace turbokv
