// `turbokv cache-info FILE [--json]`: what a saved prompt cache holds (layers, classes, bits,
// tokens, bytes). The whole file is loaded, so every check a load makes runs (checksums of every
// key and tensor included), then the checks of metadata owners such as the engine
// (cache_info_checks.hpp); a bad file exits non-zero with the error's message.
#include <fmt/format.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "tools/cache/cache_info_checks.hpp"
#include "tools/command_registry.hpp"
#include "turbokv/cache_io.hpp"

namespace turbokv::tools {
namespace {

struct CacheInfoOptions {
  std::string file;
  bool json = false;
};

std::string get(const std::map<std::string, std::string>& m, const std::string& key,
                const std::string& fallback = "-") {
  auto it = m.find(key);
  return it == m.end() ? fallback : it->second;
}

// A short description of a layer's encoding from its metadata.
std::string describe(const std::map<std::string, std::string>& meta) {
  const std::string cls = get(meta, "class");
  if (cls == "dense") return get(meta, "dtype");
  if (cls == "turboquant") {
    std::string s = fmt::format("K{}b {} / V{}b, {}", get(meta, "key_bits"), get(meta, "key_codec"),
                                get(meta, "value_bits"), get(meta, "rotation"));
    if (get(meta, "window", "0") != "0") s += ", window " + get(meta, "window");
    if (get(meta, "sinks", "0") != "0") s += ", sinks " + get(meta, "sinks");
    if (get(meta, "fp32_norm") == "true") s += ", fp32 norms";
    if (get(meta, "norm_correction") == "true") s += ", norm corr.";
    if (get(meta, "center", "false") == "true") s += ", centered";
    return s;
  }
  if (meta.count("bits")) return "bits " + get(meta, "bits");
  return "";
}

int run_cache_info(const CacheInfoOptions& opt) {
  const PromptCacheFileInfo info = read_prompt_cache_info(opt.file);
  const PromptCache cache = load_prompt_cache(opt.file);  // full validation
  for (const CacheInfoCheck& check : cache_info_checks()) check(cache, opt.file);
  if (opt.json) {
    nlohmann::json out = {{"file", opt.file},
                          {"format_version", info.format_version},
                          {"checksums", info.checksummed},
                          {"file_bytes", info.file_bytes},
                          {"n_layers", cache.n_layers()},
                          {"tokens", cache.size()},
                          {"nbytes", cache.nbytes()},
                          {"metadata", info.user_metadata},
                          {"layers", nlohmann::json::array()}};
    for (size_t i = 0; i < cache.n_layers(); ++i) {
      const KVCache& layer = cache.layer(i);
      out["layers"].push_back({{"index", i},
                               {"class", layer.class_name()},
                               {"kv_heads", layer.kv_heads()},
                               {"head_dim", layer.head_dim()},
                               {"tokens", layer.size()},
                               {"first_held", layer.first_held()},
                               {"nbytes", layer.nbytes()},
                               {"metadata", info.layers[i]}});
    }
    fmt::print("{}\n", out.dump());
    return 0;
  }
  fmt::print("{}: turbokv prompt cache, format version {}, {} bytes, {}\n", opt.file,
             info.format_version, info.file_bytes,
             info.checksummed ? "checksums verified" : "no checksums (damage undetectable)");
  for (const auto& [k, v] : info.user_metadata) {
    fmt::print("  {}: {}\n", k, v.size() > 100 ? v.substr(0, 97) + "..." : v);
  }
  fmt::print("{} layers, {} tokens, {} bytes held\n", cache.n_layers(), cache.size(),
             cache.nbytes());
  // Per layer kind: a sliding-window layer's ring holds only its last positions (first_held > 0).
  size_t ring_layers = 0, ring_bytes = 0;
  for (size_t i = 0; i < cache.n_layers(); ++i) {
    if (cache.layer(i).first_held() == 0) continue;
    ++ring_layers;
    ring_bytes += cache.layer(i).nbytes();
  }
  if (ring_layers > 0) {
    fmt::print("  sliding-window rings: {} layers, {} bytes; layers holding every token: {}, {} bytes\n", ring_layers,
               ring_bytes, cache.n_layers() - ring_layers, cache.nbytes() - ring_bytes);
  }
  fmt::print("{:>5} {:<11} {:>8} {:>8} {:>8} {:>8} {:>12} {:>9}  {}\n", "layer", "class", "kv_heads",
             "head_dim", "tokens", "held", "bytes", "B/held", "encoding");
  for (size_t i = 0; i < cache.n_layers(); ++i) {
    const KVCache& layer = cache.layer(i);
    const size_t held = layer.size() - layer.first_held();
    const double per_token = held ? static_cast<double>(layer.nbytes()) / held : 0.0;
    fmt::print("{:>5} {:<11} {:>8} {:>8} {:>8} {:>8} {:>12} {:>9.1f}  {}\n", i, layer.class_name(),
               layer.kv_heads(), layer.head_dim(), layer.size(), held, layer.nbytes(), per_token,
               describe(info.layers[i]));
  }
  return 0;
}

const CommandRegistration registration{"cache-info", [](CLI::App& app) {
  auto opt = std::make_shared<CacheInfoOptions>();
  app.description("Describe a saved prompt cache (validates the whole file)");
  app.add_option("file", opt->file, "Prompt cache file (.safetensors)")->required();
  app.add_flag("--json", opt->json, "Print one JSON object instead of the table");
  return [opt] { return run_cache_info(*opt); };
}};

}  // namespace
}  // namespace turbokv::tools
