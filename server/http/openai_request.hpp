// Reading OpenAI-style request bodies (/v1/completions, /v1/chat/completions) into a
// GenerationRequest, with every field's type and range checked: a bad field is an ApiError
// naming it, answered as an OpenAI error object. A field this server does not implement
// (functions, response_format, suffix, ...) or does not know is refused (400, code
// unsupported_parameter) rather than ignored: a client relying on it would get a different
// answer than it asked for. null counts as absent.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "server/http/openai_tools.hpp"
#include "server/text/chat_template.hpp"
#include "server/scheduling/request.hpp"

namespace turbokv::server {

// An error answered to the client: HTTP status, OpenAI error type and code.
struct ApiError : std::runtime_error {
  ApiError(int status, std::string type, std::string code, const std::string& message, std::string param = "")
      : std::runtime_error(message), status(status), type(std::move(type)), code(std::move(code)),
        param(std::move(param)) {}
  int status;
  std::string type, code, param;
};

ApiError invalid_request(const std::string& message, const std::string& param = "");
ApiError unsupported_parameter(const std::string& message, const std::string& param);

// One prompt of a completions request: text, or token ids.
struct PromptInput {
  std::string text;
  std::vector<int> tokens;
  bool is_tokens = false;
};

// The parts of a request the HTTP layer uses besides the GenerationRequest.
struct ParsedRequest {
  GenerationRequest generation;        // everything but the prompt, which the HTTP layer tokenizes
  std::optional<std::string> model;
  std::vector<PromptInput> prompts;    // completions: one or several (a batch)
  std::vector<ChatMessage> messages;   // chat
  nlohmann::json chat_template_kwargs; // chat: an object of template variables, or null
  ToolRequest tools;                   // chat: the tools to render and read calls for
  bool stream = false;
  bool include_usage = false;
  bool max_tokens_given = false;
  bool echo = false;                   // completions: the prompt's text (and logprobs) first
  int n = 1;                           // choices
};

// Throws ApiError (400) on a body that is not a JSON object, a field of the wrong type or out
// of range, or one not supported; `chat` selects the chat completions fields; `vocab` bounds
// logit_bias's token ids.
ParsedRequest parse_request(const std::string& body, bool chat, int context, int vocab);

// Whether an Authorization header value is "Bearer <key>": the scheme in any case (RFC 6750
// through RFC 7235), one or more spaces, then the key compared in constant time.
bool bearer_token_matches(std::string_view authorization, std::string_view key);

}  // namespace turbokv::server
