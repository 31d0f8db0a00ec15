// TurboQuantKVCache: a paged KV cache whose keys and values are TurboQuant codes, with optional
// exact (float32) attention sinks and a recent-token window.
//
// Token order. The cache's tokens, oldest first, are in three regions:
//   sinks      [0, n_sinks())                      the first options.sinks tokens ever appended,
//                                                   exact float32 (or fp16: exact_dtype);
//   compressed [n_sinks(), n_sinks()+compressed_size())  TurboQuant codes in pages;
//   window     [.., size())                         the newest (at most options.window) tokens,
//                                                   exact float32 (or fp16).
// append() fills the sinks first, then the window; when the window would exceed options.window
// tokens its oldest tokens are encoded into the compressed pages (oldest first), so every token
// is encoded exactly once, by the same codec call whatever the append chunking: appending in
// any chunks gives bit-identical codes to one big append.
//
// Page layout (read in place by the fused attention kernels; do not change):
//   compressed page p holds compressed tokens [p*page_tokens, (p+1)*page_tokens) (indices
//   relative to the compressed region). Per page two slabs, keys then values, each head-major:
//   key_codes(p, h) -> [page_tokens][key code_size] bytes, of which the first tokens_in_page(p)
//   records hold data; a record is the key codec's CodeLayout (include/turbokv/codec.hpp), i.e.
//   packed rotated-coordinate indices plus the norm (and for prod the QJL signs and residual
//   norm). value_codes(p, h) likewise with the value codec. Each head's slab starts 64-byte
//   aligned (the slab stride is page_tokens * code_size rounded up to 64); every page but the
//   last is full.
//   sink_keys(h) / sink_values(h) -> [n_sinks()][head_dim] float32 (or fp16, *_f16()), contiguous.
//   window_keys(h) / window_values(h) -> [window_size()][head_dim] float32 (or fp16), contiguous.
//   The window pointers move as tokens leave the window (valid until the next append/trim).
//
// Codecs: keys use options.key_codec (mse or prod) with options.seed; values use TurboQuantMse
// with options.seed + 1 (value_codec must be mse). Bits 1..8, half widths (2.5, 3.5, ...)
// allowed; prod needs key_bits >= 2.
//
// Memory accounting (nbytes(), exact, what the cache holds; scratch, the shared codebooks and
// rotation matrices excluded):
//   nbytes = kv_heads * ( held compressed tokens * (key_code_size() + value_code_size())
//                         + (n_sinks() + window_size()) * head_dim * e * 2   (e: 4, or 2 for f16)
//                         + (centered and compressed_size() > 0 ? head_dim * 4 * 2 : 0) ).
// With mse codecs and fp16 norms, code_size = ceil(head_dim*bits/8) + 2 (per group packing, see
// codec.hpp), so at head_dim 128, 3 bits a token costs 2*(48+2) bytes per head vs 512 at fp16.
// allocated_bytes() adds the unused tail of the last page and window/sink capacity.
//
// trim(n) drops the newest n tokens: first from the window, then compressed tokens (whole
// pages no longer holding a token are freed), then sinks. Tokens already compressed stay
// compressed: after a trim the window holds fewer than options.window tokens and refills from
// the following appends before anything more is compressed. Hence, without a window (and with
// or without sinks), trim then append equals never having appended; with a window it equals it
// only if the trim did not reach into the compressed region.
//
// Input: append() takes float32 ([kv_heads][n_tokens][head_dim]); append_half() takes fp16 or
// bf16. NaN/Inf input is always rejected with turbokv::Error (the codec cannot encode it), as
// is a vector the codec refuses (e.g. a norm beyond fp16 range without fp32_norm); a rejected
// append leaves the cache unchanged.
//
// Thread-safety: one writer, many readers. append(), trim() must not run concurrently with
// anything else on the same cache; const methods (size, fetch, nbytes, the page accessors,
// attend, save_state) may run concurrently with each other. Distinct caches share no mutable
// state (codebooks and rotations are immutable and shared) and may be used from different
// threads freely.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "turbokv/codec.hpp"
#include "turbokv/dense_cache.hpp"
#include "turbokv/kv_cache.hpp"
#include "turbokv/rotation.hpp"

