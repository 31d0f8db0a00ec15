// Writes the fuzz seed corpora, fuzz/corpus/<target>/: small valid files made with the project's
// own writers (valid_*) and broken variants of them (broken_*: truncated, corrupted fields, a
// newer format version). tests/cli/test_broken_files_cli.cpp runs the CLI on every broken_* file.
//
//   build-fuzz/fuzz/fuzz_make_seeds fuzz/corpus
//
// Formats whose writer has not landed yet are skipped (__has_include).
#include <fmt/format.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "turbokv/cache_io.hpp"
#include "turbokv/dense_cache.hpp"
#include "turbokv/error.hpp"
#if __has_include("turbokv/baseline_caches.hpp")
#include "turbokv/baseline_caches.hpp"
#define SEEDS_HAVE_BASELINES 1
#endif
#if __has_include("turbokv/turboquant_cache.hpp")
#include "turbokv/turboquant_cache.hpp"
#define SEEDS_HAVE_TURBOQUANT 1
#endif
#ifdef TURBOKV_HAVE_ENGINE
#include "engine/model/model.hpp"
#include "engine/runtime/session_metadata.hpp"
#include "engine/tokenizer/tokenizer.hpp"
#endif
#include "cache_roundtrip_input.hpp"
#include "server/prefix/prefix_value.hpp"
#if __has_include("turbokv/codec.hpp")
#include "turbokv/codec.hpp"
#include "codec_input.hpp"
#define SEEDS_HAVE_CODEC 1
#endif
#if defined(TURBOKV_HAVE_ENGINE) && __has_include("engine/model/gguf.hpp")
#include "engine/tokenizer/bpe_tokenizer.hpp"
#include "engine/model/gguf.hpp"
#include "engine/tensor/tensor_types.hpp"
#include "engine/tokenizer/tokenizer_factory.hpp"
#define SEEDS_HAVE_GGUF 1
#endif

namespace fs = std::filesystem;
using Bytes = std::vector<uint8_t>;

