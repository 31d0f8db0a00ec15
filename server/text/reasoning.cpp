#include "server/text/reasoning.hpp"

namespace turbokv::server {

namespace {

constexpr std::string_view kOpen = "<think>";
constexpr std::string_view kClose = "</think>";

bool is_space(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

// The length of the longest suffix of s that is a proper prefix of tag (may still become it).
size_t partial_tag(std::string_view s, std::string_view tag) {
  for (size_t n = std::min(s.size(), tag.size() - 1); n > 0; --n) {
    if (s.substr(s.size() - n) == tag.substr(0, n)) return n;
  }
  return 0;
}

}  // namespace

ReplyParts ReasoningSplitter::feed(std::string_view text) {
  held_ += text;
  ReplyParts out;
  while (true) {
    switch (state_) {
      case State::start: {
        size_t k = 0;
        while (k < held_.size() && is_space(held_[k])) ++k;
        const std::string_view rest = std::string_view(held_).substr(k);
        if (rest.size() >= kOpen.size() && rest.substr(0, kOpen.size()) == kOpen) {
          held_.erase(0, k + kOpen.size());
          state_ = State::reasoning;
          continue;
        }
        if (rest.size() < kOpen.size() && kOpen.substr(0, rest.size()) == rest) return out;  // undecided
        state_ = State::content;
        continue;
      }
      case State::reasoning: {
        const size_t close = held_.find(kClose);
        if (close == std::string::npos) {
          const size_t keep = partial_tag(held_, kClose);
          out.reasoning += held_.substr(0, held_.size() - keep);
          held_.erase(0, held_.size() - keep);
          return out;
        }
        out.reasoning += held_.substr(0, close);
        held_.erase(0, close + kClose.size());
        state_ = State::after_reasoning;
        continue;
      }
      case State::after_reasoning: {
        size_t k = 0;
        while (k < held_.size() && is_space(held_[k])) ++k;
        held_.erase(0, k);
        if (held_.empty()) return out;
        state_ = State::content;
        continue;
      }
      case State::content:
        out.content += held_;
        held_.clear();
        return out;
    }
  }
}

ReplyParts ReasoningSplitter::finish() {
  ReplyParts out;
  if (state_ == State::reasoning) {
    out.reasoning = std::move(held_);
  } else if (state_ == State::start) {
    out.content = std::move(held_);  // only whitespace or a cut "<thi": not reasoning
  }
  held_.clear();
  return out;
}

ReplyParts split_reasoning(std::string_view reply, bool starts_in_reasoning) {
  ReasoningSplitter s(starts_in_reasoning);
  ReplyParts out = s.feed(reply);
  ReplyParts tail = s.finish();
  out.reasoning += tail.reasoning;
  out.content += tail.content;
  return out;
}

bool prompt_opens_reasoning(std::string_view prompt) {
  const size_t open = prompt.rfind(kOpen);
  if (open == std::string_view::npos) return false;
  return prompt.find(kClose, open) == std::string_view::npos;
}

}  // namespace turbokv::server
