// Safetensors reader/writer, the class registry and PromptCache save/load (dense layers here;
// TurboQuant layers and mixed files are in test_prompt_cache.cpp), and a corpus of broken files
// each rejected with its own error.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "cache/safetensors.hpp"
#include "turbokv/cache_io.hpp"
#include "turbokv/checksum.hpp"
#include "turbokv/dense_cache.hpp"
#include "turbokv/error.hpp"
#include "turbokv/prompt_cache.hpp"
#include "turbokv/turboquant_cache.hpp"
#include "cache_test_util.hpp"
#include "test_util.hpp"

using turbokv::test::random_normal;
using turbokv::test::temp_path;

namespace turbokv {
namespace {

std::unique_ptr<DenseKVCache> filled_dense(int heads, int dim, size_t n, DenseDtype dtype,
                                           size_t page_tokens, uint32_t seed) {
  auto cache = std::make_unique<DenseKVCache>(heads, dim, dtype, page_tokens);
  const auto k = random_normal(heads * n * dim, seed), v = random_normal(heads * n * dim, seed + 1);
  cache->append(k, v, n);
  return cache;
}

TEST(Safetensors, RoundTripAndLayout) {
  TensorBlob a{"a", "F32", {2, 3}, std::vector<uint8_t>(24, 7)};
  TensorBlob b{"b", "U8", {5}, {1, 2, 3, 4, 5}};
  TensorBlob empty{"c", "F16", {0, 4}, {}};
  const auto bytes = safetensors::serialize({{"k", "v"}}, {&a, &b, &empty});
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | bytes[i];
  EXPECT_EQ(header_len % 8, 0u);  // tensor data 8-byte aligned
  EXPECT_EQ(bytes.size(), 8 + header_len + 24 + 5);
  const auto header = nlohmann::json::parse(bytes.begin() + 8, bytes.begin() + 8 + header_len);
  EXPECT_EQ(header["__metadata__"]["k"], "v");
  EXPECT_EQ(header["a"]["data_offsets"], nlohmann::json({0, 24}));
  EXPECT_EQ(header["b"]["data_offsets"], nlohmann::json({24, 29}));
  EXPECT_EQ(header["c"]["data_offsets"], nlohmann::json({29, 29}));

  safetensors::Reader reader(safetensors::memory_source(bytes, "mem"));
  EXPECT_EQ(reader.metadata().at("k"), "v");
  ASSERT_EQ(reader.tensors().size(), 3u);
  const TensorBlob rb = reader.read(*reader.find("b"), "b");
  EXPECT_EQ(rb.data, b.data);
  EXPECT_EQ(rb.shape, b.shape);
  EXPECT_EQ(reader.find("zzz"), nullptr);
}

TEST(Safetensors, WriterRejectsInconsistentTensors) {
  TensorBlob bad{"a", "F32", {2, 3}, std::vector<uint8_t>(20)};
  EXPECT_THROW(safetensors::serialize({}, {&bad}), Error);
  TensorBlob unknown{"a", "Q4", {1}, {0}};
  EXPECT_THROW(safetensors::serialize({}, {&unknown}), Error);
  TensorBlob a{"a", "U8", {1}, {0}};
  EXPECT_THROW(safetensors::serialize({}, {&a, &a}), Error);
  EXPECT_THROW(safetensors::serialize({{"bad", std::string("\xff\xfe")}}, {&a}), Error);
}

TEST(PromptCacheIO, DenseRoundTripIsBitExact) {
  for (DenseDtype dtype : {DenseDtype::f16, DenseDtype::f32}) {
    PromptCache cache;
    cache.add_layer(filled_dense(2, 16, 37, dtype, 8, 1));
    cache.add_layer(filled_dense(2, 16, 37, dtype, 256, 3));
    cache.add_layer(std::make_unique<DenseKVCache>(2, 16, dtype));  // empty layer
    cache.metadata()["model"] = "stories15M";
    cache.metadata()["token_ids"] = "1,2,3";
    const std::string path = temp_path("dense.safetensors");
    save_prompt_cache(path, cache);
    const PromptCache loaded = load_prompt_cache(path);
    std::remove(path.c_str());
    ASSERT_EQ(loaded.n_layers(), 3u);
    EXPECT_EQ(loaded.metadata(), cache.metadata());
    EXPECT_EQ(loaded.size(), 37u);
    EXPECT_EQ(loaded.nbytes(), cache.nbytes());
    for (size_t i = 0; i < 3; ++i) test::expect_identical_caches(cache.layer(i), loaded.layer(i));
    // Loaded layers keep their page size, so fused kernels see the same layout.
    EXPECT_EQ(dynamic_cast<const DenseKVCache&>(loaded.layer(0)).page_tokens(), 8u);
  }
}

TEST(PromptCacheIO, InfoReadsHeaderOnly) {
  PromptCache cache;
  cache.add_layer(filled_dense(1, 8, 5, DenseDtype::f16, 4, 9));
  cache.metadata()["model"] = "m";
  const std::string path = temp_path("info.safetensors");
  save_prompt_cache(path, cache);
  const PromptCacheFileInfo info = read_prompt_cache_info(path);
  EXPECT_EQ(info.format_version, kPromptCacheFormatVersion);
  EXPECT_EQ(info.file_bytes, std::filesystem::file_size(path));
  EXPECT_EQ(info.user_metadata.at("model"), "m");
  ASSERT_EQ(info.layers.size(), 1u);
  EXPECT_EQ(info.layers[0].at("class"), "dense");
  EXPECT_EQ(info.layers[0].at("tokens"), "5");
  EXPECT_EQ(info.layer_tensor_bytes[0], 5u * 8 * 2 * 2);
  std::remove(path.c_str());
}

TEST(PromptCacheIO, SaveReplacesAtomicallyAndLeavesNoTemporaries) {
  const std::string dir = temp_path("dir");
  std::filesystem::create_directories(dir);
  const std::string path = dir + "/c.safetensors";
  PromptCache a, b;
  a.add_layer(filled_dense(1, 8, 5, DenseDtype::f16, 4, 1));
  b.add_layer(filled_dense(1, 8, 9, DenseDtype::f16, 4, 2));
  save_prompt_cache(path, a);
  save_prompt_cache(path, b);
  EXPECT_EQ(load_prompt_cache(path).size(), 9u);
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir), {}), 1);
  EXPECT_THROW(save_prompt_cache(dir + "/missing/c.safetensors", a), Error);
  std::filesystem::remove_all(dir);
}

