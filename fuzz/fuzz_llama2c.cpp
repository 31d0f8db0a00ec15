// Fuzzes the llama2.c checkpoint loader (load_llama2c): every header field and the
// file size must be checked before any weight is touched. On a successful load the weight views
// are read end to end (a view past the mapping would be caught by ASan).
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "engine/model/model.hpp"
#include "fuzz_util.hpp"
#include "turbokv/error.hpp"

namespace {

float touch(const turbokv::engine::WeightMatrix& w) {
  std::vector<float> row(static_cast<size_t>(w.cols));
  float sum = 0;
  // First and last rows: enough to prove the view lies inside the file.
  for (int64_t r : {int64_t{0}, w.rows - 1}) {
    turbokv::engine::dequantize_row(w, r, row.data());
    for (float v : row) sum += v;
  }
  return sum;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static turbokv::fuzz::InputFile file("llama2c");
  const std::string& path = file.write(data, size);
  try {
    const turbokv::engine::Model model = turbokv::engine::load_llama2c(path);
    model.validate();
    (void)model.weight_bytes();
    (void)model.weight_type_summary();
    volatile float sink = touch(model.token_embedding) + touch(model.output);
    for (const auto& layer : model.layers) {
      sink = sink + touch(layer.wq) + touch(layer.wk) + touch(layer.wv) + touch(layer.wo) +
             touch(layer.w_gate) + touch(layer.w_down) + touch(layer.w_up);
    }
    (void)sink;
  } catch (const turbokv::Error&) {
  }
  return 0;
}
