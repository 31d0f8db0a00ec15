// Lloyd-Max solver for the coordinate density of a uniform unit vector (see codebook.hpp).
//
// All integrals run over the angle t = asin(x): f(x) dx = cos(t)^(d-2) dt / Z with
// Z = sqrt(pi) Gamma((d-1)/2) / Gamma(d/2). The weight is bounded and smooth for d >= 2, and
// cos(t)^(d-2) <= exp(-(d-2) t^2 / 2), so beyond |t| = 14 / sqrt(d-2) it is below 1e-42 and the
// domain is clipped there. Each cell is split into Gauss-Legendre panels no wider than a quarter
// of that Gaussian scale, so even the long outer cells of large-d codebooks integrate exactly to
// double precision.
#include "turbokv/codebook.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <map>
#include <memory>
#include <mutex>
#include <numbers>
#include <utility>

#include "core/check.hpp"
#include "core/hash.hpp"

namespace turbokv {
namespace {

constexpr int kGaussPoints = 16;

struct GaussLegendre {
  std::array<double, kGaussPoints> nodes{};    // on [-1, 1]
  std::array<double, kGaussPoints> weights{};
};

// Nodes and weights by Newton's method on the Legendre polynomial P_n.
GaussLegendre make_gauss_legendre() {
  GaussLegendre rule;
  const int n = kGaussPoints;
  for (int i = 0; i < n; ++i) {
    double x = std::cos(std::numbers::pi * (i + 0.75) / (n + 0.5));
    double derivative = 0.0;
    for (int iter = 0; iter < 100; ++iter) {
      double p0 = 1.0;
      double p1 = x;
      for (int k = 2; k <= n; ++k) {
        const double p2 = ((2.0 * k - 1.0) * x * p1 - (k - 1.0) * p0) / k;
        p0 = p1;
        p1 = p2;
      }
      derivative = n * (x * p1 - p0) / (x * x - 1.0);
      const double step = p1 / derivative;
      x -= step;
      if (std::abs(step) < 1e-16) break;
    }
    rule.nodes[i] = x;
    rule.weights[i] = 2.0 / ((1.0 - x * x) * derivative * derivative);
  }
  return rule;
}

const GaussLegendre& gauss_legendre() {
  static const GaussLegendre rule = make_gauss_legendre();
  return rule;
}

// Integrals of the coordinate density over cells in the angle variable.
class AngleDensity {
 public:
  explicit AngleDensity(int dim)
      : exponent_(dim - 2.0),
        log_norm_(0.5 * std::log(std::numbers::pi) + std::lgamma((dim - 1) / 2.0) -
                  std::lgamma(dim / 2.0)),
        scale_(1.0 / std::sqrt(std::max(exponent_, 1.0))),
        limit_(std::min(std::numbers::pi / 2.0, 14.0 * scale_)) {}

  double limit() const { return limit_; }

  // The density in x itself, f(x) = (1 - x^2)^((d-3)/2) / Z, for |x| < 1.
  double pdf(double x) const {
    return std::exp(0.5 * (exponent_ - 1.0) * std::log1p(-x * x) - log_norm_);
  }

  // Probability mass, first moment and, given c, the squared error about c over the cell
  // of angles [lo, hi] (clipped to the significant domain).
  struct Moments {
    double mass = 0.0;
    double first = 0.0;
    double squared_error = 0.0;
  };
  Moments cell(double lo, double hi, double c) const {
    Moments m;
    lo = std::max(lo, -limit_);
    hi = std::min(hi, limit_);
    if (!(hi > lo)) return m;
    const int panels = std::max(2, static_cast<int>(std::ceil((hi - lo) / (0.25 * scale_))));
    const double width = (hi - lo) / panels;
    const GaussLegendre& rule = gauss_legendre();
    for (int p = 0; p < panels; ++p) {
      const double mid = lo + (p + 0.5) * width;
      for (int k = 0; k < kGaussPoints; ++k) {
        const double t = mid + 0.5 * width * rule.nodes[k];
        const double w = 0.5 * width * rule.weights[k] *
                         std::exp(exponent_ * std::log(std::cos(t)) - log_norm_);
        const double x = std::sin(t);
        m.mass += w;
        m.first += w * x;
        m.squared_error += w * (x - c) * (x - c);
      }
    }
    return m;
  }