TEST(CacheRegistry, ResolvesClassesAndRejectsUnknown) {
  const auto names = registered_cache_classes();
  EXPECT_NE(std::find(names.begin(), names.end(), "dense"), names.end());
  CacheState state = filled_dense(1, 4, 3, DenseDtype::f32, 2, 5)->save_state();
  EXPECT_EQ(load_kv_cache(state)->size(), 3u);
  state.metadata["class"] = "nonexistent";
  EXPECT_THROW(load_kv_cache(state), Error);
  state.metadata.erase("class");
  EXPECT_THROW(load_kv_cache(state), Error);
  // A run-time registration resolves too.
  register_cache_class("dense_alias_for_test", [](const CacheState& s) {
    CacheState copy = s;
    copy.metadata["class"] = "dense";
    return std::unique_ptr<KVCache>(DenseKVCache::from_state(copy));
  });
  state.metadata["class"] = "dense_alias_for_test";
  // The loader builds a "dense" cache, which disagrees with the requested class.
  EXPECT_THROW(load_kv_cache(state), Error);
  EXPECT_THROW(register_cache_class("", [](const CacheState&) { return nullptr; }), Error);
}

// ---------------------------------------------------------------------------------------------
// Corpus of broken files. Each case mutates a valid file and must be rejected with an Error whose
// message contains the given text.

