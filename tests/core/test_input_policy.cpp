// The input policy of docs/reliability.md, enforced across every cache class and every loader:
//  - NaN/Inf in appended vectors -> turbokv::Error, the cache unchanged (never a poisoned cache);
//  - zero vectors are valid input and come back exactly zero;
//  - huge finite values: either turbokv::Error or stored as finite numbers, never Inf/NaN;
//  - sizes whose element count overflows size_t -> turbokv::Error before any allocation;
//  - unsupported bit widths and shapes -> turbokv::Error (NotApplicableError for baselines);
//  - files from a newer format version -> turbokv::Error naming the version.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "engine/model/gguf.hpp"
#include "engine/model/model.hpp"
#include "engine/tokenizer/tokenizer.hpp"
#include "test_util.hpp"
#include "turbokv/attention.hpp"
#include "turbokv/baseline_caches.hpp"
#include "turbokv/cache_config.hpp"
#include "turbokv/cache_io.hpp"
#include "turbokv/codec.hpp"
#include "turbokv/dense_cache.hpp"
#include "turbokv/error.hpp"
#include "turbokv/turboquant_cache.hpp"

namespace turbokv {
namespace {

constexpr int kHeads = 2;
constexpr int kDim = 64;

// One configuration of every cache class, with the options that change the input path
// (fp16 vs f32 storage, mse vs prod keys, exact sinks/window, fp32 norms, rotated baselines).
const char* const kConfigs[] = {"dense16", "dense32", "tq3",    "tq2.5",   "prod3",  "tq3s2w4",
                                "tq4-f32n-nc", "tq1", "q8_0", "q4_0h", "kivi2", "affine4"};

std::vector<float> random_vectors(size_t tokens, uint32_t seed, float scale = 1.0f) {
  return test::random_normal(static_cast<size_t>(kHeads) * tokens * kDim, seed, scale);
}

struct Snapshot {
  size_t size;
  std::vector<float> keys, values;
};

Snapshot snapshot(const KVCache& cache) {
  Snapshot s{cache.size(), {}, {}};
  const size_t n = static_cast<size_t>(cache.kv_heads()) * cache.size() * cache.head_dim();
  s.keys.resize(n);
  s.values.resize(n);
  cache.fetch(s.keys, s.values);
  return s;
}

void expect_unchanged(const KVCache& cache, const Snapshot& before) {
  const Snapshot after = snapshot(cache);
  ASSERT_EQ(after.size, before.size);
  EXPECT_EQ(0, std::memcmp(after.keys.data(), before.keys.data(), after.keys.size() * 4));
  EXPECT_EQ(0, std::memcmp(after.values.data(), before.values.data(), after.values.size() * 4));
}

bool all_finite(const std::vector<float>& v) {
  for (float x : v) {
    if (!std::isfinite(x)) return false;
  }
  return true;
}

class CachePolicy : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    cache_ = make_kv_cache(GetParam(), kHeads, kDim);
    // A few tokens already in the cache, so "unchanged" is a real check.
    const auto k = random_vectors(40, 1), v = random_vectors(40, 2);
    cache_->append(k, v, 40);
  }
  std::unique_ptr<KVCache> cache_;
};

TEST_P(CachePolicy, NonFiniteInputIsRejectedAndLeavesTheCacheUnchanged) {
  const Snapshot before = snapshot(*cache_);
  const float bad_values[] = {std::numeric_limits<float>::quiet_NaN(),
                              std::numeric_limits<float>::infinity(),
                              -std::numeric_limits<float>::infinity()};
  for (float bad : bad_values) {
    for (bool in_keys : {true, false}) {
      // A batch of 5 tokens with one bad element in the middle of token 3, head 1.
      auto k = random_vectors(5, 3), v = random_vectors(5, 4);
      (in_keys ? k : v)[(1 * 5 + 3) * kDim + 17] = bad;
      EXPECT_THROW(cache_->append(k, v, 5), Error) << GetParam() << " accepted " << bad;
      expect_unchanged(*cache_, before);
    }
  }
}

