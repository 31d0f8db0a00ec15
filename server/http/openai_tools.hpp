// OpenAI function calling in requests: the `tools` list, `tool_choice`, `parallel_tool_calls`,
// and the conversation's own calls (an assistant message's `tool_calls`, a `tool` message's
// `tool_call_id`), each checked for OpenAI's shape; a malformed one is a 400 naming the field
// (e.g. "tools[1].function.name").
//
// tool_choice here (README "Serving"):
//   "auto" (the default with tools)  the tools go into the prompt (the template's `tools`) and
//                                    calls are read out of the reply (tool_calls.hpp);
//   "none"                           as without tools: not rendered, not parsed (as vLLM and
//                                    llama-server do);
//   "required", {"type": "function", ...}  refused (400): forcing a call needs constrained
//                                    generation, which this server does not have; a model left
//                                    free may answer in text, so accepting it would promise
//                                    what it cannot keep.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace turbokv::server {

struct ToolRequest {
  nlohmann::json tools;  // the tools to render and parse calls for, or null (none, or tool_choice "none")
  bool parallel = true;  // parallel_tool_calls: false reads only the reply's first call
};

// Throws ApiError (400).
ToolRequest parse_tool_request(const nlohmann::json& body);

// An assistant message's tool_calls, checked: [{id, type: "function", function: {name,
// arguments: JSON text}}] (ChatTemplate passes them on as its template wants them). `where`:
// "messages[3]". Throws ApiError (400).
nlohmann::json parse_message_tool_calls(const nlohmann::json& calls, const std::string& where);

// Whether `name` follows OpenAI's rule for function names: 1-64 of a-z, A-Z, 0-9, '_', '-'.
bool valid_function_name(const std::string& name);

}  // namespace turbokv::server