struct ValidFile {
  std::vector<uint8_t> bytes;
  uint64_t header_len;
  nlohmann::json header;
};

ValidFile valid_file() {
  PromptCache cache;
  cache.add_layer(filled_dense(2, 8, 6, DenseDtype::f16, 4, 11));
  cache.add_layer(filled_dense(2, 8, 6, DenseDtype::f32, 4, 12));
  cache.metadata()["model"] = "x";
  ValidFile f;
  f.bytes = serialize_prompt_cache(cache);
  f.header_len = 0;
  for (int i = 7; i >= 0; --i) f.header_len = (f.header_len << 8) | f.bytes[i];
  f.header = nlohmann::json::parse(f.bytes.begin() + 8, f.bytes.begin() + 8 + f.header_len);
  return f;
}

// Re-encodes the file with a modified header (the data buffer unchanged).
std::vector<uint8_t> with_header(const ValidFile& f, const std::string& header_text) {
  const uint64_t n = header_text.size();
  const size_t data_len = f.bytes.size() - 8 - f.header_len;
  std::vector<uint8_t> out(8 + n + data_len);
  for (int i = 0; i < 8; ++i) out[i] = static_cast<uint8_t>(n >> (8 * i));
  std::memcpy(out.data() + 8, header_text.data(), n);
  if (data_len > 0) std::memcpy(out.data() + 8 + n, f.bytes.data() + 8 + f.header_len, data_len);
  return out;
}

// Recomputes every checksum of an edited header (over the unchanged data buffer), so a case
// reaches the check behind the checksums: a writer bug or a deliberate edit that kept the
// checksums consistent must still be refused by that check.
void reseal(const ValidFile& f, nlohmann::json& h) {
  if (!h.is_object() || !h.contains("__metadata__") || !h["__metadata__"].is_object()) return;
  nlohmann::json& meta = h["__metadata__"];
  nlohmann::json fresh = nlohmann::json::object();
  for (const auto& [k, v] : meta.items()) {
    if (k.rfind("checksum.", 0) == 0 || !v.is_string()) {
      if (k.rfind("checksum.", 0) != 0) fresh[k] = v;
      continue;
    }
    fresh[k] = v;
    fresh["checksum.meta." + k] = checksum_hex(checksum64_pair(k, v.get<std::string>()));
  }
  const size_t data_start = 8 + f.header_len, data_len = f.bytes.size() - data_start;
  for (const auto& [name, t] : h.items()) {
    if (name == "__metadata__" || !t.is_object() || !t.contains("data_offsets")) continue;
    const auto& o = t["data_offsets"];
    if (!o.is_array() || o.size() != 2 || !o[0].is_number_unsigned() || !o[1].is_number_unsigned()) continue;
    const uint64_t b = o[0].get<uint64_t>(), e = o[1].get<uint64_t>();
    if (b > e || e > data_len) continue;
    fresh["checksum.tensor." + name] = checksum_hex(
        checksum64(std::span<const uint8_t>(f.bytes.data() + data_start + b, e - b)));
  }
  meta = std::move(fresh);
}

std::vector<uint8_t> with_json(const ValidFile& f, const std::function<void(nlohmann::json&)>& edit) {
  nlohmann::json h = f.header;
  edit(h);
  reseal(f, h);
  return with_header(f, h.dump());
}

// The same edit with the checksums left as they were: what damage looks like.
std::vector<uint8_t> with_json_unsealed(const ValidFile& f,
                                        const std::function<void(nlohmann::json&)>& edit) {
  nlohmann::json h = f.header;
  edit(h);
  return with_header(f, h.dump());
}

struct BrokenCase {
  std::string name;
  std::function<std::vector<uint8_t>(const ValidFile&)> make;
  std::string expected;
};

