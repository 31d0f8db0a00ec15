// The fuzz input format of fuzz_codec (shared with the seed generator):
//   byte 0: flags  bit0 prod codec, bit1 fp32 norms, bit2 norm_correction, bit3 Haar rotation
//   byte 1: bit width, index into kBits
//   byte 2: head dim, index into kDims
//   then:   records, code_size() bytes each (a trailing partial record is ignored)
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "turbokv/codec.hpp"

namespace turbokv::fuzz {

inline constexpr double kBits[] = {1, 2, 3, 4, 5, 6, 7, 8, 1.5, 2.5, 3.5, 4.5, 5.5, 6.5, 7.5, 0, 9, -1};
inline constexpr int kDims[] = {64, 128, 32, 16, 8, 2, 256, 4, 96, 48, 3, 5, 1, 100, 0, 512};

struct CodecInput {
  bool prod = false;
  CodecOptions options;
  const uint8_t* records = nullptr;
  size_t records_bytes = 0;

  static CodecInput parse(const uint8_t* data, size_t size) {
    CodecInput in;
    const uint8_t flags = size > 0 ? data[0] : 0;
    const uint8_t bits = size > 1 ? data[1] : 0;
    const uint8_t dim = size > 2 ? data[2] : 0;
    in.prod = flags & 1;
    in.options.fp32_norm = flags & 2;
    in.options.norm_correction = flags & 4;
    in.options.rotation = (flags & 8) ? RotationKind::haar : RotationKind::hadamard;
    in.options.bits = kBits[bits % (sizeof(kBits) / sizeof(kBits[0]))];
    in.options.dim = kDims[dim % (sizeof(kDims) / sizeof(kDims[0]))];
    if (size > 3) {
      in.records = data + 3;
      in.records_bytes = size - 3;
    }
    return in;
  }

  // Calls f(codec) with the TurboQuantMse or TurboQuantProd these options name; the
  // constructor's turbokv::Error (unsupported width or shape) propagates.
  template <typename F>
  void with_codec(F&& f) const {
    if (prod) {
      const TurboQuantProd codec(options);
      f(codec);
    } else {
      const TurboQuantMse codec(options);
      f(codec);
    }
  }
};

}  // namespace turbokv::fuzz
