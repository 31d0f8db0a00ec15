// The project's own deterministic random numbers. Rotations, QJL matrices and synthetic data are
// derived from a seed through these functions only, so a seed means the same numbers with every
// compiler and standard library (std::normal_distribution differs between libraries).
#pragma once

#include <cmath>
#include <cstdint>

namespace turbokv {

// SplitMix64 (Steele, Lea, Flood 2014): tiny, fast, passes BigCrush; good for seeding and for
// the matrices we draw once.
class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}

  uint64_t next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }

  // Uniform in [0, 1) with 53 random bits.
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

  // Uniform in (0, 1]: safe for log().
  double uniform_open0() { return static_cast<double>((next() >> 11) + 1) * 0x1.0p-53; }

  // Standard normal by Box-Muller; the second value of each pair is kept for the next call.
  double normal() {
    if (has_spare_) {
      has_spare_ = false;
      return spare_;
    }
    const double radius = std::sqrt(-2.0 * std::log(uniform_open0()));
    const double angle = 6.283185307179586476925286766559 * uniform();
    spare_ = radius * std::sin(angle);
    has_spare_ = true;
    return radius * std::cos(angle);
  }

  // A random sign, +1 or -1.
  float sign() { return (next() >> 63) ? -1.0f : 1.0f; }

 private:
  uint64_t state_;
  double spare_ = 0.0;
  bool has_spare_ = false;
};

// Derives independent stream seeds from one seed and a purpose tag (e.g. "keys", layer index).
inline uint64_t derive_seed(uint64_t seed, uint64_t tag) {
  SplitMix64 mix(seed ^ (tag * 0xd1b54a32d192ed03ULL));
  return mix.next();
}

}  // namespace turbokv