TEST_P(CachePolicy, ZeroVectorsDecodeToExactZero) {
  auto cache = make_kv_cache(GetParam(), kHeads, kDim);
  const std::vector<float> zeros(static_cast<size_t>(kHeads) * 70 * kDim, 0.0f);
  cache->append(zeros, zeros, 70);
  const Snapshot s = snapshot(*cache);
  ASSERT_EQ(s.size, 70u);
  for (size_t i = 0; i < s.keys.size(); ++i) {
    ASSERT_EQ(s.keys[i], 0.0f) << GetParam() << " key element " << i;
    ASSERT_EQ(s.values[i], 0.0f) << GetParam() << " value element " << i;
  }
  // Attention over an all-zero cache is well defined: uniform weights over zero values.
  const auto q = random_vectors(1, 5);
  std::vector<float> out(q.size(), 1.0f);
  attend(q, kHeads, 1, *cache, out);
  for (float x : out) ASSERT_EQ(x, 0.0f) << GetParam();
}

TEST_P(CachePolicy, HugeFiniteValuesAreRejectedOrStoredFinite) {
  for (float magnitude : {7e4f, 1e30f, std::numeric_limits<float>::max()}) {
    const Snapshot before = snapshot(*cache_);
    auto k = random_vectors(3, 6), v = random_vectors(3, 7);
    k[5] = magnitude;
    v[kDim + 2] = -magnitude;
    try {
      cache_->append(k, v, 3);
    } catch (const Error&) {
      expect_unchanged(*cache_, before);
      continue;
    }
    const Snapshot after = snapshot(*cache_);
    EXPECT_TRUE(all_finite(after.keys)) << GetParam() << " stored Inf/NaN keys for " << magnitude;
    EXPECT_TRUE(all_finite(after.values)) << GetParam() << " stored Inf/NaN values for " << magnitude;
    if (std::string(GetParam()) == "dense32") {
      // f32 storage holds every finite float: all three tokens come back bit-exact, the huge
      // elements included (head 0: key token 40 element 5, value token 41 element 2).
      const size_t n = before.size + 3;
      for (int h = 0; h < kHeads; ++h) {
        for (size_t t = 0; t < 3; ++t) {
          for (int i = 0; i < kDim; ++i) {
            const size_t in = (static_cast<size_t>(h) * 3 + t) * kDim + i;
            const size_t at = (static_cast<size_t>(h) * n + before.size + t) * kDim + i;
            ASSERT_EQ(after.keys[at], k[in]) << magnitude << " " << h << " " << t << " " << i;
            ASSERT_EQ(after.values[at], v[in]) << magnitude << " " << h << " " << t << " " << i;
          }
        }
      }
      EXPECT_EQ(after.keys[(before.size + 0) * kDim + 5], magnitude);
      EXPECT_EQ(after.values[(before.size + 1) * kDim + 2], -magnitude);
    }
    cache_->trim(3);
  }
}

TEST_P(CachePolicy, OverflowingTokenCountsAreRejectedBeforeAllocating) {
  const Snapshot before = snapshot(*cache_);
  const std::vector<float> none;
  const std::vector<float> one_token = random_vectors(1, 8);
  // n_tokens * kv_heads * head_dim wraps to 0 (2^63 * 128) or to one token's worth of floats:
  // a size check done in wrapping arithmetic would accept these spans.
  const size_t wrap_to_zero = size_t{1} << 63;
  const size_t wrap_to_one = (size_t{1} << 57) + 1;  // * 128 = 2^64 + 128 == 128 (mod 2^64)
  EXPECT_THROW(cache_->append(none, none, wrap_to_zero), Error) << GetParam();
  EXPECT_THROW(cache_->append(one_token, one_token, wrap_to_one), Error) << GetParam();
  EXPECT_THROW(cache_->append(none, none, std::numeric_limits<size_t>::max()), Error) << GetParam();
  // A plain mismatch: one float short, or keys and values of different lengths.
  const auto k = random_vectors(2, 9);
  std::vector<float> short_k(k.begin(), k.end() - 1);
  EXPECT_THROW(cache_->append(short_k, k, 2), Error) << GetParam();
  EXPECT_THROW(cache_->append(k, short_k, 2), Error) << GetParam();
  expect_unchanged(*cache_, before);
  // trim beyond the size drops what there is and no more.
  EXPECT_EQ(cache_->trim(std::numeric_limits<size_t>::max()), before.size);
  EXPECT_EQ(cache_->size(), 0u);
}

TEST_P(CachePolicy, FetchIntoWrongSizedBuffersIsRejected) {
  const size_t n = static_cast<size_t>(kHeads) * cache_->size() * kDim;
  std::vector<float> k(n - 1), v(n);
  EXPECT_THROW(cache_->fetch(k, v), Error) << GetParam();
  std::vector<float> k2(n + 1), v2(n);
  EXPECT_THROW(cache_->fetch(k2, v2), Error) << GetParam();
}

