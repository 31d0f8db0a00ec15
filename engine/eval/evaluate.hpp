// Teacher-forced evaluation of KV-cache configurations against the dense fp32 cache
// (`turbokv eval`, issue 6).
//
// Text preparation (as the KJV model was trained): the text is tokenized line by line, each line
// with the tokenizer's dummy prefix and without BOS, followed by the newline as its own token
// (byte token <0x0A>, id 13 in tok512); an empty line is the newline token alone; lines that are
// exactly "%" (the separators of fortune files) are dropped. The token stream is cut into
// windows of ctx positions, each BOS + up to ctx-1 text tokens, so every text token is predicted
// exactly once, from the positions before it in its window.
//
// llama-perplexity's protocol instead (WindowProtocol::llama_perplexity, for comparing with
// llama.cpp on the same token ids): the stream (which then starts with BOS itself) is cut into
// chunks of exactly ctx tokens, a partial last chunk dropped; each chunk's first token is replaced
// by BOS; only the second half is scored: position i predicts token i+1 for ctx/2 <= i < ctx-1,
// ctx-1-ctx/2 predictions per chunk (llama.cpp tools/perplexity, perplexity()).
//
// Per window, the model runs once with a DenseKVCache of f32 (the reference) and once per
// configuration; every position's logits are compared with the reference's. The forward pass
// appends a chunk's keys/values before attending, so each position attends to the stored
// (quantized) keys/values of all earlier positions and its own. Caches whose stored form of a
// token depends on when it was appended (a window of exact recent tokens, KIVI's fp16 residual
// and its per-channel key groups) are run one token per step, exactly as decode sees them;
// the others in chunks, which gives them the same stored keys/values as decode.
#pragma once

#include <cstddef>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/model/model.hpp"
#include "engine/runtime/sampler.hpp"
#include "engine/tokenizer/tokenizer.hpp"
#include "turbokv/cache_config.hpp"
#include "turbokv/thread_pool.hpp"

namespace turbokv::engine {

// ---- text preparation ------------------------------------------------------------------------

// The id of the newline token: the byte token <0x0A> of a SentencePiece vocabulary, else the
// single token the tokenizer gives "\n". Throws turbokv::Error if there is none.
int newline_token(const Tokenizer& tokenizer);

// Line by line as described above. A final line without '\n' still gets the newline token;
// '\r' before '\n' is dropped.
std::vector<int> tokenize_lines(const Tokenizer& tokenizer, std::string_view text,
                                bool drop_percent_lines = true);

// Windows of at most ctx positions (ctx >= 2), each BOS followed by the next ctx-1 text tokens.
std::vector<std::vector<int>> make_windows(std::span<const int> tokens, int ctx, int bos_id);

// How the token stream becomes windows and which positions are scored (see the top).
enum class WindowProtocol {
  fresh,             // make_windows; every position but a window's last is scored
  llama_perplexity,  // make_llama_perplexity_windows; positions ctx/2 .. ctx-2 are scored
};
// Parses "fresh" / "llama-perplexity"; throws turbokv::Error otherwise.
WindowProtocol parse_window_protocol(std::string_view name);

// llama-perplexity's chunks: tokens.size() / ctx chunks of ctx tokens, each with its first token
// replaced by bos_id (kept when bos_id < 0, as llama.cpp does for a vocabulary without BOS).
// Throws turbokv::Error below 2 * ctx tokens, as llama-perplexity refuses them.
std::vector<std::vector<int>> make_llama_perplexity_windows(std::span<const int> tokens, int ctx, int bos_id);

// ---- metrics ---------------------------------------------------------------------------------

// Cosine similarity of two vectors (double accumulation); 1 if both are zero, 0 if one is.
double logit_cosine(std::span<const float> a, std::span<const float> b);
// argmax (the first index on ties) is engine/runtime/sampler.hpp's.
// -log softmax(logits)[target] in nats.
double token_nll(std::span<const float> logits, int target);
// KL(softmax(p) || softmax(q)) in nats; >= 0, 0 for identical logits.
double kl_divergence(std::span<const float> p_logits, std::span<const float> q_logits);
// exp(mean of the losses); 1 for no losses.
double perplexity(std::span<const double> nll);

// Metrics of one configuration over all compared positions.
struct EvalMetrics {
  size_t positions = 0;
  double cosine_mean = 0, cosine_min = 0;
  double top1_agreement = 0;   // fraction of positions whose argmax equals the reference's
  double ppl = 0;              // the configuration's perplexity on the targets
  double ppl_reference = 0;    // the dense fp32 cache's, on the same targets
  double delta_ppl = 0;        // ppl - ppl_reference
  double kl = 0;               // mean KL(reference || configuration), nats
  double kl_max = 0;           // its largest value at one position
};

class MetricAccumulator {
 public:
  // One position: the reference's and the configuration's logits and the token that follows.
  void add(std::span<const float> reference, std::span<const float> logits, int target);
  EvalMetrics result() const;

 private:
  size_t n_ = 0, top1_ = 0;
  double cos_sum_ = 0, cos_min_ = 2, kl_sum_ = 0, kl_max_ = 0, nll_sum_ = 0, nll_ref_sum_ = 0;
};

// ---- the evaluation --------------------------------------------------------------------------

struct EvalRow {
  std::string config;
  std::string description;
  bool applicable = true;
  std::string problem;          // why not applicable
  size_t kv_bytes = 0;          // sum over windows of every layer's nbytes() after the window
  size_t stored_values = 0;     // sum over windows of 2 * tokens * kv_heads * head_dim * layers
  double bits_per_value = 0;    // 8 * kv_bytes / stored_values
  double compression_vs_fp16 = 0;
  bool decode_steps = false;    // run one token per step (see above)
  EvalMetrics metrics;
};

struct EvalResult {
  std::string model;
  size_t tokens = 0;    // text tokens predicted (= compared positions)
  size_t windows = 0;
  int ctx = 0;
  WindowProtocol protocol = WindowProtocol::fresh;
  double ppl_reference = 0;
  std::vector<EvalRow> rows;
};

struct EvalOptions {
  int ctx = 0;              // 0: the model's seq_len
  size_t max_tokens = 0;    // 0: all text tokens
  int max_chunk = 64;       // prefill chunk of configurations that do not need decode steps
  WindowProtocol protocol = WindowProtocol::fresh;
  // Called with the dense fp32 reference's logits at every scored position, in order (e.g. to
  // write llama-perplexity's --kl-divergence-base file, llama_logits_file.hpp).
  std::function<void(std::span<const float> logits)> reference_logits;
  // Called after each (window, configuration) run: done and total runs, the config's name.
  std::function<void(size_t done, size_t total, const std::string& config)> progress;
};

// True when a configuration's stored keys/values depend on the append pattern (see above).
bool needs_decode_steps(const KVConfigSpec& spec);

// Evaluates `configs` on the text tokens (already prepared by tokenize_lines). Not-applicable
// configurations get a row with applicable = false. Throws turbokv::Error on bad options.
EvalResult evaluate_kv_configs(const Model& model, std::span<const int> text_tokens,
                               std::span<const KVConfigSpec> configs, const EvalOptions& options,
                               ThreadPool& pool);

// The table (config | bits/value | compression | logit cos | min cos | top-1 | ppl | delta ppl |
// KL) and the --json object of issue 6.
std::string format_eval_table(const EvalResult& result);
std::string format_eval_json(const EvalResult& result);

}  // namespace turbokv::engine
