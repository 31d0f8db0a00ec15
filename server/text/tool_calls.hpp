// Tool calls (OpenAI function calling) read out of a model's reply, in the format its chat
// template teaches it (the format is decided once, from the template's text, at start-up):
//
//   hermes       Hermes / Qwen 2.5 / Qwen 3: <tool_call>{"name": ..., "arguments": {...}}</tool_call>,
//                one block per call, several per reply, text around them;
//   llama3_json  Llama 3.1 / 3.2: the whole reply (after an optional <|python_tag|>) is
//                {"name": ..., "parameters": {...}} ("arguments" is read too), or several such
//                objects separated by ';'.
//
// Rules (the same for whole and streamed replies; the whole parse is the streamed one fed once):
// - a call whose JSON does not parse, or lacks a string "name" or an object "arguments", stays
//   in the content as the model wrote it (tags included): a malformed call is text, never lost;
// - a hermes block never closed (cut by max_tokens) stays content;
// - content is the text outside the calls, with the whitespace that touches a call dropped; a
//   reply without calls is returned unchanged; with `parallel` false only the first call is read
//   and later blocks stay content;
// - a llama3_json reply is a call only if all of it is: anything else is content, unchanged.
// Streamed, a hermes call is one event when its closing tag arrives; the raw <tool_call> text
// never reaches the content. A llama3_json reply that starts with '{' or <|python_tag|> is held
// back until the end (it may be a call), any other streams as it comes.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace turbokv::server {

enum class ToolCallFormat { none, hermes, llama3_json };

const char* tool_call_format_name(ToolCallFormat format);
// The format a chat template renders tools in: hermes if it writes "<tool_call>", llama3_json if
// it is a Llama 3 template (<|start_header_id|>) that describes calls with "parameters", else
// none (the template renders no tools this server can read back).
ToolCallFormat detect_tool_call_format(const std::string& jinja_template);

struct ToolCall {
  std::string name;
  std::string arguments;  // a JSON text, as OpenAI's function.arguments
};

struct ToolCallParts {
  std::string content;
  std::vector<ToolCall> calls;
};

class ToolCallParser {
 public:
  ToolCallParser(ToolCallFormat format, bool parallel) : format_(format), parallel_(parallel) {}
  // The content and calls of `text` (appended to what came before) that are now certain.
  ToolCallParts feed(std::string_view text);
  // The end of the reply: what was held back.
  ToolCallParts finish();

 private:
  void feed_hermes(ToolCallParts& out);
  void emit_content(std::string_view text, ToolCallParts& out);
  void close_block(size_t close, ToolCallParts& out);

  ToolCallFormat format_;
  bool parallel_;
  std::string pending_;        // text not yet decided
  std::string held_space_;     // content's trailing whitespace: dropped if a call follows
  bool after_call_ = false;    // the next content's leading whitespace touches a call
  bool inside_block_ = false;  // hermes: between <tool_call> and </tool_call>
  size_t scanned_ = 0;         // hermes: bytes of the open block searched for its end
  bool llama_holding_ = false; // llama3_json: the reply may be a call, held to the end
  bool llama_decided_ = false;
  size_t calls_ = 0;
};

ToolCallParts parse_tool_calls(std::string_view reply, ToolCallFormat format, bool parallel);

// A call from its JSON text: {"name": non-empty string, "arguments" (or Llama's "parameters"):
// an object, or a JSON string holding one; absent = {}}; false if it is not one.
bool read_tool_call(std::string_view json_text, ToolCall& call);

}  // namespace turbokv::server