TEST_P(CachePolicy, BadAttentionRequestsAreRejected) {
  const auto q = random_vectors(1, 10);
  std::vector<float> out(q.size());
  EXPECT_THROW(attend(q, 3, 1, *cache_, out), Error);   // not a multiple of kv_heads
  EXPECT_THROW(attend(q, 0, 1, *cache_, out), Error);
  std::vector<float> short_out(out.size() - 1);
  EXPECT_THROW(attend(q, kHeads, 1, *cache_, short_out), Error);
  EXPECT_THROW(attend(q, kHeads, 41, *cache_, out), Error);  // more queries than tokens
  auto empty = make_kv_cache(GetParam(), kHeads, kDim);
  EXPECT_THROW(attend(q, kHeads, 1, *empty, out), Error);
  std::vector<float> nan_q = q;
  nan_q[3] = std::numeric_limits<float>::quiet_NaN();
  // A NaN query is the caller's own problem but must not crash: either an Error, or only its own
  // head's output is touched (the other head's equals what the clean query gives) and the cache
  // is unchanged.
  const Snapshot before = snapshot(*cache_);
  std::vector<float> clean(q.size());
  attend(q, kHeads, 1, *cache_, clean);
  for (float x : clean) ASSERT_TRUE(std::isfinite(x)) << GetParam();
  std::vector<float> with_nan(q.size(), 0.0f);
  try {
    attend(nan_q, kHeads, 1, *cache_, with_nan);
    for (int i = kDim; i < 2 * kDim; ++i) {  // nan_q[3] is in head 0; head 1 is untouched by it
      EXPECT_EQ(with_nan[static_cast<size_t>(i)], clean[static_cast<size_t>(i)]) << GetParam() << " " << i;
    }
  } catch (const Error&) {
  }
  expect_unchanged(*cache_, before);
}

INSTANTIATE_TEST_SUITE_P(AllClasses, CachePolicy, ::testing::ValuesIn(kConfigs),
                         [](const ::testing::TestParamInfo<const char*>& info) {
                           std::string name = info.param;
                           for (char& c : name) {
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           }
                           return name;
                         });

TEST(InputPolicy, UnsupportedBitWidthsAreRejected) {
  for (double bits : {0.0, 0.5, -1.0, 8.5, 9.0, 2.25, 3.1, std::nan(""), 1e300}) {
    CodecOptions o;
    o.bits = bits;
    EXPECT_THROW(TurboQuantMse{o}, Error) << bits;
    EXPECT_THROW(TurboQuantProd{o}, Error) << bits;
    TurboQuantCacheOptions c;
    c.key_bits = bits;
    EXPECT_THROW(TurboQuantKVCache(2, 64, c), Error) << bits;
    c.key_bits = 4;
    c.value_bits = bits;
    EXPECT_THROW(TurboQuantKVCache(2, 64, c), Error) << bits;
  }
  CodecOptions o;
  o.bits = 1;  // prod spends one bit on QJL: 1 bit leaves nothing for the mse stage
  EXPECT_THROW(TurboQuantProd{o}, Error);
  for (const char* name : {"tq0", "tq9", "tq2.25", "k9v4", "prod1", "kivi3x", "affine5", "q5_0", "tq"}) {
    EXPECT_THROW(make_kv_cache(name, 2, 64), Error) << name;
  }
}

