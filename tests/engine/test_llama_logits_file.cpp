// llama-perplexity's per-token distribution file (engine/eval/llama_logits_file.hpp), as
// `turbokv eval --logits-out` writes it: a record decodes to the log-softmax within half a
// quantization step, the 16-nat floor and the padding are llama.cpp's, and the file's header,
// tokens and record count are the layout llama-perplexity --kl-divergence reads.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include <unistd.h>

#include "engine/eval/llama_logits_file.hpp"
#include "turbokv/error.hpp"

using namespace turbokv;
using namespace turbokv::engine;

namespace {

std::vector<double> log_softmax(const std::vector<float>& logits) {
  double m = logits[0];
  for (const float l : logits) m = std::max(m, static_cast<double>(l));
  double s = 0;
  for (const float l : logits) s += std::exp(l - m);
  std::vector<double> out;
  for (const float l : logits) out.push_back(l - m - std::log(s));
  return out;
}

float float_at(const std::vector<uint16_t>& record, size_t index) {
  float v;
  std::memcpy(&v, record.data() + index, sizeof v);
  return v;
}

}  // namespace

TEST(LlamaLogitsFile, RecordSizeIsLlamaCppsPaddedLength) {
  EXPECT_EQ(llama_logits_record_size(512), 516u);
  EXPECT_EQ(llama_logits_record_size(511), 516u);  // odd vocabularies pad to an even count
  EXPECT_EQ(llama_logits_record_size(1), 6u);
}

TEST(LlamaLogitsFile, RecordDecodesToLogSoftmaxWithinHalfAStep) {
  std::mt19937 rng(27);
  std::normal_distribution<float> normal(0.0f, 5.0f);
  for (const int vocab : {7, 512, 1001}) {
    std::vector<float> logits(static_cast<size_t>(vocab));
    for (auto& l : logits) l = normal(rng);
    const auto record = encode_llama_logits_record(logits);
    ASSERT_EQ(record.size(), llama_logits_record_size(vocab));
    const auto exact = log_softmax(logits);
    const auto decoded = decode_llama_logits_record(record, vocab);
    const double best = *std::max_element(exact.begin(), exact.end());
    const double scale = float_at(record, 0), floor = float_at(record, 2);
    EXPECT_GT(scale, 0.0);
    EXPECT_LE(scale, 16.0 / 65535.0 * 1.0001);
    EXPECT_NEAR(floor, std::max(*std::min_element(exact.begin(), exact.end()), best - 16.0), 1e-4);
    size_t floored = 0;
    for (size_t i = 0; i < exact.size(); ++i) {
      if (exact[i] > best - 16.0) {
        EXPECT_NEAR(decoded[i], exact[i], scale / 2 + 1e-4) << vocab << " token " << i;
      } else {
        EXPECT_DOUBLE_EQ(decoded[i], floor);  // 16 nats or more below the best: the floor
        ++floored;
      }
    }
    if (vocab > 100) {
      EXPECT_GT(floored, 0u);  // std 5 logits: the floor is reached
    }
    for (size_t i = 4 + static_cast<size_t>(vocab); i < record.size(); ++i) EXPECT_EQ(record[i], 0);
  }
}

TEST(LlamaLogitsFile, FlatLogitsGiveZeroScaleAndUniformLogProbs) {
  const std::vector<float> flat(10, 3.0f);
  const auto record = encode_llama_logits_record(flat);
  EXPECT_EQ(float_at(record, 0), 0.0f);
  for (const double lp : decode_llama_logits_record(record, 10)) EXPECT_NEAR(lp, -std::log(10.0), 1e-6);
  EXPECT_THROW(decode_llama_logits_record(record, 12), Error);
  EXPECT_THROW(encode_llama_logits_record({}), Error);
}

TEST(LlamaLogitsFile, WriterLaysOutHeaderTokensAndOneRecordPerScoredPosition) {
  const auto path = std::filesystem::temp_directory_path() /
                    ("turbokv_llama_logits_" + std::to_string(::getpid()) + ".kld");
  const int n_ctx = 8, vocab = 5;
  std::vector<int> tokens(19);  // two chunks of 8, three tokens of a partial chunk not written
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int>(i % 5);
  const size_t scored = 2 * (n_ctx - 1 - n_ctx / 2);  // 3 per chunk
  {
    LlamaLogitsWriter w(path.string(), n_ctx, vocab, tokens);
    for (size_t i = 0; i < scored; ++i) w.add(std::vector<float>{0.0f, 1.0f, 2.0f, static_cast<float>(i), -1.0f});
    EXPECT_THROW(w.add(std::vector<float>(vocab, 0.0f)), Error);  // one too many
    EXPECT_THROW(w.add(std::vector<float>(vocab + 1, 0.0f)), Error);
    w.finish();
  }
  std::ifstream in(path, std::ios::binary);
  const std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t record_bytes = 2 * llama_logits_record_size(vocab);
  ASSERT_EQ(bytes.size(), 8 + 12 + 16 * 4 + scored * record_bytes);
  EXPECT_EQ(std::string(bytes.data(), 8), "_logits_");
  int32_t header[3];
  std::memcpy(header, bytes.data() + 8, sizeof header);
  EXPECT_EQ(header[0], n_ctx);
  EXPECT_EQ(header[1], vocab);
  EXPECT_EQ(header[2], 2);
  for (size_t i = 0; i < 16; ++i) {
    int32_t t;
    std::memcpy(&t, bytes.data() + 20 + 4 * i, 4);
    EXPECT_EQ(t, tokens[i]);
  }
  // The last record is position 5's logits: token 3 (logit 5) the most likely.
  std::vector<uint16_t> last(llama_logits_record_size(vocab));
  std::memcpy(last.data(), bytes.data() + bytes.size() - record_bytes, record_bytes);
  const auto lp = decode_llama_logits_record(last, vocab);
  EXPECT_EQ(std::max_element(lp.begin(), lp.end()) - lp.begin(), 3);
  std::filesystem::remove(path);

  LlamaLogitsWriter short_file(path.string(), n_ctx, vocab, tokens);
  short_file.add(std::vector<float>(vocab, 0.0f));
  EXPECT_THROW(short_file.finish(), Error);  // 1 of 6 positions
  std::filesystem::remove(path);
  EXPECT_THROW(LlamaLogitsWriter("/nonexistent-dir/x.kld", n_ctx, vocab, tokens), Error);
}
