// Fuzzes the GGUF reader (GgufFile::open validates every field) and the GGUF model loader
// (load_gguf: architecture metadata, tensor shapes against the config). On a successful open
// every metadata value is read through the typed getters and every tensor's first and last rows
// are decoded (a view outside the mapping would be caught by ASan).
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "engine/model/gguf.hpp"
#include "engine/model/model.hpp"
#include "engine/tensor/tensor_types.hpp"
#include "fuzz_util.hpp"
#include "turbokv/error.hpp"

namespace {

using turbokv::engine::GgufFile;
using turbokv::engine::GgufValueType;

void read_values(const GgufFile& f) {
  for (const std::string& key : f.keys()) {
    try {
      switch (f.value_type(key)) {
        case GgufValueType::STRING: (void)f.get_string(key); break;
        case GgufValueType::FLOAT32:
        case GgufValueType::FLOAT64: (void)f.get_float(key); break;
        case GgufValueType::BOOL: (void)f.get_bool(key); break;
        case GgufValueType::ARRAY:
          if (f.array_size(key) > 4096) break;  // keep each input fast
          switch (f.array_type(key)) {
            case GgufValueType::STRING: (void)f.get_string_array(key); break;
            case GgufValueType::FLOAT32:
            case GgufValueType::FLOAT64: (void)f.get_float_array(key); break;
            default: (void)f.get_int_array(key); break;
          }
          break;
        default: (void)f.get_int(key); break;
      }
    } catch (const turbokv::Error&) {
    }
  }
}

void read_tensors(const GgufFile& f) {
  for (const auto& t : f.tensors()) {
    if (f.find_tensor(t.name) != &t) __builtin_trap();
    try {
      const turbokv::engine::WeightMatrix w = f.matrix(t.name);
      if (w.rows <= 0 || w.cols <= 0 || w.cols > (int64_t{1} << 20)) continue;
      std::vector<float> row(static_cast<size_t>(w.cols));
      turbokv::engine::dequantize_row(w, 0, row.data());
      turbokv::engine::dequantize_row(w, w.rows - 1, row.data());
    } catch (const turbokv::Error&) {
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static turbokv::fuzz::InputFile file("gguf");
  const std::string& path = file.write(data, size);
  try {
    const GgufFile f = GgufFile::open(path);
    read_values(f);
    read_tensors(f);
  } catch (const turbokv::Error&) {
    return 0;
  }
  try {
    const turbokv::engine::Model model = turbokv::engine::load_gguf(path);
    model.validate();
  } catch (const turbokv::Error&) {
  }
  return 0;
}