TEST(InputPolicy, UnsupportedShapesAreRejected) {
  for (int dim : {0, -1, -128, std::numeric_limits<int>::min(), 1 << 20, std::numeric_limits<int>::max()}) {
    CodecOptions o;
    o.dim = dim;
    EXPECT_THROW(TurboQuantMse{o}, Error) << dim;
    EXPECT_THROW(TurboQuantKVCache(2, dim, {}), Error) << dim;
    EXPECT_THROW(DenseKVCache(2, dim), Error) << dim;
  }
  for (int heads : {0, -1, std::numeric_limits<int>::max()}) {
    EXPECT_THROW(TurboQuantKVCache(heads, 64, {}), Error) << heads;
    EXPECT_THROW(DenseKVCache(heads, 64), Error) << heads;
    for (const char* name : {"q8_0", "kivi2", "affine4"}) {
      EXPECT_THROW(make_kv_cache(name, heads, 64), Error) << name << " " << heads;
    }
  }
  // Baselines that do not fit a head row are "not applicable", a turbokv::Error subtype.
  EXPECT_THROW(make_kv_cache("q8_0", 2, 48), NotApplicableError);
  EXPECT_THROW(make_kv_cache("q4_0h", 2, 80), NotApplicableError);  // 80: no 32-value blocks
  // 96 = 3 * 32 fits the blocks, and the randomized Hadamard rotation covers it (H_32 (x) Q_3).
  EXPECT_NO_THROW(make_kv_cache("q4_0h", 2, 96));
  EXPECT_THROW(make_kv_cache("affine4", 2, 32), NotApplicableError);
  EXPECT_THROW(DenseKVCache(2, 64, DenseDtype::f16, 0), Error);
  TurboQuantCacheOptions zero_pages;
  zero_pages.page_tokens = 0;
  EXPECT_THROW(TurboQuantKVCache(2, 64, zero_pages), Error);
}

TEST(InputPolicy, CodecRejectsNonFiniteAndKeepsZero) {
  for (bool prod : {false, true}) {
    CodecOptions o;
    o.dim = 64;
    o.bits = 3;
    o.norm_correction = prod;  // the 0/0 of a corrected zero vector must not become NaN
    std::vector<float> x(3 * 64, 0.0f);
    std::vector<uint8_t> codes;
    std::vector<float> out(x.size(), 1.0f);
    auto check = [&](const auto& codec) {
      codes.assign(3 * codec.code_size(), 0);
      codec.encode(x.data(), 3, codes.data());
      codec.decode(codes.data(), 3, out.data());
      for (float v : out) ASSERT_EQ(v, 0.0f);
      x[64 + 5] = std::numeric_limits<float>::infinity();
      EXPECT_THROW(codec.encode(x.data(), 3, codes.data()), Error);
      x[64 + 5] = std::numeric_limits<float>::quiet_NaN();
      EXPECT_THROW(codec.encode(x.data(), 3, codes.data()), Error);
      x[64 + 5] = 0;
      x[7] = 1e6f;  // norm beyond fp16 range with fp16 norms
      EXPECT_THROW(codec.encode(x.data(), 3, codes.data()), Error);
      x[7] = 0;
    };
    if (prod) {
      check(TurboQuantProd(o));
    } else {
      check(TurboQuantMse(o));
    }
  }
}

// ---- regressions found by fuzzing (each failed under UBSan before its fix) -------------------

// fuzz_cache, 2026-11-29: TurboQuantKVCache::from_state copied the sinks with
// memcpy(null, null, 0) when the file had no sinks; fetch() did the same; and the first append
// into a recent-token window memmoved from the empty (null) window buffer. Passing null to
// memcpy/memmove is undefined even for 0 bytes.
TEST(FuzzRegression, TurboQuantCachesWithoutSinksOrWithAWindowLoadAndFetch) {
  for (const char* config : {"tq3", "tq3w4", "prod3w8", "tq2s2"}) {
    auto cache = make_kv_cache(config, kHeads, kDim);
    const auto k = random_vectors(9, 21), v = random_vectors(9, 22);
    cache->append(k, v, 9);
    PromptCache pc;
    pc.add_layer(std::move(cache));
    const auto bytes = serialize_prompt_cache(pc);
    PromptCache back = parse_prompt_cache(bytes);
    EXPECT_EQ(serialize_prompt_cache(back), bytes) << config;
    const Snapshot a = snapshot(pc.layer(0)), b = snapshot(back.layer(0));
    EXPECT_EQ(a.keys, b.keys) << config;
    EXPECT_EQ(a.values, b.values) << config;
  }
}

