// `turbokv cache-verify-bench [--mb N] [--reps R]`: what verifying the checksums of a saved
// prompt cache (format version 2) costs on load. Builds a dense fp16 cache of about N MiB
// (one layer, 8 kv heads x 128, Gaussian data), saves it, writes a version-1 copy of the same
// file (the checksum keys dropped: a load that verifies nothing, otherwise the same work), then
// loads the two alternately R times and prints the best and median load time of each and the
// verification's share, in wall time and in the loading thread's CPU time (a load is
// single-threaded; on a shared machine its CPU time is what it would take on an idle core, see
// timing.hpp). The bar (issue 17): at most 10% more time for a 1 GB cache.
#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "cache/safetensors.hpp"
#include "tools/command_registry.hpp"
#include "turbokv/cache_io.hpp"
#include "turbokv/dense_cache.hpp"
#include "turbokv/error.hpp"
#include "turbokv/prng.hpp"
#include "turbokv/timing.hpp"

namespace turbokv::tools {
namespace {

struct VerifyBenchOptions {
  size_t mb = 1024;
  int reps = 5;
  std::string dir = std::filesystem::temp_directory_path().string();
};

struct LoadTime {
  double wall = 0, cpu = 0;
};

LoadTime load_time(const std::string& path) {
  const double wall = monotonic_seconds(), cpu = thread_cpu_seconds();
  const PromptCache cache = load_prompt_cache(path);
  LoadTime t{monotonic_seconds() - wall, thread_cpu_seconds() - cpu};
  if (cache.n_layers() != 1) throw Error("cache-verify-bench: the cache did not load whole");
  return t;
}

// Points file descriptor 2 at /dev/null for its lifetime.
class QuietStderr {
 public:
  QuietStderr() : saved_(::dup(2)) {
    const int null = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
    if (null >= 0) {
      ::dup2(null, 2);
      ::close(null);
    }
  }
  ~QuietStderr() {
    std::fflush(stderr);
    if (saved_ >= 0) {
      ::dup2(saved_, 2);
      ::close(saved_);
    }
  }
  QuietStderr(const QuietStderr&) = delete;
  QuietStderr& operator=(const QuietStderr&) = delete;

 private:
  int saved_;
};

void report(const char* what, const std::vector<LoadTime>& t, double* wall, double* cpu) {
  std::vector<double> w, c;
  for (const LoadTime& x : t) {
    w.push_back(x.wall);
    c.push_back(x.cpu);
  }
  *wall = median(w);
  *cpu = median(c);
  fmt::print("{}: median wall {:.1f} ms (best {:.1f}), median thread CPU {:.1f} ms (best {:.1f})\n", what,
             *wall * 1e3, *std::min_element(w.begin(), w.end()) * 1e3, *cpu * 1e3,
             *std::min_element(c.begin(), c.end()) * 1e3);
}

int run(const VerifyBenchOptions& opt) {
  if (opt.mb < 1 || opt.reps < 1) throw Error("cache-verify-bench: --mb and --reps must be >= 1");
  constexpr int kHeads = 8, kDim = 128;
  constexpr size_t kChunk = 1024;
  const size_t bytes_per_token = size_t{2} * kHeads * kDim * 2;  // keys + values, fp16
  const size_t tokens = std::max<size_t>(1, (opt.mb << 20) / bytes_per_token);
  const std::string v2 = fmt::format("{}/turbokv_verify_bench_{}_v2.safetensors", opt.dir, ::getpid());
  const std::string v1 = fmt::format("{}/turbokv_verify_bench_{}_v1.safetensors", opt.dir, ::getpid());
  {
    PromptCache pc;
    auto layer = std::make_unique<DenseKVCache>(kHeads, kDim, DenseDtype::f16);
    SplitMix64 rng(1);
    std::vector<float> k(kHeads * kChunk * kDim), v(k.size());
    for (size_t done = 0; done < tokens; done += kChunk) {
      const size_t n = std::min(kChunk, tokens - done);
      for (size_t i = 0; i < kHeads * n * kDim; ++i) {
        k[i] = static_cast<float>(rng.normal());
        v[i] = static_cast<float>(rng.normal());
      }
      layer->append(std::span<const float>(k).first(kHeads * n * kDim),
                    std::span<const float>(v).first(kHeads * n * kDim), n);
    }
    pc.add_layer(std::move(layer));
    save_prompt_cache(v2, pc);
  }
  {
    // The version-1 copy: same tensors and keys, no checksum.* keys.
    const safetensors::Reader reader(safetensors::open_file_source(v2));
    std::map<std::string, std::string> meta;
    for (const auto& [key, value] : reader.metadata()) {
      if (key.rfind("checksum.", 0) != 0) meta[key] = value;
    }
    meta["format_version"] = "1";
    std::vector<TensorBlob> blobs;
    for (const auto& t : reader.tensors()) blobs.push_back(reader.read(t, t.name));
    std::vector<const TensorBlob*> ptrs;
    for (const auto& b : blobs) ptrs.push_back(&b);
    safetensors::write_file(v1, meta, ptrs);
  }
  std::vector<LoadTime> t1, t2;
  {
    // Each version-1 load warns on stderr; the warnings go to /dev/null while timing.
    const QuietStderr quiet;
    load_time(v2);  // untimed: both files start in the page cache
    load_time(v1);
    for (int r = 0; r < opt.reps; ++r) {
      t2.push_back(load_time(v2));
      t1.push_back(load_time(v1));
    }
  }
  const auto file_mb = static_cast<double>(std::filesystem::file_size(v2)) / (1 << 20);
  std::remove(v1.c_str());
  std::remove(v2.c_str());
  fmt::print("dense fp16 cache, {} tokens x {} heads x {}, file {:.0f} MiB, {} loads each\n", tokens, kHeads, kDim,
             file_mb, opt.reps);
  double w1 = 0, c1 = 0, w2 = 0, c2 = 0;
  report("load without checksums (v1)", t1, &w1, &c1);
  report("load verifying (v2)        ", t2, &w2, &c2);
  fmt::print("verification: {:+.1f}% wall, {:+.1f}% CPU (medians)\n", (w2 / w1 - 1) * 100, (c2 / c1 - 1) * 100);
  return 0;
}

const CommandRegistration registration{"cache-verify-bench", [](CLI::App& app) {
  auto opt = std::make_shared<VerifyBenchOptions>();
  app.description("Load time of a saved prompt cache with and without checksum verification");
  app.add_option("--mb", opt->mb, "Cache size in MiB")->capture_default_str();
  app.add_option("--reps", opt->reps, "Loads of each file")->capture_default_str();
  app.add_option("--dir", opt->dir, "Folder for the two temporary files")->capture_default_str();
  return [opt] { return run(*opt); };
}};

}  // namespace
}  // namespace turbokv::tools
