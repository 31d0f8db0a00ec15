#include "turbokv/checksum.hpp"

#include <xxhash.h>

#include <new>

#include "core/checksum_impl.hpp"
#include "turbokv/cpu_features.hpp"

namespace turbokv {

namespace detail {

uint64_t checksum64_library(std::span<const uint8_t> bytes) { return XXH3_64bits(bytes.data(), bytes.size()); }

bool checksum_uses_avx2() {
#if TURBOKV_CHECKSUM_AVX2
  return cpu_has_avx2_fma_f16c();  // AVX2 and the OS saving YMM state; FMA/F16C come with it
#else
  return false;
#endif
}

}  // namespace detail

namespace {

uint64_t hash(const void* data, size_t size) {
#if TURBOKV_CHECKSUM_AVX2
  if (detail::checksum_uses_avx2()) return detail::xxh3_avx2(data, size);
#endif
  return XXH3_64bits(data, size);
}

}  // namespace

uint64_t checksum64(std::span<const uint8_t> bytes) { return hash(bytes.data(), bytes.size()); }

uint64_t checksum64(std::string_view bytes) { return hash(bytes.data(), bytes.size()); }

uint64_t checksum64_pair(std::string_view key, std::string_view value) {
  // Little-endian 8-byte key length, key, value: a fixed, platform-independent encoding.
  std::string buffer(8, '\0');
  const uint64_t n = key.size();
  for (int i = 0; i < 8; ++i) buffer[i] = static_cast<char>(n >> (8 * i));
  buffer.append(key);
  buffer.append(value);
  return hash(buffer.data(), buffer.size());
}

ChecksumStream::ChecksumStream() : avx2_(detail::checksum_uses_avx2()) {
#if TURBOKV_CHECKSUM_AVX2
  if (avx2_) {
    state_ = detail::xxh3_avx2_create();
    if (state_ == nullptr) throw std::bad_alloc();
    return;
  }
#endif
  state_ = XXH3_createState();
  if (state_ == nullptr) throw std::bad_alloc();
  XXH3_64bits_reset(static_cast<XXH3_state_t*>(state_));
}

ChecksumStream::~ChecksumStream() {
#if TURBOKV_CHECKSUM_AVX2
  if (avx2_) {
    detail::xxh3_avx2_free(state_);
    return;
  }
#endif
  XXH3_freeState(static_cast<XXH3_state_t*>(state_));
}

void ChecksumStream::update(std::span<const uint8_t> bytes) {
#if TURBOKV_CHECKSUM_AVX2
  if (avx2_) {
    detail::xxh3_avx2_update(state_, bytes.data(), bytes.size());
    return;
  }
#endif
  XXH3_64bits_update(static_cast<XXH3_state_t*>(state_), bytes.data(), bytes.size());
}

uint64_t ChecksumStream::digest() const {
#if TURBOKV_CHECKSUM_AVX2
  if (avx2_) return detail::xxh3_avx2_digest(state_);
#endif
  return XXH3_64bits_digest(static_cast<XXH3_state_t*>(state_));
}

std::string checksum_hex(uint64_t checksum) {
  static const char* digits = "0123456789abcdef";
  std::string out(16, '0');
  for (int i = 15; i >= 0; --i, checksum >>= 4) out[i] = digits[checksum & 15];
  return out;
}

std::optional<uint64_t> parse_checksum_hex(std::string_view text) {
  if (text.size() != 16) return std::nullopt;
  uint64_t value = 0;
  for (const char c : text) {
    int digit = 0;
    if (c >= '0' && c <= '9') digit = c - '0';
    else if (c >= 'a' && c <= 'f') digit = c - 'a' + 10;
    else return std::nullopt;
    value = (value << 4) | static_cast<uint64_t>(digit);
  }
  return value;
}

}  // namespace turbokv