// Policy for files: a TurboQuant record whose stored norm is NaN/Inf would decode to NaN/Inf,
// so loading rejects it (like non-finite exact sink/window tokens).
TEST(InputPolicy, TurboQuantStateWithNonFiniteNormIsRejected) {
  for (const char* config : {"tq3", "prod3", "tq4-f32n"}) {
    auto cache = make_kv_cache(config, kHeads, kDim);
    const auto k = random_vectors(6, 31), v = random_vectors(6, 32);
    cache->append(k, v, 6);
    const auto* tq = dynamic_cast<const TurboQuantKVCache*>(cache.get());
    ASSERT_NE(tq, nullptr);
    const CodeLayout& kl = tq->key_prod() ? tq->key_prod()->layout() : tq->key_mse()->layout();
    const CodeLayout& vl = tq->value_codec().layout();
    EXPECT_NO_THROW(load_kv_cache(cache->save_state()));
    for (const auto& [tensor, layout] : {std::pair{"key_codes", &kl}, std::pair{"value_codes", &vl}}) {
      for (size_t field : {layout->norm_offset, layout->residual_norm_offset}) {
        if (field == CodeLayout::npos) continue;
        for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
          CacheState state = cache->save_state();
          for (auto& t : state.tensors) {
            if (t.name != tensor) continue;
            // record 4 of head 1
            uint8_t* record = t.data.data() + (1 * 6 + 4) * layout->code_size;
            store_norm(record + field, 0.0f, layout->fp32_norm);
            if (layout->fp32_norm) {
              std::memcpy(record + field, &bad, 4);
            } else {
              const uint16_t h = std::isnan(bad) ? 0x7E00 : 0x7C00;
              std::memcpy(record + field, &h, 2);
            }
          }
          EXPECT_THROW(load_kv_cache(state), Error) << config << " " << tensor << " field " << field;
        }
      }
    }
  }
}

// Policy for dense files: NaN/Inf values load only from a cache that opted in
// (set_allow_non_finite), which its file records; anything else is rejected.
TEST(InputPolicy, DenseStateWithNonFiniteValuesNeedsTheRecordedOptIn) {
  for (const char* config : {"dense16", "dense32"}) {
    auto cache = make_kv_cache(config, kHeads, kDim);
    const auto k = random_vectors(5, 41), v = random_vectors(5, 42);
    cache->append(k, v, 5);
    for (const char* tensor : {"keys", "values"}) {
      for (float bad : {std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::infinity()}) {
        CacheState state = cache->save_state();
        for (auto& t : state.tensors) {
          if (t.name != tensor) continue;
          const size_t element = (1 * 5 + 3) * kDim + 7;  // head 1, token 3, element 7
          if (t.dtype == "F16") {
            const uint16_t h = std::isnan(bad) ? 0x7E00 : 0xFC00;
            std::memcpy(t.data.data() + 2 * element, &h, 2);
          } else {
            std::memcpy(t.data.data() + 4 * element, &bad, 4);
          }
        }
        EXPECT_THROW(load_kv_cache(state), Error) << config << " " << tensor;
        state.metadata["allow_non_finite"] = "1";
        EXPECT_NO_THROW(load_kv_cache(state)) << config << " " << tensor;
        state.metadata["allow_non_finite"] = "yes";
        EXPECT_THROW(load_kv_cache(state), Error) << config << " " << tensor;
      }
    }
    // A cache that opted in round-trips its NaN and keeps the opt-in.
    auto* dense = dynamic_cast<turbokv::DenseKVCache*>(cache.get());
    ASSERT_NE(dense, nullptr);
    dense->set_allow_non_finite(true);
    std::vector<float> nk(kHeads * kDim, 1.0f), nv(kHeads * kDim, 2.0f);
    nk[3] = std::numeric_limits<float>::quiet_NaN();
    cache->append(nk, nv, 1);
    const auto loaded = load_kv_cache(cache->save_state());
    const auto* loaded_dense = dynamic_cast<const turbokv::DenseKVCache*>(loaded.get());
    ASSERT_NE(loaded_dense, nullptr);
    EXPECT_TRUE(loaded_dense->allow_non_finite()) << config;
    std::vector<float> fk(kHeads * 6 * kDim), fv(fk.size());
    loaded->fetch(fk, fv);
    EXPECT_TRUE(std::isnan(fk[5 * kDim + 3])) << config;  // head 0, token 5, element 3
    // Without the opt-in a cache's file carries no such key.
    EXPECT_EQ(make_kv_cache(config, kHeads, kDim)->save_state().metadata.count("allow_non_finite"), 0u);
  }
}