std::vector<BrokenCase> broken_corpus() {
  std::vector<BrokenCase> c;
  c.push_back({"empty", [](const ValidFile&) { return std::vector<uint8_t>{}; }, "truncated file"});
  c.push_back({"length_only", [](const ValidFile& f) {
                 return std::vector<uint8_t>(f.bytes.begin(), f.bytes.begin() + 5);
               }, "truncated file"});
  c.push_back({"truncated_header", [](const ValidFile& f) {
                 return std::vector<uint8_t>(f.bytes.begin(), f.bytes.begin() + 8 + f.header_len / 2);
               }, "truncated file: header length"});
  c.push_back({"truncated_data", [](const ValidFile& f) {
                 return std::vector<uint8_t>(f.bytes.begin(), f.bytes.end() - 3);
               }, "out of range"});
  c.push_back({"trailing_bytes", [](const ValidFile& f) {
                 auto b = f.bytes;
                 b.push_back(0);
                 return b;
               }, "trailing bytes"});
  c.push_back({"oversized_header_length", [](const ValidFile& f) {
                 auto b = f.bytes;
                 b[7] = 0x7f;  // ~9e18 bytes
                 return b;
               }, "exceeds the"});
  c.push_back({"header_length_past_eof", [](const ValidFile& f) {
                 auto b = f.bytes;
                 const uint64_t n = f.bytes.size();
                 for (int i = 0; i < 8; ++i) b[i] = static_cast<uint8_t>(n >> (8 * i));
                 return b;
               }, "truncated file: header length"});
  c.push_back({"header_not_json", [](const ValidFile& f) { return with_header(f, "{\"a\": [1, 2"); },
               "not valid JSON"});
  c.push_back({"header_garbage", [](const ValidFile& f) {
                 auto b = f.bytes;
                 for (size_t i = 8; i < 8 + 16; ++i) b[i] = 0xff;
                 return b;
               }, "not valid JSON"});
  c.push_back({"header_not_object", [](const ValidFile& f) { return with_header(f, "[1, 2, 3]"); },
               "not an object"});
  c.push_back({"header_too_deep", [](const ValidFile& f) {
                 return with_header(f, std::string(5000, '[') + std::string(5000, ']'));
               }, "nested deeper"});
  c.push_back({"metadata_not_string", [](const ValidFile& f) {
                 return with_json(f, [](nlohmann::json& h) { h["__metadata__"]["n_layers"] = 2; });
               }, "is not a string"});
  c.push_back({"no_format", [](const ValidFile& f) {
                 return with_json(f, [](nlohmann::json& h) { h["__metadata__"].erase("format"); });
               }, "not a turbokv prompt cache"});
  c.push_back({"newer_version", [](const ValidFile& f) {
                 return with_json(f, [](nlohmann::json& h) { h["__metadata__"]["format_version"] = "3"; });
               }, "format version 3 is newer"});
  // Damage the checksums catch (nothing resealed).
  c.push_back({"flipped_data_byte", [](const ValidFile& f) {
                 auto b = f.bytes;
                 b[8 + f.header_len + 5] ^= 0x10;
                 return b;
               }, "fails its checksum"});
  c.push_back({"edited_layer_metadata", [](const ValidFile& f) {
                 return with_json_unsealed(f, [](nlohmann::json& h) {
                   h["__metadata__"]["layers.0.page_tokens"] = "8";
                 });
               }, "metadata key 'layers.0.page_tokens' fails its checksum"});
  c.push_back({"edited_user_metadata", [](const ValidFile& f) {
                 return with_json_unsealed(f, [](nlohmann::json& h) { h["__metadata__"]["user.model"] = "y"; });
               }, "metadata key 'user.model' fails its checksum"});
  c.push_back({"added_user_metadata", [](const ValidFile& f) {
                 return with_json_unsealed(f, [](nlohmann::json& h) { h["__metadata__"]["user.extra"] = "1"; });
               }, "metadata key 'user.extra' has no checksum"});
  c.push_back({"removed_user_metadata", [](const ValidFile& f) {
                 return with_json_unsealed(f, [](nlohmann::json& h) { h["__metadata__"].erase("user.model"); });
               }, "checksum of key 'user.model', which the file does not hold"});
  c.push_back({"malformed_checksum", [](const ValidFile& f) {
                 return with_json_unsealed(f, [](nlohmann::json& h) {
                   h["__metadata__"]["checksum.meta.user.model"] = "xyz";
                 });
               }, "is not a checksum"});
  c.push_back({"missing_tensor_checksum", [](const ValidFile& f) {
                 return with_json_unsealed(f, [](nlohmann::json& h) {
                   h["__metadata__"].erase("checksum.tensor.layers.1.values");
                 });
               }, "tensor 'layers.1.values' has no checksum"});
  c.push_back({"unknown_checksum_kind", [](const ValidFile& f) {
                 return with_json_unsealed(f, [](nlohmann::json& h) { h["__metadata__"]["checksum.other"] = "0"; });
               }, "unknown metadata key 'checksum.other'"});
  c.push_back({"swapped_tensor_data", [](const ValidFile& f) {
                 // Two same-sized tensors trade places: each still parses, neither matches.
                 return with_json_unsealed(f, [](nlohmann::json& h) {
                   std::swap(h["layers.1.keys"]["data_offsets"], h["layers.1.values"]["data_offsets"]);
                 });
               }, "fails its checksum"});
  c.push_back({"bad_version", [](const ValidFile& f) {
                 return with_json(f, [](nlohmann::json& h) { h["__metadata__"]["format_version"] = "1x"; });
               }, "invalid format_version"});
  c.push_back({"huge_n_layers", [](const ValidFile& f) {
                 return with_json(f, [](nlohmann::json& h) { h["__metadata__"]["n_layers"] = "99999999999"; });
               }, "invalid n_layers"});
  c.push_back({"fewer_layers_than_keys", [](const ValidFile& f) {
                 return with_json(f, [](nlohmann::json& h) { h["__metadata__"]["n_layers"] = "1"; });
               }, "names layer 1 but the file has 1 layers"});
  c.push_back({"unknown_metadata_key", [](const ValidFile& f) {
                 return with_json(f, [](nlohmann::json& h) { h["__metadata__"]["surprise"] = "1"; });
               }, "unknown metadata key 'surprise'"});
  c.push_back({"malformed_layer_key", [](const ValidFile& f) {
                 return with_json(f, [](nlohmann::json& h) { h["__metadata__"]["layers.01.x"] = "1"; });
               }, "malformed layer key"});
  c.push_back({"missing_class", [](const ValidFile& f) {
                 return with_json(f, [](nlohmann::json& h) { h["__metadata__"].erase("layers.1.class"); });
               }, "layer 1 has no 'class'"});
  c.push_back({"unknown_class", [](const ValidFile& f) {
                 return with_json(f, [](nlohmann::json& h) { h["__metadata__"]["layers.0.class"] = "zstd"; });
               }, "unknown cache class 'zstd'"});
  c.push_back({"wrong_dtype", [](const ValidFile& f) {
                 return with_json(f, [](nlohmann::json& h) { h["layers.0.keys"]["dtype"] = "I16"; });
               }, "has dtype I16, expected F16"});
  c.push_back({"unknown_dtype", [](const ValidFile& f) {
                 return with_json(f, [](nlohmann::json& h) { h["layers.0.keys"]["dtype"] = "Q4"; });
               }, "unsupported dtype 'Q4'"});
  c.push_back({"shape_disagrees_with_metadata", [](const ValidFile& f) {
                 return with_json(f, [](nlohmann::json& h) {
                   h["layers.0.keys"]["shape"] = {2, 3, 16};  // same bytes, other shape
                 });
               }, "but the metadata says"});
  c.push_back({"tokens_disagree", [](const ValidFile& f) {
                 return with_json(f, [](nlohmann::json& h) { h["__metadata__"]["layers.1.tokens"] = "7"; });
               }, "but the metadata says"});
  c.push_back({"shape_disagrees_with_offsets", [](const ValidFile& f) {
                 return with_json(f, [](nlohmann::json& h) { h["layers.0.keys"]["shape"] = {2, 6, 9}; });
               }, "needs"});
  c.push_back({"negative_dim", [](const ValidFile& f) {
                 return with_json(f, [](nlohmann::json& h) { h["layers.0.keys"]["shape"] = {2, -6, 8}; });
               }, "non-negative integer"});
  c.push_back({"huge_dims_overflow", [](const ValidFile& f) {
                 return with_json(f, [](nlohmann::json& h) {
                   h["layers.0.keys"]["shape"] = {uint64_t{1} << 40, uint64_t{1} << 40, 8};
                 });
               }, "overflows"});
  c.push_back({"offsets_out_of_range", [](const ValidFile& f) {
                 return with_json(f, [](nlohmann::json& h) {
                   h["layers.0.keys"]["data_offsets"] = {uint64_t{1} << 40, (uint64_t{1} << 40) + 192};
                 });
               }, "out of range"});
  c.push_back({"offsets_reversed", [](const ValidFile& f) {
                 return with_json(f, [](nlohmann::json& h) { h["layers.0.keys"]["data_offsets"] = {10, 0}; });
               }, "reversed"});
  c.push_back({"offsets_overlap", [](const ValidFile& f) {
                 return with_json(f, [](nlohmann::json& h) {
                   h["layers.0.values"]["data_offsets"] = h["layers.0.keys"]["data_offsets"];
                 });
               }, "overlap"});
  c.push_back({"offsets_gap", [](const ValidFile& f) {
                 return with_json(f, [](nlohmann::json& h) {
                   auto& o = h["layers.0.keys"]["data_offsets"];
                   o = {o[0].get<uint64_t>() + 2, o[1].get<uint64_t>() + 2};
                 });
               }, "leave a gap"});
  c.push_back({"offsets_not_pair", [](const ValidFile& f) {
                 return with_json(f, [](nlohmann::json& h) { h["layers.0.keys"]["data_offsets"] = {0}; });
               }, "data_offsets must be [begin, end]"});
  c.push_back({"extra_tensor_field", [](const ValidFile& f) {
                 return with_json(f, [](nlohmann::json& h) { h["layers.0.keys"]["x"] = 1; });
               }, "exactly dtype, shape and data_offsets"});
  c.push_back({"orphan_tensor", [](const ValidFile& f) {
                 return with_json(f, [](nlohmann::json& h) {
                   auto t = h["layers.0.keys"];
                   h.erase("layers.0.keys");
                   h["stray"] = t;
                 });
               }, "belongs to no layer"});
  c.push_back({"missing_tensor", [](const ValidFile& f) {
                 return with_json(f, [](nlohmann::json& h) {
                   // rename keys so the layer lacks "keys" (and has an unexpected tensor)
                   auto t = h["layers.0.keys"];
                   h.erase("layers.0.keys");
                   h["layers.0.kez"] = t;
                 });
               }, "unexpected tensor 'kez'"});
  c.push_back({"bad_head_dim", [](const ValidFile& f) {
                 return with_json(f, [](nlohmann::json& h) { h["__metadata__"]["layers.0.head_dim"] = "0"; });
               }, "'head_dim' = 0 is out of range"});
  c.push_back({"non_numeric_tokens", [](const ValidFile& f) {
                 return with_json(f, [](nlohmann::json& h) { h["__metadata__"]["layers.0.tokens"] = "six"; });
               }, "is not an integer"});
  c.push_back({"bad_dense_dtype", [](const ValidFile& f) {
                 return with_json(f, [](nlohmann::json& h) { h["__metadata__"]["layers.0.dtype"] = "f8"; });
               }, "dtype must be 'f16' or 'f32'"});
  return c;
}

