// turbokv._core.attend: attention of a query block over one Layer through the library's fast
// path for its class (the fused packed-code kernel for TurboQuant: nothing is dequantized).
#include <fmt/format.h>

#include <cmath>
#include <mutex>
#include <string>
#include <vector>

#include "binding.hpp"
#include "turbokv/attention.hpp"
#include "turbokv/half.hpp"

namespace turbokv::python {
namespace {

// queries: [n_q_heads, n_queries, head_dim] float32/float16 -> float32 of the same shape.
py::array_t<float> attend_layer(const py::array& queries_in, const Layer& layer, std::optional<double> scale,
                                bool causal, double softcap, int threads, const std::string& arithmetic) {
  require_ndim(queries_in, 3, "queries", "[n_q_heads, n_queries, head_dim]");
  const FloatKind kind = float_kind(queries_in, "queries");
  if (scale && !(*scale > 0 && std::isfinite(*scale))) throw Error(fmt::format("scale must be a positive number, got {}", *scale));
  if (!(softcap >= 0 && std::isfinite(softcap))) throw Error(fmt::format("softcap must be >= 0, got {}", softcap));
  if (threads < 0) throw Error(fmt::format("threads must be >= 0, got {}", threads));
  if (arithmetic != "exact" && arithmetic != "int8" && arithmetic != "default") {
    throw Error(fmt::format("arithmetic must be 'exact', 'int8' or 'default', got '{}'", arithmetic));
  }
  const py::array queries = c_contiguous(queries_in);
  const auto n_q_heads = queries.shape(0), n_queries = queries.shape(1), head_dim = queries.shape(2);
  if (n_q_heads > 1 << 20 || n_queries > 1 << 30) throw Error("queries: too many heads or positions");
  const size_t count = static_cast<size_t>(queries.size());
  py::array_t<float> out({n_q_heads, n_queries, head_dim});
  float* out_data = out.mutable_data();
  const void* q_data = queries.data();
  {
    py::gil_scoped_release unlocked;
    std::vector<float> q32;
    const float* q = static_cast<const float*>(q_data);
    if (kind == FloatKind::f16) {
      q32.resize(count);
      for (size_t i = 0; i < count; ++i) q32[i] = half_to_float(static_cast<const uint16_t*>(q_data)[i]);
      q = q32.data();
    }
    AttentionOptions options;
    options.scale = scale ? static_cast<float>(*scale) : 0.0f;
    options.softcap = static_cast<float>(softcap);
    options.causal = causal;
    options.threads = threads;
    options.arithmetic = arithmetic == "int8"    ? AttentionArithmetic::int8
                         : arithmetic == "exact" ? AttentionArithmetic::exact
                                                 : AttentionArithmetic::cache_default;
    std::shared_lock lock(layer.mutex);
    if (head_dim != layer.cache->head_dim()) {
      throw Error(fmt::format("queries have head_dim {}, the cache {}", head_dim, layer.cache->head_dim()));
    }
    attend({q, count}, static_cast<int>(n_q_heads), static_cast<int>(n_queries), *layer.cache, {out_data, count},
           options);
  }
  return out;
}

}  // namespace

void bind_attention(py::module_& m) {
  m.def("attend", &attend_layer, py::arg("queries"), py::arg("layer"), py::arg("scale") = py::none(),
        py::arg("causal") = true, py::arg("softcap") = 0.0, py::arg("threads") = 0, py::arg("arithmetic") = "default",
        "Attention of [n_q_heads, n_queries, head_dim] queries (the cache's newest positions) over the layer, "
        "with the fused kernel of its class; GQA when n_q_heads is a multiple of kv_heads. arithmetic: 'exact', "
        "'int8' (TurboQuant codes in integer arithmetic) or 'default' (the cache's choice). GIL released.");
}

}  // namespace turbokv::python