// TurboQuantKVCache's constructor allocates its sink buffers eagerly (kv_heads * sinks * head_dim
// floats each) and from_state takes sinks (<= 2^24), kv_heads and head_dim from the file: the
// constructor caps that allocation (256 MiB), so a huge sink option is a turbokv::Error, never
// std::bad_alloc or the OOM killer. (The whole file's commitment, over all its layers, is bounded
// by the loader: test_cache_io.cpp, WholeFileCommitmentIsBoundedByItsSize.)
TEST(InputPolicy, TurboQuantStateWithHugeSinkOptionDoesNotAllocateIt) {
  TurboQuantCacheOptions o;
  o.sinks = 4;
  CacheState state = TurboQuantKVCache(64, 128, o).save_state();
  state.metadata["sinks"] = std::to_string(1 << 24);  // 64 * 2^24 * 128 floats = 512 GiB
  EXPECT_THROW(load_kv_cache(state), Error);
  // A sink capacity that fits the bound still loads.
  state.metadata["sinks"] = "16";
  EXPECT_NO_THROW(load_kv_cache(state));
}

// ---- files ------------------------------------------------------------------------------------

std::vector<uint8_t> small_prompt_cache_file(const char* config) {
  PromptCache pc;
  auto layer = make_kv_cache(config, kHeads, kDim);
  const auto k = random_vectors(5, 11), v = random_vectors(5, 12);
  layer->append(k, v, 5);
  pc.add_layer(std::move(layer));
  return serialize_prompt_cache(pc);
}

// Replaces `from` by `to` (same length) in the file's header.
std::vector<uint8_t> patched(std::vector<uint8_t> bytes, const std::string& from, const std::string& to) {
  EXPECT_EQ(from.size(), to.size());
  const std::string text(bytes.begin(), bytes.end());
  const size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  if (at != std::string::npos) std::memcpy(bytes.data() + at, to.data(), to.size());
  return bytes;
}

TEST(InputPolicy, NewerPromptCacheFormatVersionIsRejected) {
  for (const char* config : kConfigs) {
    const auto good = small_prompt_cache_file(config);
    EXPECT_NO_THROW(parse_prompt_cache(good)) << config;
    for (const char* newer : {"3", "9"}) {
      const auto bytes = patched(good, "\"format_version\":\"2\"",
                                 std::string("\"format_version\":\"") + newer + "\"");
      try {
        parse_prompt_cache(bytes);
        ADD_FAILURE() << config << ": format_version " << newer << " accepted";
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("newer"), std::string::npos) << e.what();
      }
    }
  }
}

TEST(InputPolicy, PromptCacheSizesAreCheckedAgainstTheFileBeforeAllocating) {
  const auto good = small_prompt_cache_file("tq3");
  // Header length field: 2^64 - 8, 2^63, and just past the end of the file.
  for (uint64_t len : {~uint64_t{0} - 7, uint64_t{1} << 63, uint64_t{good.size()}}) {
    auto bytes = good;
    std::memcpy(bytes.data(), &len, 8);
    EXPECT_THROW(parse_prompt_cache(bytes), Error) << len;
  }
  // A layer count far beyond what the file holds.
  EXPECT_THROW(parse_prompt_cache(patched(good, "\"n_layers\":\"1\"", "\"n_layers\":\"9\"")), Error);
  // Cut anywhere: always an Error, never a crash or a partial cache.
  for (size_t cut = 0; cut < good.size(); cut += 1 + cut / 8) {
    const std::vector<uint8_t> part(good.begin(), good.begin() + static_cast<std::ptrdiff_t>(cut));
    EXPECT_THROW(parse_prompt_cache(part), Error) << "cut at " << cut;
  }
}

// ---- model files ------------------------------------------------------------------------------

class TempDir {
 public:
  TempDir() {
    path_ = std::filesystem::temp_directory_path() / ("turbokv-policy-" + std::to_string(::getpid()));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  std::string write(const std::string& name, const std::vector<uint8_t>& bytes) const {
    const auto p = path_ / name;
    std::ofstream(p, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()),
                                             static_cast<std::streamsize>(bytes.size()));
    return p.string();
  }

 private:
  std::filesystem::path path_;
};

std::vector<uint8_t> small_gguf(uint32_t version_patch = 0) {
  engine::GgufWriter w;
  w.set_string("general.architecture", "llama");
  w.set_uint32("llama.block_count", 1);
  std::vector<float> t(32, 0.5f);
  std::vector<uint8_t> bytes(t.size() * 4);
  std::memcpy(bytes.data(), t.data(), bytes.size());
  w.add_tensor("x.weight", engine::GgmlType::F32, {8, 4}, bytes);
  auto out = w.serialize();
  if (version_patch != 0) std::memcpy(out.data() + 4, &version_patch, 4);
  return out;
}

