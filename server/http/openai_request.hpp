// Reading OpenAI-style request bodies (/v1/completions, /v1/chat/completions) into a
// GenerationRequest, with every field's type and range checked: a bad field is an ApiError
// naming it, answered as an OpenAI error object.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

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

// The parts of a request the HTTP layer uses besides the GenerationRequest.
struct ParsedRequest {
  GenerationRequest generation;        // prompt not yet tokenized for text prompts
  std::optional<std::string> model;
  std::string prompt_text;             // completions with a text prompt
  bool prompt_is_tokens = false;       // completions with token ids
  std::vector<ChatMessage> messages;   // chat
  bool stream = false;
  bool include_usage = false;
  bool max_tokens_given = false;
};

// Throws ApiError (400) on a body that is not a JSON object, or a field of the wrong type or
// out of range; `chat` selects the chat completions fields.
ParsedRequest parse_request(const std::string& body, bool chat, int context);

// Whether an Authorization header value is "Bearer <key>": the scheme in any case (RFC 6750
// through RFC 7235), one or more spaces, then the key compared in constant time.
bool bearer_token_matches(std::string_view authorization, std::string_view key);

}  // namespace turbokv::server
