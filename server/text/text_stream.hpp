// TextStream: turns a sequence's sampled tokens into the text deltas a client sees, holding
// back what is not final yet: the end of a possible stop string (so a stop string is never
// sent, even split over tokens) and an incomplete UTF-8 character (a byte token mid-character).
#pragma once

#include <string>
#include <vector>

#include "engine/tokenizer/tokenizer.hpp"

namespace turbokv::server {

class TextStream {
 public:
  TextStream(const engine::Tokenizer& tokenizer, int prev_token, std::vector<std::string> stop);

  // Adds a token's text; returns the text that is now final. Sets stopped() when a stop string
  // appears (the text from it on is dropped).
  std::string add(int token);
  // The rest at the end of generation (an incomplete UTF-8 tail becomes U+FFFD).
  std::string flush();
  bool stopped() const { return stopped_; }

 private:
  const engine::Tokenizer& tokenizer_;
  int prev_;
  std::vector<std::string> stop_;
  std::string held_;
  bool stopped_ = false;
};

// Length of the longest prefix of `text` that ends on a whole UTF-8 character (an invalid
// byte counts as whole: it is sent as it is and the JSON writer replaces it).
size_t complete_utf8_prefix(const std::string& text);

}  // namespace turbokv::server