TEST(InputPolicy, NewerGgufVersionIsRejected) {
  TempDir dir;
  EXPECT_NO_THROW(engine::GgufFile::open(dir.write("ok.gguf", small_gguf())));
  for (uint32_t v : {4u, 99u, 0xFFFFFFFFu}) {
    const std::string path = dir.write("v.gguf", small_gguf(v));
    try {
      engine::GgufFile::open(path);
      ADD_FAILURE() << "GGUF version " << v << " accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("version"), std::string::npos) << e.what();
    }
  }
}

TEST(InputPolicy, GgufCountsAreCheckedAgainstTheFileBeforeAllocating) {
  TempDir dir;
  const auto good = small_gguf();
  // tensor_count at offset 8, kv_count at 16 (uint64): huge counts must fail fast, not allocate.
  for (size_t field : {size_t{8}, size_t{16}}) {
    for (uint64_t count : {uint64_t{1} << 40, ~uint64_t{0}, uint64_t{1} << 62}) {
      auto bytes = good;
      std::memcpy(bytes.data() + field, &count, 8);
      EXPECT_THROW(engine::GgufFile::open(dir.write("c.gguf", bytes)), Error) << field << " " << count;
    }
  }
  for (size_t cut = 0; cut < good.size(); cut += 1 + cut / 6) {
    EXPECT_THROW(engine::GgufFile::open(dir.write("t.gguf", {good.begin(), good.begin() + static_cast<std::ptrdiff_t>(cut)})),
                 Error) << "cut at " << cut;
  }
}

TEST(InputPolicy, Llama2cHeaderSizesThatOverflowAreRejected) {
  TempDir dir;
  // dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len; then a few floats.
  const int32_t cases[][7] = {
      {INT32_MAX, 16, 1, 1, 1, 16, 4},      {8, INT32_MAX, 1, 2, 1, 16, 4},
      {8, 16, INT32_MAX, 2, 1, 16, 4},      {8, 16, 1, 2, 1, INT32_MIN, 4},
      {8, 16, 1, 2, 1, INT32_MAX, 4},       {8, 16, 1, 2, 1, 16, INT32_MAX},
      {65536, 262144, 1024, 2, 1, 1 << 22, 1 << 22},  // every field at its cap: needs petabytes
      {8, 16, 1, 0, 1, 16, 4},              {8, 16, 1, 2, 4, 16, 4},
      {8, 16, 1, 3, 1, 16, 4},              {-8, 16, 1, 2, 1, 16, 4}};
  for (const auto& h : cases) {
    std::vector<uint8_t> bytes(7 * 4 + 4096, 0);
    std::memcpy(bytes.data(), h, sizeof(h));
    EXPECT_THROW(engine::load_llama2c(dir.write("m.bin", bytes)), Error)
        << h[0] << " " << h[1] << " " << h[2] << " " << h[3] << " " << h[4] << " " << h[5] << " " << h[6];
  }
}

TEST(InputPolicy, TokenizerBinLengthsAreChecked) {
  TempDir dir;
  auto tok = [](int32_t max_len, int32_t len0) {
    std::vector<uint8_t> b(4 + 3 * 12, 'a');
    std::memcpy(b.data(), &max_len, 4);
    for (int i = 0; i < 3; ++i) {
      const float score = 0;
      const int32_t len = i == 0 ? len0 : 4;
      std::memcpy(b.data() + 4 + i * 12, &score, 4);
      std::memcpy(b.data() + 8 + i * 12, &len, 4);
      std::memset(b.data() + 12 + i * 12, 'a' + i, 4);  // distinct pieces
    }
    return b;
  };
  EXPECT_NO_THROW(engine::load_llama2c_tokenizer(dir.write("ok.bin", tok(8, 4))));
  for (auto [max_len, len0] : {std::pair{0, 4}, {-1, 4}, {INT32_MAX, 4}, {8, -1}, {8, 9},
                               {8, INT32_MIN}, {1 << 16, 1 << 16}}) {
    EXPECT_THROW(engine::load_llama2c_tokenizer(dir.write("t.bin", tok(max_len, len0))), Error)
        << max_len << " " << len0;
  }
  // A vocabulary size from a model header that the file does not hold.
  EXPECT_THROW(engine::load_llama2c_tokenizer(dir.write("ok.bin", tok(8, 4)), 4), Error);
  EXPECT_THROW(engine::load_llama2c_tokenizer(dir.write("ok.bin", tok(8, 4)), -1), Error);
}

}  // namespace
}  // namespace turbokv
