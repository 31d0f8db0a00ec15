// Helpers for building and validating a CacheState (the per-layer saved state): typed metadata
// lookups with range checks and tensor lookups that verify dtype, shape and byte count, so a
// cache's from_state() never trusts an unchecked field.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "turbokv/kv_cache.hpp"

namespace turbokv::detail {

// Bytes per element of a safetensors dtype name ("U8", "F16", "F32", ...); 0 if unknown.
size_t dtype_size(const std::string& dtype);

// Product of the dims, or throws turbokv::Error naming `what` if negative or it overflows.
size_t checked_elements(const std::vector<int64_t>& shape, const std::string& what);

const std::string& meta_string(const CacheState& state, const std::string& key);
int64_t meta_int(const CacheState& state, const std::string& key, int64_t min, int64_t max);
uint64_t meta_u64(const CacheState& state, const std::string& key);
double meta_double(const CacheState& state, const std::string& key, double min, double max);
bool meta_bool(const CacheState& state, const std::string& key);

// Formats a double so parsing it back gives the same value (shortest round trip).
std::string format_double(double value);

// The tensor named `name`; throws unless its dtype and shape are exactly the expected ones and
// its data holds exactly shape-product * dtype-size bytes.
const TensorBlob& find_tensor(const CacheState& state, const std::string& name,
                              const std::string& dtype, const std::vector<int64_t>& shape);

// Index of the first NaN/Inf element of an F16 or F32 tensor, SIZE_MAX if it has none (other
// dtypes: SIZE_MAX). Loaders use it to keep non-finite stored values out of a cache.
size_t first_non_finite(const TensorBlob& blob);

// Throws unless `state` holds exactly the tensors named in `names` (no unknown extras).
void check_tensor_names(const CacheState& state, const std::vector<std::string>& names);

}  // namespace turbokv::detail