TEST(PromptCacheIO, BrokenFilesAreRejectedWithTheirError) {
  const ValidFile f = valid_file();
  ASSERT_NO_THROW(parse_prompt_cache(f.bytes));
  for (const BrokenCase& bc : broken_corpus()) {
    SCOPED_TRACE(bc.name);
    const auto bytes = bc.make(f);
    try {
      parse_prompt_cache(bytes, bc.name);
      ADD_FAILURE() << bc.name << ": accepted";
    } catch (const Error& e) {
      const std::string msg = e.what();
      if (std::getenv("TURBOKV_PRINT_ERRORS")) std::printf("%s\n", msg.c_str());
      EXPECT_NE(msg.find(bc.expected), std::string::npos) << bc.name << ": " << msg;
      EXPECT_NE(msg.find(bc.name), std::string::npos) << "message does not name the file: " << msg;
    }
  }
}

TEST(PromptCacheIO, MissingFileAndDirectory) {
  EXPECT_THROW(load_prompt_cache(temp_path("does_not_exist")), Error);
  EXPECT_THROW(load_prompt_cache(std::filesystem::temp_directory_path().string()), Error);
}

// Every truncation of a valid file is rejected (never a crash or a silent partial load).
TEST(PromptCacheIO, EveryTruncationIsRejected) {
  const ValidFile f = valid_file();
  for (size_t n = 0; n < f.bytes.size(); n += 7) {
    const std::vector<uint8_t> cut(f.bytes.begin(), f.bytes.begin() + n);
    EXPECT_THROW(parse_prompt_cache(cut), Error) << n;
  }
}

