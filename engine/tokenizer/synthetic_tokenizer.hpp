// A tokenizer for the random-weight synthetic models (engine/model/synthetic_model.hpp), which come
// without a vocabulary: bytes are ids 3..258 (BOS 1, EOS 2), every other id decodes to " t<id>".
// Enough to serve and benchmark a synthetic model end to end; its text means nothing.
#pragma once

#include <string>
#include <vector>

#include "engine/tokenizer/tokenizer.hpp"
#include "turbokv/error.hpp"

namespace turbokv::engine {

class SyntheticTokenizer : public Tokenizer {
 public:
  explicit SyntheticTokenizer(int vocab_size) : vocab_(vocab_size) {
    if (vocab_size < 259) throw Error("SyntheticTokenizer: the vocabulary needs at least 259 ids");
  }
  std::vector<int> encode(std::string_view text, bool bos, bool eos = false) const override {
    std::vector<int> ids;
    if (bos) ids.push_back(1);
    for (const char c : text) ids.push_back(3 + static_cast<unsigned char>(c));
    if (eos) ids.push_back(2);
    return ids;
  }
  std::string decode(int id) const override {
    if (id < 0 || id >= vocab_) throw Error("SyntheticTokenizer: id out of range");
    if (id < 3) return "";
    if (id < 259) return std::string(1, static_cast<char>(id - 3));
    return " t" + std::to_string(id);
  }
  int vocab_size() const override { return vocab_; }
  int bos_id() const override { return 1; }
  int eos_id() const override { return 2; }

 private:
  int vocab_;
};

}  // namespace turbokv::engine