namespace turbokv {

enum class TurboQuantCodecKind { mse, prod };

std::string codec_kind_name(TurboQuantCodecKind kind);            // "mse" / "prod"
TurboQuantCodecKind parse_codec_kind(const std::string& name);    // throws turbokv::Error
// Rotation names: rotation_kind_name / parse_rotation_kind in rotation.hpp.

struct TurboQuantCacheOptions {
  double key_bits = 4, value_bits = 4;  // 1..8 (half widths allowed)
  TurboQuantCodecKind key_codec = TurboQuantCodecKind::mse;
  TurboQuantCodecKind value_codec = TurboQuantCodecKind::mse;  // must be mse
  RotationKind rotation = RotationKind::hadamard;
  uint64_t seed = 0x7475726b6f6b76ULL;  // keys use seed, values seed+1
  bool fp32_norm = false;
  // Rescales each stored norm so the decoded vector has the input's norm (the codebook's
  // centroids shrink a vector); lowers logit KL by a third on kjv-llama-3M at 2-4 bits, so it
  // is the default (docs/history/benchmarks-notebook.md, "Quality: turbokv eval").
  bool norm_correction = true;
  size_t window = 0;  // the newest `window` tokens kept exact (exact_dtype)
  size_t sinks = 0;   // the first `sinks` tokens kept exact (exact_dtype)
  // Exact centering (needs sinks >= 1): once the sinks are filled, their per-head mean key and
  // mean value are kept, and every compressed key and value is stored minus that mean, so the
  // codec sees only what differs from the common component. Attention stays exact: a fixed
  // vector added to every key moves all scores by the same q.mean_k (the fused path adds it to
  // the compressed tokens' scores), and the value mean comes back weighted by the compressed
  // tokens' softmax mass. fetch() adds the means back.
  bool center = false;
  size_t page_tokens = 256;
  // Storage of the exact regions (sinks and window). f16: as the dense cache stores tokens
  // (half the bytes; at 1K-token conversations an f32 window of 32 is 12% of a 4-bit cache);
  // then every appended key and value is first rounded to fp16 (finite values beyond its range
  // are rejected), so a token is the same whether it is compressed on arrival or after passing
  // through the window, and appending in any chunks still gives bit-identical caches.
  DenseDtype exact_dtype = DenseDtype::f32;
  // attend() multiplies the codes in int8 arithmetic (AttentionArithmetic::int8) unless a call
  // asks otherwise. Saved with the state (metadata attention=int8), so a loaded cache attends as
  // the saved one did.
  bool int8_attention = false;
};

class TurboQuantKVCache : public KVCache {
 public:
  // Throws turbokv::Error on bad shapes (1 <= kv_heads <= 4096, 2 <= head_dim <= 8192, and what
  // the rotation kind needs), bits, value_codec prod, page_tokens not in [1, 65536], or
  // window/sinks > 2^24.
  TurboQuantKVCache(int kv_heads, int head_dim, const TurboQuantCacheOptions& options);
  ~TurboQuantKVCache() override;
  TurboQuantKVCache(const TurboQuantKVCache&) = delete;
  TurboQuantKVCache& operator=(const TurboQuantKVCache&) = delete;

  std::string class_name() const override { return "turboquant"; }
  int kv_heads() const override { return kv_heads_; }
  int head_dim() const override { return head_dim_; }
  size_t size() const override { return n_sinks_ + compressed_size_ + window_size_; }

  void append(std::span<const float> keys, std::span<const float> values,
              size_t n_tokens) override;
  void fetch(std::span<float> keys, std::span<float> values) const override;
  size_t trim(size_t n) override;
  size_t nbytes() const override;
  CacheState save_state() const override;
  // A sliding-window ring frees whole compressed pages (sinks and the exact window stay); the
  // first position held is then that of the first compressed page still held.
  size_t first_held() const override { return first_held_; }
  size_t drop_before(size_t position) override;

  // Rebuilds a cache from save_state() output bit-exactly; verifies the codebook and rotation
  // checksums so a file decodes identically; throws turbokv::Error on any inconsistency.
  static std::unique_ptr<TurboQuantKVCache> from_state(const CacheState& state);

  void append_half(std::span<const uint16_t> keys, std::span<const uint16_t> values,
                   size_t n_tokens, HalfFormat format);

  const TurboQuantCacheOptions& options() const { return options_; }
  size_t n_sinks() const { return n_sinks_; }
  size_t compressed_size() const { return compressed_size_; }
  size_t window_size() const { return window_size_; }
  // float32 exact regions (exact_dtype f32 only; throws otherwise).
  const float* sink_keys(int head) const;
  const float* sink_values(int head) const;
  const float* window_keys(int head) const;
  const float* window_values(int head) const;
  // fp16 exact regions (exact_dtype f16 only; throws otherwise), same layout.
  const uint16_t* sink_keys_f16(int head) const;
  const uint16_t* sink_values_f16(int head) const;
  const uint16_t* window_keys_f16(int head) const;
  const uint16_t* window_values_f16(int head) const;
  bool exact_f16() const { return options_.exact_dtype == DenseDtype::f16; }

