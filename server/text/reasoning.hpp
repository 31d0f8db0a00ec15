// A reasoning model's reply split as llama-server and vLLM return it: the part between <think>
// and </think> is reasoning_content, the rest content. Streamed text is split as it comes,
// holding back only what could still be the start of a tag.
//
// Rules (the same for whole and streamed replies):
// - a reply whose first non-whitespace text is "<think>" reasons until "</think>"; a reply to a
//   prompt that ends inside an open <think> (a template that opens it, as DeepSeek R1's) reasons
//   from its first byte;
// - reasoning is the exact text between the tags; content is what follows "</think>" with its
//   leading whitespace dropped; a reply that never closes the tag (cut by max_tokens) is all
//   reasoning;
// - any other reply is all content.
#pragma once

#include <string>
#include <string_view>

namespace turbokv::server {

struct ReplyParts {
  std::string reasoning, content;
};

class ReasoningSplitter {
 public:
  explicit ReasoningSplitter(bool starts_in_reasoning) : state_(starts_in_reasoning ? State::reasoning : State::start) {}
  // The parts of `text` (appended to what came before) that are now certain.
  ReplyParts feed(std::string_view text);
  // The end of the reply: what was held back.
  ReplyParts finish();

 private:
  enum class State { start, reasoning, after_reasoning, content };
  State state_;
  std::string held_;
};

ReplyParts split_reasoning(std::string_view reply, bool starts_in_reasoning);

// Whether a rendered prompt leaves a <think> open (its last "<think>" is not closed).
bool prompt_opens_reasoning(std::string_view prompt);

}  // namespace turbokv::server
