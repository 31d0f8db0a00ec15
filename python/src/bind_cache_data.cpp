// turbokv._core.update_and_fetch: the data path of every Python cache. Appends a batch's keys
// and values to its layers and returns the whole caches as numpy arrays, dequantized straight
// into them, all under the layers' locks.
#include <fmt/format.h>

#include <cmath>
#include <mutex>
#include <vector>

#include "binding.hpp"
#include "turbokv/dense_cache.hpp"
#include "turbokv/half.hpp"
#include "turbokv/turboquant_cache.hpp"

namespace turbokv::python {
namespace {

// Checks keys/values of `ndim` dimensions (the last three [kv_heads, tokens, head_dim]): float32
// or float16, the same shape and dtype. Returns their kind.
FloatKind check_kv(const py::array& keys, const py::array& values, int ndim, const char* shape_text) {
  require_ndim(keys, ndim, "keys", shape_text);
  require_ndim(values, ndim, "values", shape_text);
  const FloatKind kind = float_kind(keys, "keys");
  if (float_kind(values, "values") != kind) throw Error("keys and values must have the same dtype");
  for (int d = 0; d < ndim; ++d) {
    if (keys.shape(d) != values.shape(d)) throw Error("keys and values must have the same shape");
  }
  return kind;
}

// Appends n_tokens tokens ([kv_heads][n_tokens][head_dim] at k/v, float32 or fp16 bits) to a
// cache whose lock the caller holds.
void append_locked(KVCache& cache, FloatKind kind, const void* k, const void* v, py::ssize_t kv_heads,
                   size_t n_tokens, py::ssize_t head_dim) {
  if (kv_heads != cache.kv_heads() || head_dim != cache.head_dim()) {
    throw Error(fmt::format("this cache holds {} kv heads of head_dim {}; got keys of {} kv heads, head_dim {}",
                            cache.kv_heads(), cache.head_dim(), kv_heads, head_dim));
  }
  const size_t count = static_cast<size_t>(kv_heads) * n_tokens * static_cast<size_t>(head_dim);
  if (kind == FloatKind::f32) {
    cache.append({static_cast<const float*>(k), count}, {static_cast<const float*>(v), count}, n_tokens);
    return;
  }
  const std::span<const uint16_t> k16{static_cast<const uint16_t*>(k), count};
  const std::span<const uint16_t> v16{static_cast<const uint16_t*>(v), count};
  if (auto* tq = dynamic_cast<TurboQuantKVCache*>(&cache)) return tq->append_half(k16, v16, n_tokens, HalfFormat::f16);
  if (auto* dense = dynamic_cast<DenseKVCache*>(&cache)) return dense->append_half(k16, v16, n_tokens, HalfFormat::f16);
  // Other classes take float32 only.
  std::vector<float> kf(count), vf(count);
  for (size_t i = 0; i < count; ++i) {
    kf[i] = half_to_float(k16[i]);
    vf[i] = half_to_float(v16[i]);
  }
  cache.append(kf, vf, n_tokens);
}

// The whole cache, dequantized, into k/v ([kv_heads][size][head_dim] float32 or fp16 bits).
void fetch_locked(const KVCache& cache, FloatKind kind, void* k, void* v) {
  const size_t count = cache.size() * static_cast<size_t>(cache.kv_heads()) * static_cast<size_t>(cache.head_dim());
  if (kind == FloatKind::f32) {
    cache.fetch({static_cast<float*>(k), count}, {static_cast<float*>(v), count});
    return;
  }
  std::vector<float> kf(count), vf(count);
  cache.fetch(kf, vf);
  for (size_t i = 0; i < count; ++i) {
    static_cast<uint16_t*>(k)[i] = float_to_half(kf[i]);
    static_cast<uint16_t*>(v)[i] = float_to_half(vf[i]);
  }
}

bool all_finite(const void* data, size_t count, FloatKind kind) {
  if (kind == FloatKind::f32) {
    const auto* x = static_cast<const float*>(data);
    for (size_t i = 0; i < count; ++i) {
      if (!std::isfinite(x[i])) return false;
    }
    return true;
  }
  const auto* h = static_cast<const uint16_t*>(data);
  for (size_t i = 0; i < count; ++i) {
    if (!half_is_finite(h[i])) return false;
  }
  return true;
}

// The batch's update_and_fetch: appends keys[b]/values[b] ([batch, kv_heads, tokens, head_dim])
// to layers[b] (if keys is not None), then returns the whole caches as [batch, kv_heads, size,
// head_dim] arrays of out_dtype, all under the layers' locks, so another Python thread cannot
// slip an append in between. The numpy outputs are made once the size is known and filled
// in place (one pass over the cache, no copy). A rejected append (shape, NaN/Inf, checked for
// the whole batch first) leaves every layer unchanged.
py::tuple update_and_fetch(const std::vector<Layer*>& layers, const py::object& keys_obj, const py::object& values_obj,
                           const py::dtype& out_dtype) {
  if (layers.empty()) throw Error("update_and_fetch: no layers");
  for (const Layer* l : layers) {
    if (l == nullptr) throw Error("update_and_fetch: a layer is None");
  }
  const bool appending = !keys_obj.is_none();
  py::array keys, values;
  FloatKind in_kind = FloatKind::f32;
  if (appending) {
    keys = c_contiguous(keys_obj.cast<py::array>());
    values = c_contiguous(values_obj.cast<py::array>());
    in_kind = check_kv(keys, values, 4, "[batch, kv_heads, tokens, head_dim]");
    if (static_cast<size_t>(keys.shape(0)) != layers.size()) {
      throw Error(fmt::format("this cache holds a batch of {}, got keys for {}", layers.size(), keys.shape(0)));
    }
  }
  const FloatKind out_kind = float_kind(py::array(out_dtype, std::vector<py::ssize_t>{0}), "the output dtype");
  const size_t batch = layers.size();
  py::array out_k, out_v;
  {
    py::gil_scoped_release unlocked;
    LayerLocks locks(layers, appending);
    if (appending) {
      const size_t per = static_cast<size_t>(keys.size()) / batch;
      const size_t esize = in_kind == FloatKind::f32 ? 4 : 2;
      if (batch > 1 && !(all_finite(keys.data(), per * batch, in_kind) && all_finite(values.data(), per * batch, in_kind))) {
        throw Error("keys and values must be finite (NaN or Inf found)");
      }
      for (size_t b = 0; b < batch; ++b) {
        append_locked(*layers[b]->cache, in_kind, static_cast<const char*>(keys.data()) + b * per * esize,
                      static_cast<const char*>(values.data()) + b * per * esize, keys.shape(1),
                      static_cast<size_t>(keys.shape(2)), keys.shape(3));
      }
    }
    const KVCache& first = *layers[0]->cache;
    for (const Layer* l : layers) {
      if (l->cache->size() != first.size() || l->cache->kv_heads() != first.kv_heads() ||
          l->cache->head_dim() != first.head_dim()) {
        throw Error("the batch's caches differ in shape or size");
      }
    }
    const std::vector<py::ssize_t> shape{static_cast<py::ssize_t>(batch), first.kv_heads(),
                                         static_cast<py::ssize_t>(first.size()), first.head_dim()};
    {
      // Safe while holding the layer locks: no thread takes a layer lock while holding the GIL.
      py::gil_scoped_acquire gil;
      out_k = py::array(out_dtype, shape);
      out_v = py::array(out_dtype, shape);
    }
    const size_t per = static_cast<size_t>(out_k.size()) / batch * (out_kind == FloatKind::f32 ? 4 : 2);
    for (size_t b = 0; b < batch; ++b) {
      fetch_locked(*layers[b]->cache, out_kind, static_cast<char*>(out_k.mutable_data()) + b * per,
                   static_cast<char*>(out_v.mutable_data()) + b * per);
    }
  }
  return py::make_tuple(out_k, out_v);
}

}  // namespace

void bind_cache_data(py::module_& m) {
  m.def("update_and_fetch", &update_and_fetch, py::arg("layers"), py::arg("keys"), py::arg("values"),
        py::arg("out_dtype"),
        "Appends keys[b]/values[b] ([batch, kv_heads, tokens, head_dim], float32/float16; None: append nothing) "
        "to layers[b], then returns every layer's whole cache as [batch, kv_heads, size, head_dim] arrays of "
        "out_dtype (float32/float16). Atomic with respect to other threads; GIL released.");
}

}  // namespace turbokv::python
