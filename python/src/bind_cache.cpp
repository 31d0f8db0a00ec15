// turbokv._core.Layer: one sequence's cache of one attention layer (any C++ cache class), and
// the makers of the two built-in classes. The Python classes in turbokv/cache.py hold one Layer
// per batch element.
#include <fmt/format.h>

#include <array>
#include <cstring>
#include <mutex>
#include <vector>

#include "binding.hpp"
#include "turbokv/cache_io.hpp"
#include "turbokv/dense_cache.hpp"
#include "turbokv/turboquant_cache.hpp"

namespace turbokv::python {
namespace {

// A Layer method that takes the layer's lock with the GIL released (never lock while holding
// the GIL: update_and_fetch takes the GIL while holding layer locks).
template <class Fn>
auto shared_call(const Layer& layer, Fn&& fn) {
  py::gil_scoped_release unlocked;
  std::shared_lock lock(layer.mutex);
  return fn(*layer.cache);
}

// Safetensors dtype name <-> numpy dtype, for the state tensors.
py::dtype numpy_dtype(const std::string& name) {
  if (name == "U8") return py::dtype::of<uint8_t>();
  if (name == "F16") return py::dtype("float16");
  if (name == "F32") return py::dtype::of<float>();
  if (name == "I32") return py::dtype::of<int32_t>();
  if (name == "I64") return py::dtype::of<int64_t>();
  throw Error(fmt::format("state tensor dtype {} has no numpy equivalent", name));
}

std::string state_dtype(const py::dtype& dtype, const std::string& tensor) {
  const char kind = dtype.kind();
  const auto size = dtype.itemsize();
  if (kind == 'u' && size == 1) return "U8";
  if (kind == 'f' && size == 2) return "F16";
  if (kind == 'f' && size == 4) return "F32";
  if (kind == 'i' && size == 4) return "I32";
  if (kind == 'i' && size == 8) return "I64";
  throw Error(fmt::format("state tensor '{}' has dtype {}; expected uint8, float16, float32, int32 or int64", tensor,
                          dtype.attr("name").cast<std::string>()));
}

// (metadata, tensors): the cache's saved state as Python dicts of str and numpy arrays.
py::tuple save_state(const Layer& layer) {
  CacheState state;
  {
    py::gil_scoped_release unlocked;
    std::shared_lock lock(layer.mutex);
    state = layer.cache->save_state();
  }
  py::dict metadata, tensors;
  for (const auto& [key, value] : state.metadata) metadata[py::str(key)] = py::str(value);
  for (auto& blob : state.tensors) {
    py::array a(numpy_dtype(blob.dtype), std::vector<py::ssize_t>(blob.shape.begin(), blob.shape.end()));
    if (static_cast<size_t>(a.nbytes()) != blob.data.size()) {
      throw Error(fmt::format("state tensor '{}': {} bytes for its shape", blob.name, blob.data.size()));
    }
    if (!blob.data.empty()) std::memcpy(a.mutable_data(), blob.data.data(), blob.data.size());
    tensors[py::str(blob.name)] = std::move(a);
  }
  return py::make_tuple(metadata, tensors);
}

std::unique_ptr<Layer> from_state(const std::map<std::string, std::string>& metadata, const py::dict& tensors) {
  CacheState state;
  state.metadata = metadata;
  for (const auto& [key, value] : tensors) {
    const auto name = py::cast<std::string>(key);
    if (!py::isinstance<py::array>(value)) throw Error(fmt::format("state tensor '{}' must be a numpy array", name));
    const py::array a = c_contiguous(py::reinterpret_borrow<py::array>(value));
    TensorBlob blob{name, state_dtype(a.dtype(), name), {}, {}};
    for (py::ssize_t d = 0; d < a.ndim(); ++d) blob.shape.push_back(a.shape(d));
    const auto* bytes = static_cast<const uint8_t*>(a.data());
    blob.data.assign(bytes, bytes + a.nbytes());
    state.tensors.push_back(std::move(blob));
  }
  py::gil_scoped_release unlocked;
  return std::make_unique<Layer>(load_kv_cache(state));
}

TurboQuantCacheOptions turboquant_options(double key_bits, double value_bits, const std::string& key_codec,
                                          const std::string& rotation, std::optional<unsigned long long> seed,
                                          long long window, long long sinks, bool norm_correction, bool fp32_norm,
                                          bool center, const std::string& exact_dtype, long long page_tokens) {
  TurboQuantCacheOptions o;
  o.key_bits = key_bits;
  o.value_bits = value_bits;
  o.key_codec = parse_codec_kind(key_codec);
  o.rotation = parse_rotation_kind(rotation);
  if (seed) o.seed = *seed;
  o.window = non_negative(window, "window");
  o.sinks = non_negative(sinks, "sinks");
  o.norm_correction = norm_correction;
  o.fp32_norm = fp32_norm;
  o.center = center;
  o.exact_dtype = parse_dense_dtype(exact_dtype);
  o.page_tokens = non_negative(page_tokens, "page_tokens");
  return o;
}

// The keyword arguments of make_turboquant and Layer.to_turboquant.
#define TURBOKV_TQ_ARGS                                                                                         \
  py::arg("key_bits") = 4.0, py::arg("value_bits") = 4.0, py::arg("key_codec") = "mse",                         \
      py::arg("rotation") = "hadamard", py::arg("seed") = py::none(), py::arg("window") = 0, py::arg("sinks") = 0, \
      py::arg("norm_correction") = true, py::arg("fp32_norm") = false, py::arg("center") = false,                \
      py::arg("exact_dtype") = "f32", py::arg("page_tokens") = 256

}  // namespace

void bind_cache(py::module_& m) {
  py::class_<Layer>(m, "Layer",
                    "One sequence's KV cache of one attention layer (any C++ cache class). Tensors are "
                    "[kv_heads, tokens, head_dim]. Thread-safe: one writer or many readers at a time.")
      .def_property_readonly("class_name", [](const Layer& l) { return l.cache->class_name(); })
      .def_property_readonly("kv_heads", [](const Layer& l) { return l.cache->kv_heads(); })
      .def_property_readonly("head_dim", [](const Layer& l) { return l.cache->head_dim(); })
      .def("size", [](const Layer& l) { return shared_call(l, [](const KVCache& c) { return c.size(); }); },
           "Tokens held.")
      .def_property_readonly("nbytes", [](const Layer& l) { return shared_call(l, [](const KVCache& c) { return c.nbytes(); }); },
                             "Exact bytes of the cache's data (codes, norms, exact windows), as the C++ "
                             "KVCache::nbytes() accounts them.")
      .def("trim",
           [](Layer& l, long long n) {
             const size_t count = non_negative(n, "trim count");
             py::gil_scoped_release unlocked;
             std::unique_lock lock(l.mutex);
             return l.cache->trim(count);
           },
           py::arg("n"), "Drops the newest n tokens (at most size()); returns how many were dropped.")
      .def("save_state", &save_state, "(metadata, tensors): the state from which from_state rebuilds the cache bit-exactly.")
      .def_static("from_state", &from_state, py::arg("metadata"), py::arg("tensors"),
                  "Rebuilds a cache (of the class metadata['class'] names) from save_state() output.")
      .def("to_turboquant",
           [](const Layer& l, double key_bits, double value_bits, const std::string& key_codec,
              const std::string& rotation, std::optional<unsigned long long> seed, long long window, long long sinks,
              bool norm_correction, bool fp32_norm, bool center, const std::string& exact_dtype, long long page_tokens) {
             const auto options = turboquant_options(key_bits, value_bits, key_codec, rotation, seed, window, sinks,
                                                     norm_correction, fp32_norm, center, exact_dtype, page_tokens);
             py::gil_scoped_release unlocked;
             std::shared_lock lock(l.mutex);
             return std::make_unique<Layer>(to_turboquant(*l.cache, options));
           },
           TURBOKV_TQ_ARGS, "A TurboQuant cache holding this cache's tokens (the same codes as appending them).")
      .def("turboquant_info",
           [](const Layer& l) {
             // Options and code sizes are fixed at construction; the region sizes are read
             // under the lock.
             const auto* tq = dynamic_cast<const TurboQuantKVCache*>(l.cache.get());
             if (tq == nullptr) throw Error("not a TurboQuant cache");
             const auto sizes = shared_call(l, [tq](const KVCache&) {
               return std::array<size_t, 3>{tq->n_sinks(), tq->compressed_size(), tq->window_size()};
             });
             py::dict d;
             d["key_bits"] = tq->options().key_bits;
             d["value_bits"] = tq->options().value_bits;
             d["key_code_size"] = tq->key_code_size();
             d["value_code_size"] = tq->value_code_size();
             d["n_sinks"] = sizes[0];
             d["compressed_size"] = sizes[1];
             d["window_size"] = sizes[2];
             d["exact_element_size"] = tq->exact_f16() ? 2 : 4;
             d["centered"] = tq->options().center;
             return d;
           },
           "Sizes behind nbytes: code sizes per token and head, and the tokens in each region.");

  m.def("make_dense",
        [](int kv_heads, int head_dim, const std::string& dtype, long long page_tokens) {
          return std::make_unique<Layer>(std::make_unique<DenseKVCache>(
              kv_heads, head_dim, parse_dense_dtype(dtype), non_negative(page_tokens, "page_tokens")));
        },
        py::arg("kv_heads"), py::arg("head_dim"), py::arg("dtype") = "f16", py::arg("page_tokens") = 256,
        "An empty dense cache (dtype 'f16' or 'f32').");
  m.def("make_turboquant",
        [](int kv_heads, int head_dim, double key_bits, double value_bits, const std::string& key_codec,
           const std::string& rotation, std::optional<unsigned long long> seed, long long window, long long sinks,
           bool norm_correction, bool fp32_norm, bool center, const std::string& exact_dtype, long long page_tokens) {
          const auto options = turboquant_options(key_bits, value_bits, key_codec, rotation, seed, window, sinks,
                                                  norm_correction, fp32_norm, center, exact_dtype, page_tokens);
          py::gil_scoped_release unlocked;
          return std::make_unique<Layer>(std::make_unique<TurboQuantKVCache>(kv_heads, head_dim, options));
        },
        py::arg("kv_heads"), py::arg("head_dim"), TURBOKV_TQ_ARGS, "An empty TurboQuant cache.");
}

}  // namespace turbokv::python
