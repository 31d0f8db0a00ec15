// save_prompt_cache / load_prompt_cache: the C++ PromptCache safetensors format (docs/formats.md),
// so files move freely between Python and `turbokv generate --save-cache/--load-cache`.
#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <vector>

#include "binding.hpp"
#include "turbokv/cache_io.hpp"

namespace turbokv::python {
namespace {

// Lends each Layer's cache to a PromptCache for the save and gives it back afterwards, even if
// the save throws: no copy of the (possibly large) caches is made.
class LentLayers {
 public:
  explicit LentLayers(const std::vector<Layer*>& layers) : layers_(layers), locks_(layers, true) {
    std::vector<std::unique_ptr<KVCache>> caches;
    for (Layer* l : layers_) caches.push_back(std::move(l->cache));
    prompt_ = PromptCache(std::move(caches));
  }
  ~LentLayers() {
    auto caches = prompt_.release_layers();
    for (size_t i = 0; i < layers_.size(); ++i) layers_[i]->cache = std::move(caches[i]);
  }
  LentLayers(const LentLayers&) = delete;
  LentLayers& operator=(const LentLayers&) = delete;
  PromptCache& prompt() { return prompt_; }

 private:
  std::vector<Layer*> layers_;
  LayerLocks locks_;
  PromptCache prompt_;
};

void save(const std::string& path, const std::vector<Layer*>& layers, const std::map<std::string, std::string>& metadata) {
  if (layers.empty()) throw Error("save_prompt_cache: no layers to save");
  for (size_t i = 0; i < layers.size(); ++i) {
    if (layers[i] == nullptr) throw Error(fmt::format("save_prompt_cache: layer {} is None", i));
  }
  py::gil_scoped_release unlocked;
  LentLayers lent(layers);
  lent.prompt().metadata() = metadata;
  as_file_errors([&] { save_prompt_cache(path, lent.prompt()); });
}

py::tuple load(const std::string& path) {
  PromptCache prompt;
  {
    py::gil_scoped_release unlocked;
    prompt = as_file_errors([&] { return load_prompt_cache(path); });
  }
  const auto metadata = prompt.metadata();
  py::list layers;
  for (auto& cache : prompt.release_layers()) layers.append(std::make_unique<Layer>(std::move(cache)));
  return py::make_tuple(layers, metadata);
}

py::dict info(const std::string& path) {
  const auto i = as_file_errors([&] { return read_prompt_cache_info(path); });
  py::dict d;
  d["format_version"] = i.format_version;
  d["checksummed"] = i.checksummed;
  d["file_bytes"] = i.file_bytes;
  d["user_metadata"] = i.user_metadata;
  d["layers"] = i.layers;
  d["layer_tensor_bytes"] = i.layer_tensor_bytes;
  return d;
}

}  // namespace

void bind_cache_io(py::module_& m) {
  m.def("save_prompt_cache", &save, py::arg("path"), py::arg("layers"), py::arg("metadata"),
        "Writes the layers (one Layer per model layer) and string metadata as a turbokv prompt cache "
        "(crash-safe: temporary file, fsync, rename). OSError if the file cannot be written.");
  m.def("load_prompt_cache", &load, py::arg("path"),
        "(layers, metadata) of a saved prompt cache; OSError for a missing, truncated or corrupt file.");
  m.def("prompt_cache_info", &info, py::arg("path"),
        "The header of a saved prompt cache (what `turbokv cache-info` prints), without loading it.");
}

}  // namespace turbokv::python
