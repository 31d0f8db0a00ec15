// `turbokv codec-bench`: distortion, inner-product bias/variance, size and single-thread
// throughput of the TurboQuant codecs (mse, mse with norm correction, prod) at each requested
// width, on random unit vectors drawn from the project PRNG.
//
// For each x, y = normalize(x + z) with z a fresh Gaussian of the same scale (N(0, I/d)), so
// <y, x> ~ 0.7: a quantizer that shrinks inner products shows a negative ip_bias (with y
// independent of x every quantizer would look unbiased). encode_vps/decode_vps: vectors per
// second of thread CPU time, one thread, whole batch per call (decode includes the inverse
// rotation).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kernels/codec_kernels.hpp"
#include "tools/command_registry.hpp"
#include "turbokv/codec.hpp"
#include "turbokv/error.hpp"
#include "turbokv/prng.hpp"
#include "turbokv/timing.hpp"

namespace turbokv::tools {
namespace {

struct CodecBenchOptions {
  int dim = 128;
  std::vector<double> bits = {1, 2, 3, 4};
  size_t vectors = 20000;
  std::string rotation = "hadamard";
  uint64_t seed = 1;
  bool json = false;
  bool scalar = false;
};

struct Row {
  std::string variant;
  double bits = 0;
  double mse = 0, exact_mse = -1, ip_bias = 0, ip_var = 0;
  size_t bytes_per_vector = 0;
  double compression_vs_fp16 = 0, encode_vps = 0, decode_vps = 0;
};

// Timed by thread CPU time (turbokv/timing.hpp), not wall time: throughput on one thread stays
// meaningful on a shared, oversubscribed machine (wall time there measures the other tenants).

// Runs fn() until it has used at least 0.1 s of CPU (at least once); returns calls per second.
template <typename Fn>
double calls_per_second(Fn&& fn) {
  int calls = 0;
  const double start = thread_cpu_seconds();
  double elapsed = 0;
  do {
    fn();
    ++calls;
    elapsed = thread_cpu_seconds() - start;
  } while (elapsed < 0.1);
  return calls / elapsed;
}

std::vector<float> unit_vectors(size_t n, int dim, uint64_t seed) {
  SplitMix64 rng(seed);
  std::vector<float> x(n * dim);
  for (size_t v = 0; v < n; ++v) {
    double sum = 0;
    for (int i = 0; i < dim; ++i) {
      const double g = rng.normal();
      x[v * dim + i] = static_cast<float>(g);
      sum += g * g;
    }
    const double inv = 1.0 / std::sqrt(sum);
    for (int i = 0; i < dim; ++i) x[v * dim + i] = static_cast<float>(x[v * dim + i] * inv);
  }
  return x;
}

// y = normalize(x + z), z ~ N(0, I/dim).
std::vector<float> correlated_queries(const std::vector<float>& x, int dim, uint64_t seed) {
  SplitMix64 rng(seed);
  const size_t n = x.size() / dim;
  std::vector<float> y(x.size());
  const double z_scale = 1.0 / std::sqrt(static_cast<double>(dim));
  for (size_t v = 0; v < n; ++v) {
    double sum = 0;
    for (int i = 0; i < dim; ++i) {
      const double value = x[v * dim + i] + z_scale * rng.normal();
      y[v * dim + i] = static_cast<float>(value);
      sum += value * value;
    }
    const double inv = 1.0 / std::sqrt(sum);
    for (int i = 0; i < dim; ++i) y[v * dim + i] = static_cast<float>(y[v * dim + i] * inv);
  }
  return y;
}

template <typename Codec>
Row measure(const std::string& variant, double bits, const Codec& codec, const std::vector<float>& x,
            const std::vector<float>& y, int dim) {
  const size_t n = x.size() / dim;
  Row row;
  row.variant = variant;
  row.bits = bits;
  row.bytes_per_vector = codec.code_size();
  row.compression_vs_fp16 = 2.0 * dim / codec.code_size();
  std::vector<uint8_t> codes(n * codec.code_size());
  std::vector<float> back(x.size());
  row.encode_vps = n * calls_per_second([&] { codec.encode(x.data(), n, codes.data()); });
  row.decode_vps = n * calls_per_second([&] { codec.decode(codes.data(), n, back.data()); });
  double err = 0, ip_sum = 0, ip_sq = 0;
  for (size_t v = 0; v < n; ++v) {
    double e = 0, exact = 0, approx = 0;
    for (int i = 0; i < dim; ++i) {
      const double xi = x[v * dim + i], bi = back[v * dim + i], yi = y[v * dim + i];
      e += (xi - bi) * (xi - bi);
      exact += yi * xi;
      approx += yi * bi;
    }
    err += e;
    ip_sum += approx - exact;
    ip_sq += (approx - exact) * (approx - exact);
  }
  row.mse = err / n;
  row.ip_bias = ip_sum / n;
  row.ip_var = n > 1 ? (ip_sq - ip_sum * ip_sum / n) / (n - 1) : 0.0;
  return row;
}

int run_codec_bench(const CodecBenchOptions& opt) {
  if (opt.vectors < 1) throw Error("codec-bench: --vectors must be at least 1");
  if (opt.bits.empty()) throw Error("codec-bench: --bits needs at least one width");
  const RotationKind rotation = parse_rotation_kind(opt.rotation);
  set_force_scalar_kernels(opt.scalar);
  const std::string kernels = opt.scalar ? "scalar" : kernels::codec_kernel_target_name();
  // Validate every width before the (possibly long) measurements.
  for (double b : opt.bits) {
    CodecOptions o;
    o.dim = opt.dim;
    o.bits = b;
    o.rotation = rotation;
    TurboQuantMse check(o);
  }
  const auto x = unit_vectors(opt.vectors, opt.dim, derive_seed(opt.seed, 1));
  const auto y = correlated_queries(x, opt.dim, derive_seed(opt.seed, 2));
  std::vector<Row> rows;
  for (double b : opt.bits) {
    CodecOptions o;
    o.dim = opt.dim;
    o.bits = b;
    o.rotation = rotation;
    o.seed = derive_seed(opt.seed, 3);
    const TurboQuantMse mse(o);
    Row row = measure("mse", b, mse, x, y, opt.dim);
    const auto& L = mse.layout();
    row.exact_mse = (L.dims_hi * mse.codebook(0).unit_vector_mse() +
                     L.dims_lo * mse.codebook(1).unit_vector_mse()) / opt.dim;
    rows.push_back(row);
    o.norm_correction = true;
    rows.push_back(measure("mse_nc", b, TurboQuantMse(o), x, y, opt.dim));
    o.norm_correction = false;
    if (b >= 2) rows.push_back(measure("prod", b, TurboQuantProd(o), x, y, opt.dim));
  }
  set_force_scalar_kernels(false);

  if (opt.json) {
    nlohmann::json out;
    out["dim"] = opt.dim;
    out["rotation"] = opt.rotation;
    out["vectors"] = opt.vectors;
    out["seed"] = opt.seed;
    out["kernels"] = kernels;
    out["rows"] = nlohmann::json::array();
    for (const Row& r : rows) {
      nlohmann::json j = {{"variant", r.variant},
                          {"bits", r.bits},
                          {"mse", r.mse},
                          {"ip_var", r.ip_var},
                          {"ip_bias", r.ip_bias},
                          {"bytes_per_vector", r.bytes_per_vector},
                          {"compression_vs_fp16", r.compression_vs_fp16},
                          {"encode_vps", r.encode_vps},
                          {"decode_vps", r.decode_vps}};
      if (r.exact_mse >= 0) j["exact_mse"] = r.exact_mse;
      out["rows"].push_back(j);
    }
    fmt::print("{}\n", out.dump());
    return 0;
  }
  fmt::print("codec-bench: dim {}, rotation {}, {} unit vectors, seed {}, kernels {} (one thread, CPU time)\n",
             opt.dim, opt.rotation, opt.vectors, opt.seed, kernels);
  fmt::print("{:<8} {:>5} {:>10} {:>10} {:>10} {:>10} {:>6} {:>7} {:>12} {:>12}\n", "variant", "bits",
             "mse", "exact_mse", "ip_bias", "ip_var", "bytes", "x_fp16", "encode_vps", "decode_vps");
  for (const Row& r : rows) {
    fmt::print("{:<8} {:>5} {:>10.5f} {:>10} {:>+10.5f} {:>10.2e} {:>6} {:>7.2f} {:>12.0f} {:>12.0f}\n",
               r.variant, r.bits, r.mse, r.exact_mse >= 0 ? fmt::format("{:.5f}", r.exact_mse) : "-",
               r.ip_bias, r.ip_var, r.bytes_per_vector, r.compression_vs_fp16, r.encode_vps,
               r.decode_vps);
  }
  if (std::any_of(opt.bits.begin(), opt.bits.end(), [](double b) { return b < 2; })) {
    fmt::print("(prod needs bits >= 2: (bits-1)-bit mse + 1-bit QJL; no prod row below 2 bits)\n");
  }
  return 0;
}

const CommandRegistration registration{"codec-bench", [](CLI::App& app) {
  auto opt = std::make_shared<CodecBenchOptions>();
  app.description("Distortion, inner-product bias and throughput of the TurboQuant codecs");
  app.add_option("--dim", opt->dim, "Vector dimension (head_dim)")->capture_default_str();
  app.add_option("--bits", opt->bits, "Comma-separated widths, 1-8 in steps of 0.5 (e.g. 2,2.5,3)")
      ->delimiter(',')
      ->capture_default_str();
  app.add_option("--vectors", opt->vectors, "Number of random unit vectors")->capture_default_str();
  app.add_option("--rotation", opt->rotation, "haar or hadamard")->capture_default_str();
  app.add_option("--seed", opt->seed, "Seed for data, rotation and QJL matrix")->capture_default_str();
  app.add_flag("--json", opt->json, "Print one JSON object instead of the table");
  app.add_flag("--scalar", opt->scalar, "Use the scalar reference loops instead of the SIMD kernels");
  return [opt] { return run_codec_bench(*opt); };
}};

}  // namespace
}  // namespace turbokv::tools
