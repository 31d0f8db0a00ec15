// Saved-cache checksums (format version 2, issue 17): damage anywhere in a TurboQuant cache's
// codes, exact window or metadata is refused with an error naming the tensor or key, instead of
// loading into a cache that decodes to different attention; version-1 files (no checksums)
// still load, with a warning on stderr; the checksum function itself is XXH3-64.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "cache/safetensors.hpp"
#include "core/checksum_impl.hpp"
#include "turbokv/cache_io.hpp"
#include "turbokv/checksum.hpp"
#include "turbokv/error.hpp"
#include "turbokv/turboquant_cache.hpp"

namespace turbokv {
namespace {

using Bytes = std::vector<uint8_t>;

// Two TurboQuant layers with codes, an exact window and sinks, plus engine-style user metadata.
Bytes saved_turboquant() {
  TurboQuantCacheOptions o;
  o.key_bits = 3;
  o.value_bits = 2;
  o.window = 4;
  o.sinks = 1;
  o.page_tokens = 8;
  PromptCache cache;
  std::mt19937 rng(7);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  for (int l = 0; l < 2; ++l) {
    auto layer = std::make_unique<TurboQuantKVCache>(2, 32, o);
    const size_t n = 2 * 21 * 32;
    std::vector<float> k(n), v(n);
    for (float& x : k) x = dist(rng);
    for (float& x : v) x = dist(rng);
    layer->append(k, v, 21);
    cache.add_layer(std::move(layer));
  }
  cache.metadata()["engine.tokens"] = "[1,2,3]";
  return serialize_prompt_cache(cache);
}

uint64_t header_len(const Bytes& b) {
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | b[i];
  return n;
}

// Byte offset in the file of tensor `name`'s first byte.
size_t tensor_offset(const Bytes& b, const std::string& name) {
  const safetensors::Reader reader(safetensors::memory_source(b, "t"));
  const safetensors::TensorInfo* info = reader.find(name);
  EXPECT_NE(info, nullptr) << name;
  EXPECT_GT(info->end, info->begin) << name;
  return 8 + header_len(b) + info->begin;
}

// Rewrites the header (metadata edited by `edit`), data buffer unchanged, checksums untouched.
Bytes edit_metadata(const Bytes& b, const std::function<void(nlohmann::json&)>& edit) {
  const uint64_t n = header_len(b);
  nlohmann::json h = nlohmann::json::parse(b.begin() + 8, b.begin() + 8 + static_cast<long>(n));
  edit(h["__metadata__"]);
  std::string text = h.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  Bytes out(8 + text.size());
  for (int i = 0; i < 8; ++i) out[i] = static_cast<uint8_t>(text.size() >> (8 * i));
  std::memcpy(out.data() + 8, text.data(), text.size());
  out.insert(out.end(), b.begin() + 8 + static_cast<long>(n), b.end());
  return out;
}

// The file as format version 1 wrote it: the same keys and tensors without the checksums.
Bytes as_version1(const Bytes& b) {
  const safetensors::Reader reader(safetensors::memory_source(b, "v2"));
  std::map<std::string, std::string> meta;
  for (const auto& [k, v] : reader.metadata()) {
    if (k.rfind("checksum.", 0) != 0) meta[k] = v;
  }
  meta["format_version"] = "1";
  std::vector<TensorBlob> blobs;
  for (const auto& t : reader.tensors()) blobs.push_back(reader.read(t, t.name));
  std::vector<const TensorBlob*> ptrs;
  for (const auto& t : blobs) ptrs.push_back(&t);
  return safetensors::serialize(meta, ptrs);
}

void expect_refused(const Bytes& bytes, const std::string& expected) {
  try {
    parse_prompt_cache(bytes, "damaged.safetensors");
    ADD_FAILURE() << "accepted; expected an error containing: " << expected;
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(expected), std::string::npos) << msg;
    EXPECT_NE(msg.find("damaged.safetensors"), std::string::npos) << msg;
  }
}

TEST(Checksum, IsXxh3AndHexRoundTrips) {
  // XXH3-64 of the empty input with seed 0 (the xxHash reference value).
  EXPECT_EQ(checksum64(std::string_view()), 0x2d06800538d394c2ULL);
  EXPECT_NE(checksum64(std::string_view("a")), checksum64(std::string_view("b")));
  EXPECT_NE(checksum64_pair("ab", "c"), checksum64_pair("a", "bc"));
  EXPECT_EQ(checksum_hex(0x0123456789abcdefULL), "0123456789abcdef");
  EXPECT_EQ(parse_checksum_hex("0123456789abcdef"), 0x0123456789abcdefULL);
  EXPECT_FALSE(parse_checksum_hex("0123456789ABCDEF").has_value());
  EXPECT_FALSE(parse_checksum_hex("0123456789abcde").has_value());
  // Streaming in uneven pieces (as the reader hashes a tensor) gives the one-shot value.
  std::vector<uint8_t> bytes(1 << 20);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(i * 2654435761u >> 13);
  ChecksumStream stream;
  for (size_t at = 0, piece = 1; at < bytes.size(); at += piece, piece = piece * 3 + 7) {
    stream.update(std::span<const uint8_t>(bytes).subspan(at, std::min(piece, bytes.size() - at)));
  }
  EXPECT_EQ(stream.digest(), checksum64(bytes));
  // The AVX2 build (used when the CPU has it) equals the library's at every length class XXH3
  // treats differently (0-16, 17-128, 129-240, one stripe block, several, with a partial end).
  if (!detail::checksum_uses_avx2()) GTEST_SKIP() << "no AVX2: only the library build runs here";
  for (size_t n : {0, 1, 3, 4, 8, 9, 16, 17, 128, 129, 240, 241, 1023, 1024, 1025, 65536, 100003, 1 << 20}) {
    const std::span<const uint8_t> piece(bytes.data(), n);
    EXPECT_EQ(checksum64(piece), detail::checksum64_library(piece)) << n;
  }
}

TEST(CacheChecksums, SavedFileIsVersion2WithEveryChecksum) {
  const Bytes b = saved_turboquant();
  const safetensors::Reader reader(safetensors::memory_source(b, "t"));
  const auto& meta = reader.metadata();
  EXPECT_EQ(meta.at("format_version"), "2");
  size_t covered = 0;
  for (const auto& [k, v] : meta) {
    if (k.rfind("checksum.", 0) == 0) continue;
    ASSERT_EQ(meta.count("checksum.meta." + k), 1u) << k;
    EXPECT_EQ(meta.at("checksum.meta." + k), checksum_hex(checksum64_pair(k, v))) << k;
    ++covered;
  }
  EXPECT_GT(covered, 40u);  // two layers of ~22 keys, the format keys, the user key
  for (const auto& t : reader.tensors()) {
    EXPECT_EQ(meta.at("checksum.tensor." + t.name), checksum_hex(checksum64(reader.read(t, t.name).data)));
  }
  ASSERT_NO_THROW(parse_prompt_cache(b));
}

TEST(CacheChecksums, FlippedByteInCodesIsRefused) {
  Bytes b = saved_turboquant();
  for (const char* name : {"layers.0.key_codes", "layers.1.value_codes"}) {
    Bytes d = b;
    d[tensor_offset(b, name) + 3] ^= 0x01;  // one bit: a different centroid index
    expect_refused(d, std::string("tensor '") + name + "' fails its checksum");
  }
}

TEST(CacheChecksums, FlippedByteInWindowOrSinksIsRefused) {
  const Bytes b = saved_turboquant();
  for (const char* name : {"layers.0.window_keys", "layers.1.window_values", "layers.0.sink_keys"}) {
    Bytes d = b;
    d[tensor_offset(b, name) + 1] ^= 0x04;  // a low mantissa bit: still a finite float
    expect_refused(d, std::string("tensor '") + name + "' fails its checksum");
  }
}

TEST(CacheChecksums, EditedDecodingMetadataIsRefused) {
  const Bytes b = saved_turboquant();
  // Each edit is a valid value the layer would otherwise load and decode differently with.
  const std::vector<std::pair<std::string, std::string>> edits = {
      {"layers.0.norm_correction", "false"}, {"layers.1.window", "5"},
      {"layers.0.page_tokens", "16"},        {"layers.1.seed", "1"},
      {"user.engine.tokens", "[1,2,4]"},     {"n_layers", "1"}};
  for (const auto& [key, value] : edits) {
    SCOPED_TRACE(key);
    const Bytes d = edit_metadata(b, [&](nlohmann::json& m) {
      ASSERT_TRUE(m.contains(key));
      ASSERT_NE(m[key], value);
      m[key] = value;
    });
    expect_refused(d, "metadata key '" + key + "' fails its checksum");
  }
  // A checksum of its own that was flipped is damage too.
  const Bytes d = edit_metadata(b, [](nlohmann::json& m) {
    std::string c = m["checksum.meta.layers.0.window"];
    c[0] = c[0] == '0' ? '1' : '0';
    m["checksum.meta.layers.0.window"] = c;
  });
  expect_refused(d, "metadata key 'layers.0.window' fails its checksum");
}

TEST(CacheChecksums, Version1FileLoadsWithAWarning) {
  const Bytes v2 = saved_turboquant();
  const Bytes v1 = as_version1(v2);
  ASSERT_NE(v1, v2);
  testing::internal::CaptureStderr();
  PromptCache loaded;
  ASSERT_NO_THROW(loaded = parse_prompt_cache(v1, "old.safetensors"));
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("'old.safetensors' is a format-version-1 prompt cache"), std::string::npos) << err;
  EXPECT_NE(err.find("no checksums"), std::string::npos) << err;
  // Re-saved, it is a version-2 file holding exactly the same state.
  EXPECT_EQ(serialize_prompt_cache(loaded), v2);
  // A version-2 load prints nothing.
  testing::internal::CaptureStderr();
  parse_prompt_cache(v2);
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "");
  // A version-1 file cannot smuggle checksum keys (nor claim version 1 to skip them).
  const Bytes downgraded = edit_metadata(v2, [](nlohmann::json& m) { m["format_version"] = "1"; });
  testing::internal::CaptureStderr();
  EXPECT_THROW(parse_prompt_cache(downgraded), Error);
  testing::internal::GetCapturedStderr();
}

}  // namespace
}  // namespace turbokv
