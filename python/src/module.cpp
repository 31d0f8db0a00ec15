// turbokv._core: the compiled half of the Python package (python/turbokv/ is the other).
#include <fmt/format.h>

#include "binding.hpp"
#include "turbokv/version.hpp"

namespace turbokv::python {

FloatKind float_kind(const py::array& a, const char* what) {
  const auto dtype = a.dtype();
  if (dtype.kind() == 'f' && dtype.itemsize() == 4) return FloatKind::f32;
  if (dtype.kind() == 'f' && dtype.itemsize() == 2) return FloatKind::f16;
  throw turbokv::Error(fmt::format("{} must be float32 or float16, got {}", what,
                                   dtype.attr("name").cast<std::string>()));
}

void require_ndim(const py::array& a, int ndim, const char* what, const char* shape_text) {
  if (a.ndim() != ndim) {
    throw turbokv::Error(fmt::format("{} must be {}-D {}, got {} dimensions", what, ndim, shape_text, a.ndim()));
  }
}

py::array c_contiguous(const py::array& a) {
  if (a.flags() & py::array::c_style) return a;
  return py::array::ensure(a, py::array::c_style);
}

size_t non_negative(long long value, const char* what) {
  if (value < 0) throw turbokv::Error(fmt::format("{} must be >= 0, got {}", what, value));
  return static_cast<size_t>(value);
}

}  // namespace turbokv::python

namespace py = pybind11;

PYBIND11_MODULE(_core, m) {
  namespace tp = turbokv::python;
  m.doc() = "turbokv's compiled core: caches, fused attention, codecs, the model engine.";
  m.attr("__version__") = turbokv::version();
  // Every rejected input of the library is a turbokv::Error: a ValueError in Python; file
  // problems (missing, truncated, corrupt, checksum mismatch) are OSError.
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const tp::FileError& e) {
      PyErr_SetString(PyExc_OSError, e.what());
    } catch (const turbokv::Error& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    }
  });
  tp::bind_cache(m);
  tp::bind_cache_data(m);
  tp::bind_cache_io(m);
  tp::bind_attention(m);
  tp::bind_codec(m);
  tp::bind_model(m);
}
