#include "cache/cache_state_util.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/check.hpp"
#include "turbokv/half.hpp"

namespace turbokv::detail {

size_t dtype_size(const std::string& dtype) {
  if (dtype == "U8" || dtype == "I8" || dtype == "BOOL") return 1;
  if (dtype == "F16" || dtype == "BF16" || dtype == "I16" || dtype == "U16") return 2;
  if (dtype == "F32" || dtype == "I32" || dtype == "U32") return 4;
  if (dtype == "F64" || dtype == "I64" || dtype == "U64") return 8;
  return 0;
}

size_t first_non_finite(const TensorBlob& blob) {
  if (blob.dtype == "F16") {
    for (size_t i = 0; i + 2 <= blob.data.size(); i += 2) {
      uint16_t h;
      std::memcpy(&h, blob.data.data() + i, sizeof h);
      if (!half_is_finite(h)) return i / 2;
    }
  } else if (blob.dtype == "F32") {
    for (size_t i = 0; i + 4 <= blob.data.size(); i += 4) {
      float x;
      std::memcpy(&x, blob.data.data() + i, sizeof x);
      if (!std::isfinite(x)) return i / 4;
    }
  }
  return SIZE_MAX;
}

size_t checked_elements(const std::vector<int64_t>& shape, const std::string& what) {
  size_t n = 1;
  for (int64_t d : shape) {
    TURBOKV_CHECK(d >= 0, "{}: negative dimension {} in shape", what, d);
    const auto ud = static_cast<uint64_t>(d);
    TURBOKV_CHECK(ud == 0 || n <= std::numeric_limits<size_t>::max() / ud,
                  "{}: shape element count overflows", what);
    n *= ud;
  }
  return n;
}

const std::string& meta_string(const CacheState& state, const std::string& key) {
  auto it = state.metadata.find(key);
  TURBOKV_CHECK(it != state.metadata.end(), "cache state: missing metadata key '{}'", key);
  return it->second;
}

int64_t meta_int(const CacheState& state, const std::string& key, int64_t min, int64_t max) {
  const std::string& s = meta_string(state, key);
  int64_t value = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  TURBOKV_CHECK(ec == std::errc() && end == s.data() + s.size() && !s.empty(),
                "cache state: metadata '{}' is not an integer: '{}'", key, s);
  TURBOKV_CHECK(value >= min && value <= max,
                "cache state: metadata '{}' = {} is out of range [{}, {}]", key, value, min, max);
  return value;
}

uint64_t meta_u64(const CacheState& state, const std::string& key) {
  const std::string& s = meta_string(state, key);
  uint64_t value = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  TURBOKV_CHECK(ec == std::errc() && end == s.data() + s.size() && !s.empty(),
                "cache state: metadata '{}' is not an unsigned 64-bit integer: '{}'", key, s);
  return value;
}

double meta_double(const CacheState& state, const std::string& key, double min, double max) {
  const std::string& s = meta_string(state, key);
  double value = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  TURBOKV_CHECK(ec == std::errc() && end == s.data() + s.size() && !s.empty() &&
                    std::isfinite(value),
                "cache state: metadata '{}' is not a number: '{}'", key, s);
  TURBOKV_CHECK(value >= min && value <= max,
                "cache state: metadata '{}' = {} is out of range [{}, {}]", key, value, min, max);
  return value;
}

bool meta_bool(const CacheState& state, const std::string& key) {
  const std::string& s = meta_string(state, key);
  if (s == "true") return true;
  if (s == "false") return false;
  fail("cache state: metadata '{}' must be 'true' or 'false', got '{}'", key, s);
}

std::string format_double(double value) { return fmt::format("{}", value); }

const TensorBlob& find_tensor(const CacheState& state, const std::string& name,
                              const std::string& dtype, const std::vector<int64_t>& shape) {
  auto it = std::find_if(state.tensors.begin(), state.tensors.end(),
                         [&](const TensorBlob& t) { return t.name == name; });
  TURBOKV_CHECK(it != state.tensors.end(), "cache state: missing tensor '{}'", name);
  TURBOKV_CHECK(it->dtype == dtype, "cache state: tensor '{}' has dtype {}, expected {}", name,
                it->dtype, dtype);
  TURBOKV_CHECK(it->shape == shape,
                "cache state: tensor '{}' has shape [{}], but the metadata says [{}]", name,
                fmt::join(it->shape, ", "), fmt::join(shape, ", "));
  const size_t bytes = checked_elements(shape, "tensor '" + name + "'") * dtype_size(dtype);
  TURBOKV_CHECK(it->data.size() == bytes, "cache state: tensor '{}' holds {} bytes, expected {}",
                name, it->data.size(), bytes);
  return *it;
}

void check_tensor_names(const CacheState& state, const std::vector<std::string>& names) {
  for (const TensorBlob& t : state.tensors) {
    TURBOKV_CHECK(std::find(names.begin(), names.end(), t.name) != names.end(),
                  "cache state: unexpected tensor '{}' for class '{}'", t.name,
                  state.metadata.count("class") ? state.metadata.at("class") : "?");
  }
  TURBOKV_CHECK(state.tensors.size() == names.size(),
                "cache state: expected {} tensors, found {} (duplicate names?)", names.size(),
                state.tensors.size());
}

}  // namespace turbokv::detail
