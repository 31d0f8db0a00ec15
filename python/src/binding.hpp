// Shared pieces of the Python extension `turbokv._core`: the per-layer cache object, array
// checks, and the error mapping (turbokv::Error -> ValueError; file problems -> OSError).
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "turbokv/error.hpp"
#include "turbokv/kv_cache.hpp"

namespace turbokv::python {

namespace py = pybind11;

// Raised for anything that goes wrong reading or writing a file; translated to OSError.
class FileError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Runs fn, turning the library's errors into FileError (for calls whose input is a file).
template <class Fn>
auto as_file_errors(Fn&& fn) {
  try {
    return fn();
  } catch (const turbokv::Error& e) {
    throw FileError(e.what());
  }
}

// One layer's C++ cache as Python holds it. The GIL is released during heavy calls, so two
// Python threads could otherwise enter the same cache at once; the lock enforces the library's
// contract (one writer, many readers) instead of leaving that to the caller.
struct Layer {
  std::unique_ptr<KVCache> cache;
  mutable std::shared_mutex mutex;

  explicit Layer(std::unique_ptr<KVCache> c) : cache(std::move(c)) {}
};

// Locks a set of layers (exclusive or shared) in address order, so two calls over overlapping
// sets can never wait on each other in a cycle. The same layer twice is an error.
class LayerLocks {
 public:
  LayerLocks(std::vector<Layer*> layers, bool exclusive) {
    std::sort(layers.begin(), layers.end());
    if (std::adjacent_find(layers.begin(), layers.end()) != layers.end()) throw Error("the same cache layer appears twice");
    for (Layer* l : layers) {
      if (exclusive) {
        unique_.emplace_back(l->mutex);
      } else {
        shared_.emplace_back(l->mutex);
      }
    }
  }

 private:
  std::vector<std::unique_lock<std::shared_mutex>> unique_;
  std::vector<std::shared_lock<std::shared_mutex>> shared_;
};

// Element types accepted for K/V and query arrays.
enum class FloatKind { f32, f16 };

// ValueError unless `a` is float32 or float16 ("what" names the argument in the message).
FloatKind float_kind(const py::array& a, const char* what);
// ValueError unless a.ndim() == ndim; `shape_text` describes the expected shape.
void require_ndim(const py::array& a, int ndim, const char* what, const char* shape_text);
// The array itself when C-contiguous, else a C-contiguous copy (same dtype).
py::array c_contiguous(const py::array& a);
// A safe size from a Python int that must be >= 0.
size_t non_negative(long long value, const char* what);

void bind_cache(py::module_& m);
void bind_cache_data(py::module_& m);
void bind_cache_io(py::module_& m);
void bind_attention(py::module_& m);
void bind_codec(py::module_& m);
void bind_model(py::module_& m);

}  // namespace turbokv::python
