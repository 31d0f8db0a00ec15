#include "turbokv/version.hpp"

namespace turbokv {

const char* version() { return TURBOKV_VERSION_STRING; }

}  // namespace turbokv
