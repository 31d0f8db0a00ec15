// TurboQuantMse / TurboQuantProd: the vector codecs on their own, so distortion can be measured
// on any vectors. encode: [n, dim] (or [dim]) float32 -> [n, code_size] uint8 records (the byte
// layout of include/turbokv/codec.hpp); decode: the inverse.
#include <fmt/format.h>

#include <vector>

#include "binding.hpp"
#include "turbokv/codec.hpp"

namespace turbokv::python {
namespace {

CodecOptions codec_options(int dim, double bits, const std::string& rotation, std::optional<unsigned long long> seed,
                           bool fp32_norm, bool norm_correction) {
  CodecOptions o;
  o.dim = dim;
  o.bits = bits;
  o.rotation = parse_rotation_kind(rotation);
  if (seed) o.seed = *seed;
  o.fp32_norm = fp32_norm;
  o.norm_correction = norm_correction;
  return o;
}

template <class Codec>
py::array_t<uint8_t> encode(const Codec& codec, const py::array& x_in) {
  const int dim = codec.options().dim;
  if (x_in.ndim() != 1 && x_in.ndim() != 2) throw Error(fmt::format("x must be [n, {}] or [{}], got {} dimensions", dim, dim, x_in.ndim()));
  if (float_kind(x_in, "x") != FloatKind::f32) throw Error("x must be float32");
  if (x_in.shape(x_in.ndim() - 1) != dim) {
    throw Error(fmt::format("x rows must have {} elements (the codec's dim), got {}", dim, x_in.shape(x_in.ndim() - 1)));
  }
  const py::array x = c_contiguous(x_in);
  const size_t n = x.ndim() == 1 ? 1 : static_cast<size_t>(x.shape(0));
  py::array_t<uint8_t> codes({static_cast<py::ssize_t>(n), static_cast<py::ssize_t>(codec.code_size())});
  const std::span<const float> in{static_cast<const float*>(x.data()), n * static_cast<size_t>(dim)};
  const std::span<uint8_t> out{codes.mutable_data(), n * codec.code_size()};
  {
    py::gil_scoped_release unlocked;
    codec.encode(in, out);
  }
  return codes;
}

template <class Codec>
py::array_t<float> decode(const Codec& codec, const py::buffer& codes_in) {
  // Any bytes-like object or uint8 array whose size is a whole number of records. The buffer
  // export (info) stays held while the GIL is released, so the bytes cannot move meanwhile.
  const py::buffer_info info = codes_in.request();
  if (info.itemsize != 1) throw Error("codes must be bytes-like or a uint8 array");
  py::ssize_t expected_stride = 1;
  for (py::ssize_t d = info.ndim - 1; d >= 0; --d) {
    if (info.shape[d] != 1 && info.strides[d] != expected_stride) throw Error("codes must be contiguous");
    expected_stride *= info.shape[d];
  }
  const size_t total = static_cast<size_t>(info.size);
  if (total == 0 || total % codec.code_size() != 0) {
    throw Error(fmt::format("codes hold {} bytes, not a positive multiple of the record size {}", total, codec.code_size()));
  }
  const size_t n = total / codec.code_size();
  const int dim = codec.options().dim;
  py::array_t<float> x({static_cast<py::ssize_t>(n), static_cast<py::ssize_t>(dim)});
  const std::span<const uint8_t> in{static_cast<const uint8_t*>(info.ptr), total};
  const std::span<float> out{x.mutable_data(), n * static_cast<size_t>(dim)};
  {
    py::gil_scoped_release unlocked;
    codec.decode(in, out);
  }
  return x;
}

template <class Codec>
void bind_one(py::module_& m, const char* name, const char* doc, double default_bits) {
  py::class_<Codec>(m, name, doc)
      .def(py::init([](int dim, double bits, const std::string& rotation, std::optional<unsigned long long> seed,
                       bool fp32_norm, bool norm_correction) {
             py::gil_scoped_release unlocked;  // building a codebook can take milliseconds
             return std::make_unique<Codec>(codec_options(dim, bits, rotation, seed, fp32_norm, norm_correction));
           }),
           py::arg("dim"), py::arg("bits") = default_bits, py::arg("rotation") = "hadamard", py::arg("seed") = py::none(),
           py::arg("fp32_norm") = false, py::arg("norm_correction") = false)
      .def_property_readonly("dim", [](const Codec& c) { return c.options().dim; })
      .def_property_readonly("bits", [](const Codec& c) { return c.options().bits; })
      .def_property_readonly("code_size", &Codec::code_size, "Bytes per encoded vector.")
      .def("encode", &encode<Codec>, py::arg("x"), "[n, dim] float32 -> [n, code_size] uint8 records.")
      .def("decode", &decode<Codec>, py::arg("codes"), "Records (bytes-like or uint8 array) -> [n, dim] float32.");
}

}  // namespace

void bind_codec(py::module_& m) {
  bind_one<TurboQuantMse>(m, "TurboQuantMse",
                          "TurboQuant_mse: norm, random rotation, Lloyd-Max codebook per coordinate (bits 1..8, "
                          "half widths allowed).", 4.0);
  bind_one<TurboQuantProd>(m, "TurboQuantProd",
                           "TurboQuant_prod: (bits-1)-bit TurboQuant_mse plus a 1-bit QJL sketch of the residual, "
                           "for unbiased inner products (bits 2..8).", 4.0);
}

}  // namespace turbokv::python
