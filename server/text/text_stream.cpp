#include "server/text/text_stream.hpp"

#include <algorithm>

namespace turbokv::server {

size_t complete_utf8_prefix(const std::string& text) {
  // Look back at most 3 bytes for the lead byte of an unfinished character.
  const size_t n = text.size();
  for (size_t back = 1; back <= std::min<size_t>(n, 4); ++back) {
    const auto c = static_cast<unsigned char>(text[n - back]);
    if ((c & 0xC0) == 0x80) continue;  // continuation byte: keep looking for the lead
    size_t need = 1;
    if ((c & 0xE0) == 0xC0) need = 2;
    else if ((c & 0xF0) == 0xE0) need = 3;
    else if ((c & 0xF8) == 0xF0) need = 4;
    return back < need ? n - back : n;
  }
  return n;
}

TextStream::TextStream(const engine::Tokenizer& tokenizer, int prev_token, std::vector<std::string> stop)
    : tokenizer_(tokenizer), prev_(prev_token), stop_(std::move(stop)) {
  stop_.erase(std::remove(stop_.begin(), stop_.end(), std::string()), stop_.end());
}

std::string TextStream::add(int token) {
  if (stopped_) return "";
  held_ += tokenizer_.decode(prev_, token);
  prev_ = token;
  // A stop string anywhere in the held text ends the generation there.
  size_t cut = std::string::npos;
  for (const auto& s : stop_) cut = std::min(cut, held_.find(s));
  if (cut != std::string::npos) {
    std::string out = held_.substr(0, cut);
    held_.clear();
    stopped_ = true;
    return out;
  }
  // Hold back the longest tail that could still become a stop string.
  size_t keep = 0;
  for (const auto& s : stop_) {
    for (size_t len = std::min(s.size() - 1, held_.size()); len > keep; --len) {
      if (held_.compare(held_.size() - len, len, s, 0, len) == 0) {
        keep = len;
        break;
      }
    }
  }
  const size_t ready = complete_utf8_prefix(held_.substr(0, held_.size() - keep));
  std::string out = held_.substr(0, ready);
  held_.erase(0, ready);
  return out;
}

std::string TextStream::flush() {
  std::string out = std::move(held_);
  held_.clear();
  const size_t whole = complete_utf8_prefix(out);
  if (whole != out.size()) out = out.substr(0, whole) + "\xEF\xBF\xBD";
  return out;
}

}  // namespace turbokv::server
