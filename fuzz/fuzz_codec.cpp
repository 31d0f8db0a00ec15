// Fuzzes TurboQuant decoding of arbitrary bytes (input format: codec_input.hpp). Every byte
// pattern is a decodable record: indices cover the whole codebook, so decode must never crash or
// read outside the records. Policy (docs/reliability.md): decode does not validate norms; a
// record whose stored scale (and, for prod, residual norm) is finite decodes to finite floats;
// a NaN/Inf or huge fp32 scale may decode to NaN/Inf (only files can carry one, and the cache
// loaders are fuzzed separately).
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "codec_input.hpp"
#include "turbokv/error.hpp"

namespace {

using turbokv::fuzz::CodecInput;

// Codec construction (rotation, codebook, QJL matrix) dominates a run; build each option set once.
template <typename Codec>
const Codec* cached(const CodecInput& in, uint32_t key) {
  static std::map<uint32_t, std::unique_ptr<Codec>> codecs;
  auto it = codecs.find(key);
  if (it == codecs.end()) {
    std::unique_ptr<Codec> codec;
    try {
      codec = std::make_unique<Codec>(in.options);
    } catch (const turbokv::Error&) {
    }
    it = codecs.emplace(key, std::move(codec)).first;
  }
  return it->second.get();
}

// Finite scale and residual norm, small enough that no finite sum can overflow.
bool tame(const turbokv::CodeLayout& layout, const uint8_t* record) {
  auto ok = [&](size_t offset) {
    if (offset == turbokv::CodeLayout::npos) return true;
    const float v = turbokv::load_norm(record + offset, layout.fp32_norm);
    return std::isfinite(v) && std::fabs(v) < 1e30f;
  };
  return ok(layout.norm_offset) && ok(layout.residual_norm_offset);
}

template <typename Codec>
void run(const Codec& codec, const CodecInput& in) {
  const size_t code_size = codec.code_size();
  const size_t dim = static_cast<size_t>(in.options.dim);
  const size_t n = in.records_bytes / code_size;
  if (n == 0) return;
  // Exact-size copies, so ASan sees any read past the last record or write past the output.
  const std::vector<uint8_t> records(in.records, in.records + n * code_size);
  std::vector<float> x(n * dim), y(n * dim);
  codec.decode(records.data(), n, x.data());
  codec.decode_rotated(records.data(), n, y.data());
  for (size_t i = 0; i < n; ++i) {
    if (!tame(codec.layout(), records.data() + i * code_size)) continue;
    for (size_t j = 0; j < dim; ++j) {
      if (!std::isfinite(x[i * dim + j]) || !std::isfinite(y[i * dim + j])) __builtin_trap();
    }
  }
  if constexpr (std::is_same_v<Codec, turbokv::TurboQuantProd>) {
    const std::vector<float> q(dim, 0.5f);
    for (size_t i = 0; i < n; ++i) {
      const float ip = codec.inner_product(q.data(), records.data() + i * code_size);
      if (tame(codec.layout(), records.data() + i * code_size) && !std::isfinite(ip)) __builtin_trap();
    }
  } else {
    // Records at a stride larger than code_size (how prod embeds mse records).
    std::vector<uint8_t> strided(n * (code_size + 3), 0xA5);
    for (size_t i = 0; i < n; ++i) {
      std::copy(records.begin() + i * code_size, records.begin() + (i + 1) * code_size,
                strided.begin() + i * (code_size + 3));
    }
    std::vector<float> z(n * dim);
    codec.decode_rotated_strided(strided.data(), n, code_size + 3, z.data());
    for (size_t k = 0; k < z.size(); ++k) {
      if (!(z[k] == y[k]) && !(std::isnan(z[k]) && std::isnan(y[k]))) __builtin_trap();
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 3) return 0;
  const CodecInput in = CodecInput::parse(data, size);
  const uint32_t key = (data[0] & 0x0FU) | (uint32_t{data[1]} % 18) << 4 | (uint32_t{data[2]} % 16) << 12;
  if (in.prod) {
    if (const auto* codec = cached<turbokv::TurboQuantProd>(in, key)) run(*codec, in);
  } else {
    if (const auto* codec = cached<turbokv::TurboQuantMse>(in, key)) run(*codec, in);
  }
  return 0;
}