  // Compressed pages, including those drop_before() freed (null: key_codes() throws for them).
  size_t num_pages() const { return pages_.size(); }
  size_t page_tokens() const { return options_.page_tokens; }
  size_t tokens_in_page(size_t page) const;
  const uint8_t* key_codes(size_t page, int head) const;
  const uint8_t* value_codes(size_t page, int head) const;
  // Starts loading what key_codes() / value_codes() of `page` read first (any index; a no-op
  // past the end or for a freed page). Attention calls it a page ahead: at long contexts each
  // page's record had left every cache, and the block loop stalled on it.
  void prefetch_page(size_t page) const;
  const TurboQuantMse* key_mse() const { return key_mse_.get(); }
  const TurboQuantProd* key_prod() const { return key_prod_.get(); }
  const TurboQuantMse& value_codec() const { return *value_mse_; }
  size_t key_code_size() const { return key_code_size_; }
  size_t value_code_size() const { return value_code_size_; }
  // The per-head means subtracted from compressed keys / values ([head_dim] floats), or nullptr
  // without centering. Zero until the sinks are filled (no token is compressed before that).
  const float* key_center(int head) const;
  const float* value_center(int head) const;

  size_t allocated_bytes() const;

 private:
  struct Page;
  float* sink_ptr(bool value, int head) const;
  float* window_base(bool value, int head) const;
  uint16_t* sink_ptr16(bool value, int head) const;
  uint16_t* window_base16(bool value, int head) const;
  // Rows [slot, slot + count) of one head's sinks (window = false) or window buffer (slot
  // counted from the buffer's start) to or from float, whatever the storage type.
  void write_exact(bool window, bool value, int head, size_t slot, const float* src, size_t count);
  void read_exact(bool window, bool value, int head, size_t slot, size_t count, float* dst) const;
  uint8_t* codes_ptr(size_t page, int head, bool value) const;
  size_t head_stride_bytes(bool value) const;
  // Encodes `count` tokens (per head h: keys + h*stride .. contiguous) into the pages.
  void compress(const float* keys, const float* values, size_t head_stride, size_t count);
  void push_window(const float* keys, const float* values, size_t head_stride, size_t count);
  void evict_window(size_t count);
  // Allocates compressed page `page` (appended, or a freed one that a trim and append refill).
  void ensure_page(size_t page);
  // The page table's length (new entries null: pages not held).
  void resize_pages(size_t n);
  // Compressed tokens no longer held (in the freed pages at the front).
  size_t dropped_compressed() const;
  void append_checked(const float* keys, const float* values, size_t n_tokens);
  // Encodes n rows (keys or values of one head) into out, minus the head's mean if centering.
  void encode_rows(bool value, int head, const float* x, size_t n, uint8_t* out) const;
  void update_centers();

  int kv_heads_;
  int head_dim_;
  TurboQuantCacheOptions options_;
  std::unique_ptr<TurboQuantMse> key_mse_;
  std::unique_ptr<TurboQuantProd> key_prod_;
  std::unique_ptr<TurboQuantMse> value_mse_;
  size_t key_code_size_ = 0;
  size_t value_code_size_ = 0;

  size_t n_sinks_ = 0;
  size_t compressed_size_ = 0;
  size_t window_size_ = 0;
  size_t first_held_ = 0;       // drop_before(): positions [n_sinks_, first_held_) are freed
  size_t window_start_ = 0;     // first window token's slot in the window buffers
  size_t window_capacity_ = 0;  // slots per head in the window buffers (grown on demand)
  std::vector<float> sink_buf_[2];    // [keys|values] -> [kv_heads][options.sinks][head_dim]
  std::vector<float> window_buf_[2];  // [keys|values] -> [kv_heads][window_capacity_][head_dim]
  std::vector<uint16_t> sink16_[2], window16_[2];  // the same, fp16, when exact_dtype is f16
  std::vector<float> center_buf_[2];  // [keys|values] -> [kv_heads][head_dim] (center only)
  std::vector<std::unique_ptr<Page>> pages_;
};

// A TurboQuant cache holding the dense cache's tokens (as fetch() returns them), built with
// the same codec calls as appending them directly: the codes are bit-identical.
std::unique_ptr<TurboQuantKVCache> to_turboquant(const DenseKVCache& dense,
                                                 const TurboQuantCacheOptions& options);
// Any cache class, through fetch().
std::unique_ptr<TurboQuantKVCache> to_turboquant(const KVCache& cache,
                                                 const TurboQuantCacheOptions& options);

}  // namespace turbokv