 private:
  double exponent_;
  double log_norm_;
  double scale_;
  double limit_;
};

// Asymptotically optimal start (Panter-Dite companding): centroid density proportional to
// f^(1/3), i.e. cos(t)^(d/3) in the angle variable. Lloyd then only polishes.
std::vector<double> initial_centroids(int dim, int levels) {
  const double scale = 1.0 / std::sqrt(dim / 3.0);
  const double limit = std::min(std::numbers::pi / 2.0, 14.0 * scale);
  constexpr int kGrid = 8192;
  std::vector<double> cdf(kGrid + 1, 0.0);
  const double step = 2.0 * limit / kGrid;
  auto density = [&](double t) { return std::pow(std::max(std::cos(t), 0.0), dim / 3.0); };
  for (int i = 0; i < kGrid; ++i) {
    const double t = -limit + i * step;
    cdf[i + 1] = cdf[i] + 0.5 * step * (density(t) + density(t + step));
  }
  std::vector<double> centroids(levels);
  int cursor = 0;
  for (int i = 0; i < levels; ++i) {
    const double target = (i + 0.5) / levels * cdf[kGrid];
    while (cursor < kGrid - 1 && cdf[cursor + 1] < target) ++cursor;
    const double span = cdf[cursor + 1] - cdf[cursor];
    const double frac = span > 0 ? (target - cdf[cursor]) / span : 0.5;
    centroids[i] = std::sin(-limit + (cursor + frac) * step);
  }
  return centroids;
}

void symmetrize(std::vector<double>& c) {
  const size_t n = c.size();
  for (size_t i = 0; i < n / 2; ++i) {
    const double v = 0.5 * (c[n - 1 - i] - c[i]);
    c[i] = -v;
    c[n - 1 - i] = v;
  }
}

// Angle of each cell edge: -limit, asin(midpoints)..., +limit.
std::vector<double> cell_edges(const std::vector<double>& c, double limit) {
  std::vector<double> edges(c.size() + 1);
  edges.front() = -limit;
  edges.back() = limit;
  for (size_t i = 1; i < c.size(); ++i) edges[i] = std::asin(0.5 * (c[i - 1] + c[i]));
  return edges;
}

}  // namespace

LloydMaxCodebook::LloydMaxCodebook(int dim, int bits) : dim_(dim), bits_(bits) {
  TURBOKV_CHECK(dim >= kMinDim && dim <= kMaxDim, "LloydMaxCodebook: dim must be in [{}, {}], got {}",
                kMinDim, kMaxDim, dim);
  TURBOKV_CHECK(bits >= kMinBits && bits <= kMaxBits,
                "LloydMaxCodebook: bits must be in [{}, {}], got {}", kMinBits, kMaxBits, bits);
  const int n = levels();
  const AngleDensity density(dim);
  std::vector<double> c = initial_centroids(dim, n);
  symmetrize(c);
  // Lloyd's fixed point c_i = E[x | cell i] solved by Newton's method: cell i depends only on
  // its two boundaries, so the Jacobian is tridiagonal and each step costs one pass. Plain Lloyd
  // steps converge linearly at a rate that approaches 1 with many levels (minutes at 8 bits);
  // Newton from the companding start needs a handful of steps. A step that would break the
  // ordering is halved; if that fails, a plain Lloyd step is taken instead.
  std::vector<double> mean(n), lower(n), diag(n), upper(n), rhs(n);
  for (int iter = 0; iter < 200; ++iter) {
    const std::vector<double> edges = cell_edges(c, density.limit());
    double residual = 0.0;
    for (int i = 0; i < n; ++i) {
      const auto m = density.cell(edges[i], edges[i + 1], 0.0);
      mean[i] = m.mass > 1e-280 ? m.first / m.mass : c[i];
      residual = std::max(residual, std::abs(c[i] - mean[i]));
      // d mean_i / d boundary = f(b) (b - mean_i) / mass_i at either edge of the cell.
      const double right = (i + 1 < n && m.mass > 1e-280)
                               ? density.pdf(std::sin(edges[i + 1])) *
                                     (std::sin(edges[i + 1]) - mean[i]) / m.mass
                               : 0.0;
      const double left = (i > 0 && m.mass > 1e-280) ? density.pdf(std::sin(edges[i])) *
                                                           (mean[i] - std::sin(edges[i])) / m.mass
                                                     : 0.0;
      lower[i] = -0.5 * left;
      diag[i] = 1.0 - 0.5 * (left + right);
      upper[i] = -0.5 * right;
      rhs[i] = mean[i] - c[i];
    }
    if (residual < 1e-15) break;
    // Thomas algorithm for the tridiagonal system J delta = mean - c.
    bool solved = true;
    for (int i = 1; i < n && solved; ++i) {
      if (std::abs(diag[i - 1]) < 1e-300) solved = false;
      const double factor = lower[i] / diag[i - 1];
      diag[i] -= factor * upper[i - 1];
      rhs[i] -= factor * rhs[i - 1];
    }
    if (solved && std::abs(diag[n - 1]) > 1e-300) {
      rhs[n - 1] /= diag[n - 1];
      for (int i = n - 2; i >= 0; --i) rhs[i] = (rhs[i] - upper[i] * rhs[i + 1]) / diag[i];
    } else {
      solved = false;
    }
    bool stepped = false;
    for (double damping = 1.0; solved && damping > 1e-3 && !stepped; damping *= 0.5) {
      std::vector<double> trial(n);
      bool ordered = true;
      for (int i = 0; i < n; ++i) {
        trial[i] = c[i] + damping * rhs[i];
        if (!(std::abs(trial[i]) < 1.0) || (i > 0 && !(trial[i] > trial[i - 1]))) ordered = false;
      }
      if (ordered) {
        c = std::move(trial);
        stepped = true;
      }
    }
    if (!stepped) c = mean;
    symmetrize(c);
  }
  const std::vector<double> edges = cell_edges(c, density.limit());
  double mse = 0.0;
  for (int i = 0; i < n; ++i) mse += density.cell(edges[i], edges[i + 1], c[i]).squared_error;
  unit_vector_mse_ = dim * mse;
  centroids_.assign(c.begin(), c.end());
  boundaries_.resize(n - 1);
  for (int i = 0; i + 1 < n; ++i) boundaries_[i] = static_cast<float>(0.5 * (c[i] + c[i + 1]));
}

const LloydMaxCodebook& LloydMaxCodebook::get(int dim, int bits) {
  TURBOKV_CHECK(dim >= kMinDim && dim <= kMaxDim, "LloydMaxCodebook: dim must be in [{}, {}], got {}",
                kMinDim, kMaxDim, dim);
  TURBOKV_CHECK(bits >= kMinBits && bits <= kMaxBits,
                "LloydMaxCodebook: bits must be in [{}, {}], got {}", kMinBits, kMaxBits, bits);
  static std::mutex mutex;
  static std::map<std::pair<int, int>, std::unique_ptr<const LloydMaxCodebook>> cache;
  std::lock_guard lock(mutex);
  auto& slot = cache[{dim, bits}];
  if (!slot) slot = std::make_unique<const LloydMaxCodebook>(dim, bits);
  return *slot;
}

uint8_t LloydMaxCodebook::quantize(float x) const {
  const auto it = std::lower_bound(boundaries_.begin(), boundaries_.end(), x);
  return static_cast<uint8_t>(it - boundaries_.begin());
}

uint64_t LloydMaxCodebook::checksum() const {
  detail::Hasher hasher;
  hasher.add(dim_);
  hasher.add(bits_);
  hasher.add_bytes(centroids_.data(), centroids_.size() * sizeof(float));
  hasher.add_bytes(boundaries_.data(), boundaries_.size() * sizeof(float));
  return hasher.finish();
}

}  // namespace turbokv
