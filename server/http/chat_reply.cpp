#include "server/http/chat_reply.hpp"

#include <random>

namespace turbokv::server {

using nlohmann::json;

namespace {

// Calls in OpenAI's form; `first_index`: the first one's index in the reply (streams number
// their calls; a message's carry no index).
json tool_calls_json(std::vector<ToolCall>& calls, std::optional<size_t> first_index) {
  json out = json::array();
  for (size_t k = 0; k < calls.size(); ++k) {
    json call = {{"id", new_tool_call_id()}, {"type", "function"},
                 {"function", {{"name", std::move(calls[k].name)}, {"arguments", std::move(calls[k].arguments)}}}};
    if (first_index) call["index"] = *first_index + k;
    out.push_back(std::move(call));
  }
  return out;
}

}  // namespace

std::string new_tool_call_id() {
  static constexpr char kAlphabet[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  thread_local std::mt19937_64 rng{std::random_device{}()};
  std::string id = "call_";
  for (int i = 0; i < 24; ++i) id += kAlphabet[rng() % (sizeof kAlphabet - 1)];
  return id;
}

std::string chat_finish_reason(const std::string& reason, bool called) {
  return called && reason == "stop" ? "tool_calls" : reason;
}

json assistant_message(const std::string& text, const ChatReplyOptions& options, bool& called) {
  json message = {{"role", "assistant"}, {"content", text}};
  ReplyParts parts{"", text};
  if (options.split_reasoning) {
    parts = split_reasoning(text, options.prompt_opens_reasoning);
    message["content"] = parts.content;
    if (!parts.reasoning.empty()) message["reasoning_content"] = parts.reasoning;
  }
  called = false;
  if (options.tool_format == ToolCallFormat::none) return message;
  ToolCallParts calls = parse_tool_calls(parts.content, options.tool_format, options.parallel_tool_calls);
  called = !calls.calls.empty();
  if (called) {
    message["content"] = calls.content.empty() ? json() : json(calls.content);
    message["tool_calls"] = tool_calls_json(calls.calls, std::nullopt);
  }
  return message;
}

ChatReplyStream::ChatReplyStream(const ChatReplyOptions& options) {
  if (options.split_reasoning) reasoning_.emplace(options.prompt_opens_reasoning);
  if (options.tool_format != ToolCallFormat::none) tools_.emplace(options.tool_format, options.parallel_tool_calls);
}

json ChatReplyStream::feed(std::string_view text) {
  return delta(reasoning_ ? reasoning_->feed(text) : ReplyParts{"", std::string(text)}, false);
}

json ChatReplyStream::finish() { return delta(reasoning_ ? reasoning_->finish() : ReplyParts{}, true); }

json ChatReplyStream::delta(ReplyParts parts, bool end) {
  json out = json::object();
  if (!parts.reasoning.empty()) out["reasoning_content"] = std::move(parts.reasoning);
  if (tools_) {
    ToolCallParts calls = tools_->feed(parts.content);
    if (end) {
      ToolCallParts tail = tools_->finish();
      calls.content += tail.content;
      for (auto& call : tail.calls) calls.calls.push_back(std::move(call));
    }
    parts.content = std::move(calls.content);
    if (!calls.calls.empty()) {
      out["tool_calls"] = tool_calls_json(calls.calls, calls_sent_);
      calls_sent_ += calls.calls.size();
    }
  }
  if (!parts.content.empty()) out["content"] = std::move(parts.content);
  return out;
}

}  // namespace turbokv::server