// ---------------------------------------------------------------------------------------------
// Whole-file bound on what loading commits. A TurboQuant layer's sink buffers are allocated up
// front from its `sinks` option (capped at 256 MiB per layer), so a file of a few KiB whose many
// layers each ask for a large sink capacity, and hold no token, would commit 256 MiB per layer.

// A version-2 file of `n_layers` empty TurboQuant layers (8 kv heads x 128) whose `sinks` option
// is `sinks`, with correct checksums (as a hostile writer would make it).
std::vector<uint8_t> empty_turboquant_layers_file(int n_layers, size_t sinks) {
  TurboQuantCacheOptions o;
  o.sinks = 4;
  std::map<std::string, std::string> meta = {{"format", "turbokv.prompt_cache"},
                                             {"format_version", "2"},
                                             {"n_layers", std::to_string(n_layers)}};
  std::vector<TensorBlob> blobs;
  for (int l = 0; l < n_layers; ++l) {
    CacheState state = TurboQuantKVCache(8, 128, o).save_state();
    state.metadata["class"] = "turboquant";
    state.metadata["sinks"] = std::to_string(sinks);
    const std::string prefix = "layers." + std::to_string(l) + ".";
    for (const auto& [k, v] : state.metadata) meta[prefix + k] = v;
    for (TensorBlob& t : state.tensors) {
      t.name = prefix + t.name;
      blobs.push_back(std::move(t));
    }
  }
  std::map<std::string, std::string> checksums;
  for (const auto& [k, v] : meta) checksums["checksum.meta." + k] = checksum_hex(checksum64_pair(k, v));
  for (const TensorBlob& t : blobs) checksums["checksum.tensor." + t.name] = checksum_hex(checksum64(t.data));
  meta.merge(checksums);
  std::vector<const TensorBlob*> ptrs;
  for (const TensorBlob& t : blobs) ptrs.push_back(&t);
  return safetensors::serialize(meta, ptrs);
}

