// A chat reply in OpenAI's shapes: the model's text split into reasoning_content (a thinking
// model's <think> part, server/text/reasoning.hpp), content, and tool_calls (read in the chat
// template's format, server/text/tool_calls.hpp), whole (message) or streamed (deltas).
// Streamed deltas add up to the whole message: the same splitters run on both.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "server/text/reasoning.hpp"
#include "server/text/tool_calls.hpp"

namespace turbokv::server {

struct ChatReplyOptions {
  bool split_reasoning = false;         // the template thinks: <think> ... </think> is reasoning_content
  bool prompt_opens_reasoning = false;  // the prompt ends inside <think>
  ToolCallFormat tool_format = ToolCallFormat::none;  // none: calls are not read (no tools, tool_choice "none")
  bool parallel_tool_calls = true;
};

// The message of a whole reply: {role, content, [reasoning_content], [tool_calls: [{id, type,
// function: {name, arguments}}]]}; with calls, content is the text around them or null.
// `called`: whether there were calls.
nlohmann::json assistant_message(const std::string& text, const ChatReplyOptions& options, bool& called);

// OpenAI's finish_reason: "tool_calls" for a reply with calls that the model ended (not one
// cut by max_tokens, which stays "length").
std::string chat_finish_reason(const std::string& reason, bool called);

// A streamed reply: each feed returns the delta now certain ({} when all is held back: a
// possible tag or call), with reasoning_content, content and tool_calls (each complete call
// once: {index, id, type, function: {name, arguments}}) as present.
class ChatReplyStream {
 public:
  explicit ChatReplyStream(const ChatReplyOptions& options);
  // Whether the reply needs splitting at all (else its text is the content as it comes).
  bool splits() const { return reasoning_.has_value() || tools_.has_value(); }
  nlohmann::json feed(std::string_view text);
  nlohmann::json finish();  // what was held back
  bool called() const { return calls_sent_ > 0; }

 private:
  nlohmann::json delta(ReplyParts parts, bool end);
  std::optional<ReasoningSplitter> reasoning_;
  std::optional<ToolCallParser> tools_;
  size_t calls_sent_ = 0;
};

// OpenAI's call ids: "call_" and 24 random letters and digits.
std::string new_tool_call_id();

}  // namespace turbokv::server
