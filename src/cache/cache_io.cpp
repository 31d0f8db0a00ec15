// PromptCache and its single-file safetensors format (see cache_io.hpp and docs/formats.md).
#include "turbokv/cache_io.hpp"

#include <fmt/format.h>

#include <charconv>
#include <cstdio>
#include <optional>

#include "cache/safetensors.hpp"
#include "core/check.hpp"
#include "turbokv/checksum.hpp"
#include "turbokv/dense_cache.hpp"
#include "turbokv/turboquant_cache.hpp"

namespace turbokv {
namespace {

constexpr const char* kFormatName = "turbokv.prompt_cache";
constexpr size_t kMaxLayers = 65536;
// What loading a file may commit, all layers together: kCommitAllowance plus kCommitPerFileByte
// per byte of the file. A layer's buffers can exceed the data its file holds (TurboQuant sink
// capacity is allocated up front, up to 256 MiB per layer; a page is allocated whole), so without
// a whole-file bound a file of a few KiB with many empty layers could commit 256 MiB per layer.
// The allowance covers honest slack (one partial page per layer: 80 layers of 1-token dense fp16
// pages of 256 tokens x 8 heads x 128 are 80 MiB); data-proportional memory is far below 16x.
constexpr uint64_t kCommitAllowance = uint64_t{256} << 20;
constexpr uint64_t kCommitPerFileByte = 16;
// Format version 2 keys: "checksum.meta.<key>" covers metadata key <key> and its value,
// "checksum.tensor.<name>" covers tensor <name>'s bytes (see cache_io.hpp).
const std::string kMetaChecksumPrefix = "checksum.meta.";
const std::string kTensorChecksumPrefix = "checksum.tensor.";
const std::string kChecksumPrefix = "checksum.";

bool starts_with(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }

uint64_t stored_checksum(const std::string& file, const std::string& key, const std::string& value) {
  const std::optional<uint64_t> parsed = parse_checksum_hex(value);
  TURBOKV_CHECK(parsed.has_value(), "'{}': metadata '{}' = '{}' is not a checksum (16 lowercase hex "
                "digits): the file is damaged", file, key, value);
  return *parsed;
}

// Version 2: every metadata key but the checksums themselves has a checksum.meta entry that
// matches; no checksum.meta entry names an absent key; any other checksum.* key except the
// tensor checksums (verified as each tensor is read) is unknown. Runs before anything else is
// parsed, so a damaged value is reported as damage, not as whatever parse error it would cause.
void verify_metadata_checksums(const std::string& file,
                               const std::map<std::string, std::string>& meta) {
  for (const auto& [key, value] : meta) {
    if (starts_with(key, kMetaChecksumPrefix)) {
      const std::string covered = key.substr(kMetaChecksumPrefix.size());
      TURBOKV_CHECK(meta.count(covered) == 1 && !starts_with(covered, kChecksumPrefix),
                    "'{}': metadata '{}' is a checksum of key '{}', which the file does not hold "
                    "(a key was removed or renamed: the file is damaged)", file, key, covered);
      continue;
    }
    if (starts_with(key, kChecksumPrefix)) {
      TURBOKV_CHECK(starts_with(key, kTensorChecksumPrefix), "'{}': unknown metadata key '{}'",
                    file, key);
      continue;
    }
    const auto it = meta.find(kMetaChecksumPrefix + key);
    TURBOKV_CHECK(it != meta.end(), "'{}': metadata key '{}' has no checksum (a key was added or "
                  "renamed: the file is damaged)", file, key);
    const uint64_t stored = stored_checksum(file, it->first, it->second);
    const uint64_t actual = checksum64_pair(key, value);
    TURBOKV_CHECK(stored == actual, "'{}': metadata key '{}' fails its checksum (stored {}, "
                  "computed {}): the file is damaged", file, key, checksum_hex(stored),
                  checksum_hex(actual));
  }
}

// Warned once per load: nothing detects damage to a version-1 file's codes or metadata.
void warn_unchecked(const std::string& file) {
  std::fprintf(stderr, "turbokv: warning: '%s' is a format-version-1 prompt cache: it carries no "
               "checksums, so damage to it cannot be detected (save it again to add them)\n",
               file.c_str());
}

// Parses "layers.<i>.<rest>"; returns false if `key` does not start with "layers.". Throws on a
// malformed index.
bool split_layer_key(const std::string& key, const std::string& file, size_t n_layers,
                     size_t* layer, std::string* rest) {
  static const std::string prefix = "layers.";
  if (key.rfind(prefix, 0) != 0) return false;
  const size_t dot = key.find('.', prefix.size());
  const std::string index = key.substr(prefix.size(), dot == std::string::npos ? std::string::npos
                                                                               : dot - prefix.size());
  size_t value = 0;
  auto [end, ec] = std::from_chars(index.data(), index.data() + index.size(), value);
  TURBOKV_CHECK(dot != std::string::npos && dot + 1 < key.size() && !index.empty() &&
                    ec == std::errc() && end == index.data() + index.size() &&
                    index == std::to_string(value),
                "'{}': malformed layer key '{}' (expected layers.<index>.<name>)", file, key);
  TURBOKV_CHECK(value < n_layers, "'{}': key '{}' names layer {} but the file has {} layers",
                file, key, value, n_layers);
  *layer = value;
  *rest = key.substr(dot + 1);
  return true;
}

struct LayerTensor {
  std::string name;                       // inside the layer
  const safetensors::TensorInfo* info;    // in the file
  std::optional<uint64_t> checksum;       // stored checksum of its bytes (version >= 2)
};

struct Layout {
  int version = 0;
  std::map<std::string, std::string> user;
  std::vector<std::map<std::string, std::string>> layer_metadata;
  std::vector<std::vector<LayerTensor>> layer_tensors;
};

Layout parse_layout(const safetensors::Reader& reader) {
  const std::string& file = reader.source_name();
  const auto& meta = reader.metadata();
  auto get = [&](const char* key) -> const std::string& {
    auto it = meta.find(key);
    TURBOKV_CHECK(it != meta.end(), "'{}': not a turbokv prompt cache (no '{}' metadata)", file,
                  key);
    return it->second;
  };
  TURBOKV_CHECK(get("format") == kFormatName,
                "'{}': not a turbokv prompt cache (format is '{}', expected '{}')", file,
                get("format"), kFormatName);
  Layout layout;
  const std::string& version = get("format_version");
  auto [vend, vec] = std::from_chars(version.data(), version.data() + version.size(),
                                     layout.version);
  TURBOKV_CHECK(vec == std::errc() && vend == version.data() + version.size() &&
                    layout.version >= kPromptCacheOldestFormatVersion,
                "'{}': invalid format_version '{}'", file, version);
  TURBOKV_CHECK(layout.version <= kPromptCacheFormatVersion,
                "'{}': format version {} is newer than this build supports ({}); upgrade turbokv",
                file, layout.version, kPromptCacheFormatVersion);
  const bool checksummed = layout.version >= 2;
  if (checksummed) verify_metadata_checksums(file, meta);
  const std::string& n_str = get("n_layers");
  size_t n_layers = 0;
  auto [nend, nec] = std::from_chars(n_str.data(), n_str.data() + n_str.size(), n_layers);
  TURBOKV_CHECK(nec == std::errc() && nend == n_str.data() + n_str.size() && !n_str.empty() &&
                    n_layers <= kMaxLayers,
                "'{}': invalid n_layers '{}' (at most {})", file, n_str, kMaxLayers);
  layout.layer_metadata.resize(n_layers);
  layout.layer_tensors.resize(n_layers);

  for (const auto& [key, value] : meta) {
    if (key == "format" || key == "format_version" || key == "n_layers") continue;
    if (checksummed && starts_with(key, kChecksumPrefix)) {
      if (starts_with(key, kTensorChecksumPrefix)) {
        TURBOKV_CHECK(reader.find(key.substr(kTensorChecksumPrefix.size())) != nullptr,
                      "'{}': metadata '{}' is a checksum of tensor '{}', which the file does not "
                      "hold: the file is damaged", file, key,
                      key.substr(kTensorChecksumPrefix.size()));
      }
      continue;  // checked by verify_metadata_checksums / below
    }
    if (key.rfind("user.", 0) == 0) {
      layout.user[key.substr(5)] = value;
      continue;
    }
    size_t layer = 0;
    std::string rest;
    TURBOKV_CHECK(split_layer_key(key, file, n_layers, &layer, &rest),
                  "'{}': unknown metadata key '{}'", file, key);
    layout.layer_metadata[layer][rest] = value;
  }
  for (const auto& info : reader.tensors()) {
    size_t layer = 0;
    std::string rest;
    TURBOKV_CHECK(split_layer_key(info.name, file, n_layers, &layer, &rest),
                  "'{}': tensor '{}' belongs to no layer", file, info.name);
    std::optional<uint64_t> checksum;
    if (checksummed) {
      const std::string key = kTensorChecksumPrefix + info.name;
      const auto it = meta.find(key);
      TURBOKV_CHECK(it != meta.end(), "'{}': tensor '{}' has no checksum (no '{}' metadata: the "
                    "file is damaged)", file, info.name, key);
      checksum = stored_checksum(file, key, it->second);
    }
    layout.layer_tensors[layer].push_back({rest, &info, checksum});
  }
  for (size_t i = 0; i < n_layers; ++i) {
    TURBOKV_CHECK(layout.layer_metadata[i].count("class") == 1,
                  "'{}': layer {} has no 'class' metadata", file, i);
  }
  return layout;
}

// Memory a loaded layer holds: its allocation where the class reports one (spare page and sink
// capacity included), else its data.
uint64_t committed_bytes(const KVCache& layer) {
  if (const auto* tq = dynamic_cast<const TurboQuantKVCache*>(&layer)) return tq->allocated_bytes();
  if (const auto* dense = dynamic_cast<const DenseKVCache*>(&layer)) return dense->allocated_bytes();
  return layer.nbytes();
}

PromptCache load_from_reader(const safetensors::Reader& reader) {
  const Layout layout = parse_layout(reader);
  if (layout.version < 2) warn_unchecked(reader.source_name());
  const uint64_t file_bytes = reader.source_size();
  const uint64_t commit_limit = kCommitAllowance + kCommitPerFileByte * file_bytes;
  uint64_t committed = 0;
  PromptCache cache;
  cache.metadata() = layout.user;
  for (size_t i = 0; i < layout.layer_metadata.size(); ++i) {
    CacheState state;
    state.metadata = layout.layer_metadata[i];
    for (const LayerTensor& t : layout.layer_tensors[i]) {
      uint64_t actual = 0;
      state.tensors.push_back(reader.read(*t.info, t.name, t.checksum ? &actual : nullptr));
      if (t.checksum) {
        TURBOKV_CHECK(actual == *t.checksum, "'{}': tensor '{}' fails its checksum (stored {}, "
                      "computed {}): the file is damaged", reader.source_name(), t.info->name,
                      checksum_hex(*t.checksum), checksum_hex(actual));
      }
    }
    std::unique_ptr<KVCache> layer;
    try {
      layer = load_kv_cache(state);
    } catch (const Error& e) {
      detail::fail("'{}': layer {}: {}", reader.source_name(), i, e.what());
    }
    // Checked as each layer is built, so what is committed before the refusal is at most the
    // limit plus one layer (whose own size the per-class caps bound).
    committed += committed_bytes(*layer);
    TURBOKV_CHECK(committed <= commit_limit, "'{}': layers 0-{} would hold {} MiB, more than "
                  "{} MiB for a file of {} bytes (the file asks for buffers its data cannot fill: "
                  "it is damaged or hostile)", reader.source_name(), i, committed >> 20,
                  commit_limit >> 20, file_bytes);
    cache.add_layer(std::move(layer));
  }
  return cache;
}

// Flattens the cache into file metadata and tensors (layer states are kept alive in `states`).
std::map<std::string, std::string> flatten(const PromptCache& cache,
                                           std::vector<CacheState>* states,
                                           std::vector<const TensorBlob*>* tensors) {
  std::map<std::string, std::string> meta = {
      {"format", kFormatName},
      {"format_version", std::to_string(kPromptCacheFormatVersion)},
      {"n_layers", std::to_string(cache.n_layers())}};
  for (const auto& [k, v] : cache.metadata()) meta["user." + k] = v;
  states->reserve(cache.n_layers());
  for (size_t i = 0; i < cache.n_layers(); ++i) {
    states->push_back(cache.layer(i).save_state());
    CacheState& state = states->back();
    state.metadata["class"] = cache.layer(i).class_name();
    const std::string prefix = fmt::format("layers.{}.", i);
    for (const auto& [k, v] : state.metadata) meta[prefix + k] = v;
    for (TensorBlob& t : state.tensors) {
      t.name = prefix + t.name;
      tensors->push_back(&t);
    }
  }
  // Checksums last, over the final keys and values (std::map: the keys added below are new).
  std::map<std::string, std::string> checksums;
  for (const auto& [k, v] : meta) checksums[kMetaChecksumPrefix + k] = checksum_hex(checksum64_pair(k, v));
  for (const TensorBlob* t : *tensors) {
    checksums[kTensorChecksumPrefix + t->name] = checksum_hex(checksum64(t->data));
  }
  meta.merge(checksums);
  return meta;
}

}  // namespace

PromptCache::PromptCache(std::vector<std::unique_ptr<KVCache>> layers) {
  for (auto& l : layers) add_layer(std::move(l));
}

KVCache& PromptCache::layer(size_t i) {
  TURBOKV_CHECK(i < layers_.size(), "PromptCache: layer {} out of range ({} layers)", i,
                layers_.size());
  return *layers_[i];
}

const KVCache& PromptCache::layer(size_t i) const {
  TURBOKV_CHECK(i < layers_.size(), "PromptCache: layer {} out of range ({} layers)", i,
                layers_.size());
  return *layers_[i];
}

void PromptCache::add_layer(std::unique_ptr<KVCache> cache) {
  TURBOKV_CHECK(cache != nullptr, "PromptCache::add_layer: null cache");
  layers_.push_back(std::move(cache));
}

size_t PromptCache::size() const { return layers_.empty() ? 0 : layers_[0]->size(); }

size_t PromptCache::nbytes() const {
  size_t total = 0;
  for (const auto& l : layers_) total += l->nbytes();
  return total;
}

size_t PromptCache::trim(size_t n) {
  size_t dropped = 0;
  for (size_t i = 0; i < layers_.size(); ++i) {
    const size_t d = layers_[i]->trim(n);
    if (i == 0) dropped = d;
  }
  return dropped;
}

void save_prompt_cache(const std::string& path, const PromptCache& cache) {
  std::vector<CacheState> states;
  std::vector<const TensorBlob*> tensors;
  const auto meta = flatten(cache, &states, &tensors);
  safetensors::write_file(path, meta, tensors);
}

std::vector<uint8_t> serialize_prompt_cache(const PromptCache& cache) {
  std::vector<CacheState> states;
  std::vector<const TensorBlob*> tensors;
  const auto meta = flatten(cache, &states, &tensors);
  return safetensors::serialize(meta, tensors);
}

PromptCache load_prompt_cache(const std::string& path) {
  return load_from_reader(safetensors::Reader(safetensors::open_file_source(path)));
}

PromptCache parse_prompt_cache(std::span<const uint8_t> bytes, const std::string& name) {
  return load_from_reader(safetensors::Reader(safetensors::memory_source(bytes, name)));
}

PromptCacheFileInfo read_prompt_cache_info(const std::string& path) {
  auto source = safetensors::open_file_source(path);
  const uint64_t file_bytes = source->size();
  const safetensors::Reader reader(std::move(source));
  const Layout layout = parse_layout(reader);
  PromptCacheFileInfo info;
  info.format_version = layout.version;
  info.checksummed = layout.version >= 2;
  info.file_bytes = file_bytes;
  info.user_metadata = layout.user;
  info.layers = layout.layer_metadata;
  for (const auto& tensors : layout.layer_tensors) {
    uint64_t bytes = 0;
    for (const LayerTensor& t : tensors) bytes += t.info->end - t.info->begin;
    info.layer_tensor_bytes.push_back(bytes);
  }
  return info;
}

}  // namespace turbokv