TEST(PromptCacheIO, WholeFileCommitmentIsBoundedByItsSize) {
  // 4096 sinks x 8 heads x 128 x (key + value) x 4 bytes = 32 MiB per layer, within the per-layer
  // cap; 64 such layers would commit 2 GiB from a file of ~0.2 MiB. The loader refuses once the
  // layers built so far exceed 256 MiB + 16 x the file size (at the 9th layer here).
  const auto hostile = empty_turboquant_layers_file(64, 4096);
  ASSERT_LT(hostile.size(), size_t{1} << 20);
  try {
    parse_prompt_cache(hostile, "hostile.safetensors");
    ADD_FAILURE() << "a " << hostile.size() << "-byte file loaded 64 layers of 32 MiB";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("layers 0-8 would hold 288 MiB, more than " +
                        std::to_string(256 + 16 * hostile.size() / (1 << 20)) + " MiB"),
              std::string::npos) << what;
  }
  // The same layers with an honest sink capacity load, as do a few of the large ones.
  EXPECT_EQ(parse_prompt_cache(empty_turboquant_layers_file(64, 4), "honest").n_layers(), 64u);
  EXPECT_EQ(parse_prompt_cache(empty_turboquant_layers_file(2, 4096), "two").n_layers(), 2u);
}

// register_cache_maker: a kind the table does not know becomes buildable by make_kv_cache and
// make_prompt_cache, with the config passed through; null makers and bad registrations are
// refused.
TEST(CacheRegistry, RegisteredMakersBuildTheirKind) {
  CacheConfig config;
  config.kind = "maker_test_kind";
  EXPECT_THROW(make_kv_cache(2, 16, config), Error);
  int calls = 0;
  register_cache_maker("maker_test_kind", [&calls](int kv_heads, int head_dim, const CacheConfig& c) {
    ++calls;
    EXPECT_EQ(c.kind, "maker_test_kind");
    return std::make_unique<DenseKVCache>(kv_heads, head_dim, DenseDtype::f32, c.dense_page_tokens);
  });
  config.dense_page_tokens = 7;
  const auto one = make_kv_cache(2, 16, config);
  EXPECT_EQ(one->kv_heads(), 2);
  EXPECT_EQ(one->head_dim(), 16);
  EXPECT_EQ(dynamic_cast<const DenseKVCache&>(*one).page_tokens(), 7u);
  const PromptCache pc = make_prompt_cache(3, 4, 8, config);
  EXPECT_EQ(pc.n_layers(), 3u);
  EXPECT_EQ(pc.layer(2).head_dim(), 8);
  EXPECT_EQ(calls, 4);
  // A maker that returns null is an error, not a null layer.
  register_cache_maker("maker_test_null", [](int, int, const CacheConfig&) { return nullptr; });
  config.kind = "maker_test_null";
  EXPECT_THROW(make_kv_cache(2, 16, config), Error);
  EXPECT_THROW(register_cache_maker("", [](int, int, const CacheConfig&) { return nullptr; }), Error);
  EXPECT_THROW(register_cache_maker("x", CacheMaker{}), Error);
}