namespace {

fs::path g_root;
std::mt19937 g_rng(12345);

bool rejected(const std::string& target, const Bytes& bytes);

// Writes one seed. A broken_* seed that its loader accepts anyway (a flipped bit that landed in
// a free-form string, say) is dropped: the CLI test expects every broken_* file to be rejected.
void put(const std::string& target, const std::string& name, const Bytes& bytes) {
  if (name.rfind("broken_", 0) == 0 && !rejected(target, bytes)) {
    fmt::print("note: {}/{} is accepted by its loader; not written\n", target, name);
    return;
  }
  const fs::path dir = g_root / target;
  fs::create_directories(dir);
  std::ofstream out(dir / name, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

std::vector<float> random_floats(size_t n, float scale = 1.0f) {
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(g_rng);
  return v;
}

void append_i32(Bytes& b, int32_t v) {
  uint8_t raw[4];
  std::memcpy(raw, &v, 4);
  b.insert(b.end(), raw, raw + 4);
}
void append_f32(Bytes& b, float v) {
  uint8_t raw[4];
  std::memcpy(raw, &v, 4);
  b.insert(b.end(), raw, raw + 4);
}
void set_i32(Bytes& b, size_t offset, int32_t v) { std::memcpy(b.data() + offset, &v, 4); }

// Generic breakage shared by every format: truncations and a few flipped bytes.
void put_truncations(const std::string& target, const std::string& stem, const Bytes& valid) {
  put(target, "broken_" + stem + "_empty.bin", {});
  for (size_t cut : {size_t{3}, size_t{8}, size_t{27}, valid.size() / 2, valid.size() - 1}) {
    if (cut >= valid.size()) continue;
    put(target, fmt::format("broken_{}_trunc{}.bin", stem, cut), Bytes(valid.begin(), valid.begin() + cut));
  }
}
void put_flips(const std::string& target, const std::string& stem, const Bytes& valid, int count) {
  for (int i = 0; i < count; ++i) {
    Bytes b = valid;
    const size_t at = std::uniform_int_distribution<size_t>(0, std::min<size_t>(b.size(), 256) - 1)(g_rng);
    b[at] ^= static_cast<uint8_t>(1u << (i % 8));
    put(target, fmt::format("broken_{}_flip{}.bin", stem, i), b);
  }
}

// ---- saved prompt caches (safetensors) ------------------------------------------------------

void fill(turbokv::KVCache& cache, size_t tokens) {
  const size_t n = static_cast<size_t>(cache.kv_heads()) * tokens * static_cast<size_t>(cache.head_dim());
  const auto k = random_floats(n), v = random_floats(n);
  cache.append(k, v, tokens);
}

// Replaces the first `from` in the header with `to` (same length keeps the offsets valid).
Bytes replace_in_header(Bytes b, const std::string& from, const std::string& to) {
  const std::string text(b.begin(), b.end());
  const size_t at = text.find(from);
  if (at == std::string::npos) return {};
  Bytes out(b.begin(), b.begin() + static_cast<std::ptrdiff_t>(at));
  out.insert(out.end(), to.begin(), to.end());
  if (to.size() != from.size()) {
    // Fix the 8-byte header length so only the intended field is wrong.
    uint64_t len;
    std::memcpy(&len, b.data(), 8);
    len = len + to.size() - from.size();
    std::memcpy(out.data(), &len, 8);
  }
  out.insert(out.end(), b.begin() + static_cast<std::ptrdiff_t>(at + from.size()), b.end());
  return out;
}

void cache_seeds() {
  const std::string t = "cache";
  {
    turbokv::PromptCache pc;
    for (int l = 0; l < 2; ++l) {
      auto c = std::make_unique<turbokv::DenseKVCache>(2, 16, turbokv::DenseDtype::f16, 4);
      fill(*c, 6);
      pc.add_layer(std::move(c));
    }
    pc.metadata()["model"] = "seed";
    const Bytes valid = turbokv::serialize_prompt_cache(pc);
    put(t, "valid_dense_f16.bin", valid);
    put_truncations(t, "dense", valid);
    put_flips(t, "dense", valid, 4);
    put(t, "broken_dense_newer_version.bin",
        replace_in_header(valid, "\"format_version\":\"2\"", "\"format_version\":\"3\""));
    put(t, "broken_dense_more_layers.bin", replace_in_header(valid, "\"n_layers\":\"2\"", "\"n_layers\":\"3\""));
    put(t, "broken_dense_bad_dtype.bin", replace_in_header(valid, "\"F16\"", "\"F64\""));
    put(t, "broken_dense_bad_class.bin", replace_in_header(valid, "\"dense\"", "\"dunce\""));
    Bytes huge = valid;
    const uint64_t big = ~uint64_t{0} - 7;
    std::memcpy(huge.data(), &big, 8);
    put(t, "broken_dense_header_len.bin", huge);
  }
  {
    turbokv::PromptCache pc;
    auto c = std::make_unique<turbokv::DenseKVCache>(1, 8, turbokv::DenseDtype::f32, 2);
    fill(*c, 3);
    pc.add_layer(std::move(c));
    put(t, "valid_dense_f32.bin", turbokv::serialize_prompt_cache(pc));
    // Engine metadata a session would refuse, checksummed as a writer bug would leave it.
    const std::pair<const char*, const char*> engine_garbage[] = {
        {"engine.tokens", "x"}, {"engine.tokens", "[1,NaN,2]"}, {"engine.model_shape", "1,1,8"}};
    for (const auto& [key, value] : engine_garbage) {
      turbokv::PromptCache bad = turbokv::parse_prompt_cache(turbokv::serialize_prompt_cache(pc));
      bad.metadata() = {{"engine.tokens", "[1,2,3]"}, {"engine.model_shape", "1,1,8,4"},
                        {"engine.last_logits_f32_hex", "0000803f0000803f0000803f0000803f"}};
      bad.metadata()[key] = value;
      put(t, fmt::format("broken_engine_{}.bin", std::string(key).substr(7) + (value[0] == '[' ? "_nan" : "")),
          turbokv::serialize_prompt_cache(bad));
    }
    put(t, "valid_empty_layers.bin", turbokv::serialize_prompt_cache(turbokv::PromptCache{}));
  }
#ifdef SEEDS_HAVE_BASELINES
  {
    turbokv::PromptCache pc;
    auto q8 = std::make_unique<turbokv::BlockQuantKVCache>(1, 32, turbokv::BlockQuantOptions{});
    fill(*q8, 3);
    pc.add_layer(std::move(q8));
    auto q4 = std::make_unique<turbokv::BlockQuantKVCache>(
        1, 32, turbokv::BlockQuantOptions{turbokv::BlockQuantFormat::q4_0, true});
    fill(*q4, 3);
    pc.add_layer(std::move(q4));
    auto kivi = std::make_unique<turbokv::KiviKVCache>(1, 32, turbokv::KiviOptions{2, 8, 8});
    fill(*kivi, 19);
    pc.add_layer(std::move(kivi));
    auto affine = std::make_unique<turbokv::AffineKVCache>(1, 64, turbokv::AffineOptions{4, 32});
    fill(*affine, 2);
    pc.add_layer(std::move(affine));
    const Bytes valid = turbokv::serialize_prompt_cache(pc);
    put(t, "valid_baselines.bin", valid);
    put_flips(t, "baselines", valid, 4);
    put(t, "broken_baselines_trunc_data.bin", Bytes(valid.begin(), valid.end() - 5));
  }
#endif
#ifdef SEEDS_HAVE_TURBOQUANT
  for (int variant = 0; variant < 3; ++variant) {
    turbokv::PromptCache pc;
    turbokv::TurboQuantCacheOptions o;
    o.norm_correction = false;  // variant 0 as first committed (the default changed since)
    if (variant == 2) {  // centered on the mean of 2 sinks, with a window
      o.sinks = 2;
      o.center = true;
      o.window = 1;
      o.page_tokens = 4;
    }
    if (variant == 1) {
      o.key_bits = 3.5;
      o.value_bits = 2;
      o.key_codec = turbokv::TurboQuantCodecKind::prod;
      o.window = 2;
      o.sinks = 1;
      o.page_tokens = 4;
      o.norm_correction = true;
    }
    auto c = std::make_unique<turbokv::TurboQuantKVCache>(2, 32, o);
    fill(*c, 9);
    pc.add_layer(std::move(c));
    const Bytes valid = turbokv::serialize_prompt_cache(pc);
    const std::string stem = fmt::format("turboquant{}", variant);
    put(t, "valid_" + stem + ".bin", valid);
    put_flips(t, stem, valid, 4);
    put(t, "broken_" + stem + "_trunc_data.bin", Bytes(valid.begin(), valid.end() - 3));
  }
#endif
}

// fuzz_cache_roundtrip: each original undamaged, and each with a few flips (header and data).
void cache_roundtrip_seeds() {
  const std::string t = "cache_roundtrip";
  for (size_t i = 0; i < turbokv::fuzz::kCacheOriginals; ++i) {
    put(t, fmt::format("original_{}.bin", i), Bytes{static_cast<uint8_t>(i)});
    for (int k = 0; k < 3; ++k) {
      Bytes b{static_cast<uint8_t>(i)};
      for (int f = 0; f <= k; ++f) {
        // Positions below 4096 land in the header or the first tensors of every original.
        const uint32_t pos = std::uniform_int_distribution<uint32_t>(0, 4095)(g_rng);
        b.insert(b.end(), {static_cast<uint8_t>(pos), static_cast<uint8_t>(pos >> 8), 0,
                           static_cast<uint8_t>(1u << (f % 8))});
      }
      put(t, fmt::format("damaged_{}_{}.bin", i, k), b);
    }
  }
}

// fuzz_prefix_value: values of the shared prefix store (a mode byte, then the value; see
// fuzz_prefix_value.cpp). Valid values of two cache classes under the fixed expectation
// (identity {7, 9, 16}, 32 tokens of id 5, 2 layers of 2 x 8) and with the expectation taken
// from their headers, and damaged copies.
void prefix_value_seeds() {
  const std::string t = "prefix_value";
  const std::vector<int> tokens(32, 5);
  for (const bool turboquant : {false, true}) {
    turbokv::PromptCache cache;
    for (int l = 0; l < 2; ++l) {
#ifdef SEEDS_HAVE_TURBOQUANT
      if (turboquant) {
        turbokv::TurboQuantCacheOptions o;
        o.key_bits = o.value_bits = 4;
        o.window = 4;
        o.sinks = 1;
        cache.add_layer(std::make_unique<turbokv::TurboQuantKVCache>(2, 8, o));
      } else
#endif
      {
        cache.add_layer(std::make_unique<turbokv::DenseKVCache>(2, 8));
      }
      fill(cache.layer(static_cast<size_t>(l)), tokens.size());
    }
    const std::string v = turbokv::server::encode_prefix_value({7, 9, 16}, tokens, cache);
    const std::string stem = turboquant ? "turboquant" : "dense";
    for (const uint8_t mode : {uint8_t{0x00}, uint8_t{0x13}}) {
      Bytes b{mode};
      b.insert(b.end(), v.begin(), v.end());
      put(t, fmt::format("valid_{}_mode{}.bin", stem, mode), b);
      Bytes cut(b.begin(), b.begin() + static_cast<long>(b.size() / 2));
      put(t, fmt::format("damaged_{}_mode{}_half.bin", stem, mode), cut);
      Bytes flipped = b;
      flipped[60] ^= 0x10;  // a token id
      flipped[0] |= 1;      // with the checksum rewritten: reaches the token check
      put(t, fmt::format("damaged_{}_mode{}_token.bin", stem, mode), flipped);
    }
  }
}

// ---- llama2.c checkpoints and tokenizer.bin -------------------------------------------------

Bytes llama2c_checkpoint(int dim, int hidden, int layers, int heads, int kv_heads, int vocab, int seq,
                         bool rope_tables) {
  Bytes b;
  for (int v : {dim, hidden, layers, heads, kv_heads, vocab, seq}) append_i32(b, v);
  const int64_t head_dim = dim / heads, kv_dim = kv_heads * head_dim, V = vocab < 0 ? -vocab : vocab;
  const int64_t n = V * dim + layers * dim + layers * dim * dim + 2 * layers * dim * kv_dim +
                    layers * dim * dim + layers * dim + 3 * layers * dim * hidden + dim +
                    (rope_tables ? seq * head_dim : 0) + (vocab < 0 ? V * dim : 0);
  for (float x : random_floats(static_cast<size_t>(n), 0.1f)) append_f32(b, x);
  return b;
}

void llama2c_seeds() {
  const std::string t = "llama2c";
  const Bytes valid = llama2c_checkpoint(8, 12, 2, 2, 1, 16, 4, true);
  put(t, "valid_shared.bin", valid);
  put(t, "valid_shared_no_rope.bin", llama2c_checkpoint(8, 12, 1, 2, 2, 16, 4, false));
  put(t, "valid_classifier.bin", llama2c_checkpoint(8, 8, 1, 2, 1, -12, 2, true));
  put_truncations(t, "ckpt", valid);
  const char* fields[] = {"dim", "hidden", "layers", "heads", "kvheads", "vocab", "seqlen"};
  for (int f = 0; f < 7; ++f) {
    for (int32_t bad : {0, -1, INT32_MAX, INT32_MIN}) {
      if (f == 5 && bad == -1) continue;  // a negative vocab is a valid (unshared) header
      Bytes b = valid;
      set_i32(b, static_cast<size_t>(f) * 4, bad);
      put(t, fmt::format("broken_{}_{}.bin", fields[f], bad == INT32_MIN ? "min" : std::to_string(bad)), b);
    }
  }
  Bytes odd = valid;
  set_i32(odd, 12, 3);  // n_heads 3 does not divide dim 8
  put(t, "broken_heads_not_divisor.bin", odd);
  Bytes extra = valid;
  extra.push_back(0);
  put(t, "broken_trailing_byte.bin", extra);
}

Bytes tokenizer_bin(bool with_bytes) {
  std::vector<std::pair<std::string, float>> toks = {{"<unk>", 0}, {"<s>", 0}, {"</s>", 0}};
  if (with_bytes) {
    for (int i = 0; i < 256; ++i) toks.push_back({fmt::format("<0x{:02X}>", i), 0});
  }
  for (const char* p : {" ", "e", "t", "o", "n", " t", "th", " th", "he", " the", "on", "ce", " u", "up",
                        " up", " a", "im", "ti", " time", ",", "\xc3\xbc"}) {
    toks.push_back({p, -static_cast<float>(toks.size())});
  }
  int max_len = 0;
  for (const auto& [p, s] : toks) max_len = std::max(max_len, static_cast<int>(p.size()));
  Bytes b;
  append_i32(b, max_len);
  for (const auto& [p, s] : toks) {
    append_f32(b, s);
    append_i32(b, static_cast<int32_t>(p.size()));
    b.insert(b.end(), p.begin(), p.end());
  }
  return b;
}

void tokenizer_seeds() {
  const std::string t = "tokenizer_bin";
  const Bytes valid = tokenizer_bin(true);
  put(t, "valid_bytes.bin", valid);
  put(t, "valid_small.bin", tokenizer_bin(false));
  put_truncations(t, "tok", valid);
  Bytes b = valid;
  set_i32(b, 0, 0);
  put(t, "broken_max_len_zero.bin", b);
  b = valid;
  set_i32(b, 8, -5);  // first token's length
  put(t, "broken_negative_length.bin", b);
  b = valid;
  set_i32(b, 8, 1 << 30);
  put(t, "broken_huge_length.bin", b);
  b = valid;
  const float nan = std::nanf("");
  std::memcpy(b.data() + 4, &nan, 4);
  put(t, "valid_nan_score.bin", b);
}

// ---- codec records ----------------------------------------------------------------------------

#ifdef SEEDS_HAVE_CODEC
void codec_seeds() {
  const std::string t = "codec";
  for (uint8_t sel = 0; sel < 24; sel += 3) {
    for (uint8_t flags : {uint8_t{0}, uint8_t{1}, uint8_t{6}, uint8_t{7}}) {
      const uint8_t header[3] = {flags, sel, static_cast<uint8_t>(sel / 3)};
      const auto decoded = turbokv::fuzz::CodecInput::parse(header, 3);
      try {
        decoded.with_codec([&](const auto& codec) {
          const size_t n = 3;
          Bytes b(header, header + 3);
          Bytes codes(codec.code_size() * n);
          const auto x = random_floats(n * static_cast<size_t>(decoded.options.dim));
          codec.encode(x.data(), n, codes.data());
          b.insert(b.end(), codes.begin(), codes.end());
          put(t, fmt::format("valid_{}_{}.bin", flags, sel), b);
        });
      } catch (const turbokv::Error&) {
      }
    }
  }
}
#endif

// ---- GGUF -------------------------------------------------------------------------------------

#ifdef SEEDS_HAVE_GGUF
#include "make_seeds_gguf.inc"
#endif

}  // namespace

namespace {

// True if the loader the CLI uses for `target` rejects the bytes with turbokv::Error.
bool rejected(const std::string& target, const Bytes& bytes) {
  const fs::path tmp = fs::temp_directory_path() / "turbokv-make-seeds.tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  }
  try {
    if (target == "cache") {
      const turbokv::PromptCache pc = turbokv::parse_prompt_cache(bytes);
      (void)turbokv::read_prompt_cache_info(tmp.string());
#ifdef TURBOKV_HAVE_ENGINE
      // What cache-info checks beyond a load.
      if (turbokv::engine::has_session_metadata(pc)) (void)turbokv::engine::parse_session_metadata(pc, "seed");
#endif
#ifdef TURBOKV_HAVE_ENGINE
    } else if (target == "llama2c") {
      (void)turbokv::engine::load_llama2c(tmp.string());
    } else if (target == "tokenizer_bin") {
      (void)turbokv::engine::load_llama2c_tokenizer(tmp.string());
#endif
#ifdef SEEDS_HAVE_GGUF
    } else if (target == "gguf") {
      const auto model = turbokv::engine::load_gguf(tmp.string());
      (void)turbokv::engine::load_tokenizer_from_gguf(turbokv::engine::GgufFile::open(tmp.string()));
    } else if (target == "bpe") {
      if (bytes.size() >= 4 && std::memcmp(bytes.data(), "GGUF", 4) == 0) {
        (void)turbokv::engine::load_tokenizer_from_gguf(turbokv::engine::GgufFile::open(tmp.string()));
      } else {
        return true;  // the text form is no file the CLI reads
      }
#endif
    }
  } catch (const turbokv::Error&) {
    return true;
  }
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    fmt::print(stderr, "usage: {} CORPUS_DIR\n", argv[0]);
    return 2;
  }
  g_root = argv[1];
  cache_seeds();
  llama2c_seeds();
  tokenizer_seeds();
#ifdef SEEDS_HAVE_CODEC
  codec_seeds();
#endif
#ifdef SEEDS_HAVE_GGUF
  gguf_seeds();
#endif
  cache_roundtrip_seeds();  // the seeds above keep the random draws they had before
  prefix_value_seeds();     // last, for the same reason
  return 0;
}