// make_prompt_cache builds every layer through make_kv_cache, dense ones too (it used to build
// dense layers itself, around the registry): a maker registered for "dense" builds both a dense
// config's layers and the dense_layers of a TurboQuant one. The maker registered here builds
// what the built-in one does, so the registration changes nothing for other tests.
int registered_dense_calls = 0;

TEST(CacheRegistry, PromptCacheBuildsDenseLayersThroughTheRegistry) {
  register_cache_maker("dense", [](int kv_heads, int head_dim, const CacheConfig& c) {
    ++registered_dense_calls;
    return std::make_unique<DenseKVCache>(kv_heads, head_dim, c.dense_dtype, c.dense_page_tokens);
  });
  registered_dense_calls = 0;
  const PromptCache dense = make_prompt_cache(3, 2, 16, parse_cache_config("dense"));
  EXPECT_EQ(registered_dense_calls, 3);
  const PromptCache mixed = make_prompt_cache(4, 2, 16, parse_cache_config("turboquant:dense_layers=0;3"));
  EXPECT_EQ(registered_dense_calls, 5);
  EXPECT_EQ(mixed.layer(0).class_name(), "dense");
  EXPECT_EQ(mixed.layer(1).class_name(), "turboquant");
  EXPECT_EQ(mixed.layer(3).class_name(), "dense");
}

}  // namespace
}  // namespace turbokv
