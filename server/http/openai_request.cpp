#include "server/http/openai_request.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>
#include <random>
#include <span>

#include "server/http/openai_tools.hpp"

namespace turbokv::server {

using nlohmann::json;

ApiError invalid_request(const std::string& message, const std::string& param) {
  return ApiError(400, "invalid_request_error", "invalid_request", message, param);
}

ApiError unsupported_parameter(const std::string& message, const std::string& param) {
  return ApiError(400, "invalid_request_error", "unsupported_parameter", message, param);
}

namespace {

// The fields each endpoint implements (README "Serving"); ignore_eos is this server's extension,
// user is accepted and has no effect.
constexpr const char* kCommonFields[] = {"model", "max_tokens", "temperature", "top_p", "n", "stream",
                                         "stream_options", "stop", "seed", "presence_penalty",
                                         "frequency_penalty", "logit_bias", "logprobs", "user", "ignore_eos"};
constexpr const char* kCompletionFields[] = {"prompt", "echo", "best_of"};
constexpr const char* kChatFields[] = {"messages", "max_completion_tokens", "top_logprobs", "response_format",
                                       "chat_template_kwargs", "tools", "tool_choice", "parallel_tool_calls"};
// OpenAI fields this server knows it does not implement (a clearer message than "unrecognized").
constexpr const char* kUnsupportedFields[] = {
    "functions", "function_call", "response_format", "suffix",
    "best_of", "audio", "modalities", "prediction", "reasoning_effort", "service_tier", "store", "metadata",
    "web_search_options"};

bool listed(std::span<const char* const> names, const std::string& key) {
  return std::any_of(names.begin(), names.end(), [&](const char* n) { return key == n; });
}

// Refuses a non-null field the endpoint does not implement, or one OpenAI does not define.
void check_fields(const json& body, bool chat) {
  for (const auto& [key, value] : body.items()) {
    if (value.is_null()) continue;
    if (listed(kCommonFields, key) || listed(chat ? std::span<const char* const>(kChatFields)
                                                  : std::span<const char* const>(kCompletionFields), key)) {
      continue;
    }
    if (listed(kUnsupportedFields, key) || listed(chat ? std::span<const char* const>(kCompletionFields)
                                                       : std::span<const char* const>(kChatFields), key)) {
      throw unsupported_parameter(fmt::format("'{}' is not supported by this server{}", key,
                                              chat ? " on /v1/chat/completions" : " on /v1/completions"), key);
    }
    throw unsupported_parameter(fmt::format("Unrecognized request argument supplied: {}", key), key);
  }
}

bool present(const json& body, const char* key) { return body.contains(key) && !body.at(key).is_null(); }

double number_field(const json& body, const char* key, double lo, double hi, double fallback) {
  if (!present(body, key)) return fallback;
  const json& v = body.at(key);
  if (!v.is_number()) throw invalid_request(fmt::format("'{}' must be a number", key), key);
  const double x = v.get<double>();
  if (!std::isfinite(x) || x < lo || x > hi) {
    throw invalid_request(fmt::format("'{}' must be between {} and {}, got {}", key, lo, hi, v.dump()), key);
  }
  return x;
}

int int_field(const json& body, const char* key, int lo, int hi, int fallback) {
  if (!present(body, key)) return fallback;
  const json& v = body.at(key);
  // Past int64 the parser gives an unsigned integer (up to 2^64 - 1), then a double: compared
  // as such and reported as sent (read as int64, 2^63 was "got -9223372036854775808").
  const bool too_large = (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(hi)) ||
                         (v.is_number_float() && v.get<double>() > 0x1p63);
  if (too_large) {
    throw invalid_request(fmt::format("'{}' must be between {} and {}, got {}: too large", key, lo, hi, v.dump()), key);
  }
  if (!v.is_number_integer()) throw invalid_request(fmt::format("'{}' must be an integer", key), key);
  const auto x = v.get<int64_t>();
  if (x < lo || x > hi) throw invalid_request(fmt::format("'{}' must be between {} and {}, got {}", key, lo, hi, x), key);
  return static_cast<int>(x);
}

bool bool_field(const json& body, const char* key) {
  if (!present(body, key)) return false;
  if (!body.at(key).is_boolean()) throw invalid_request(fmt::format("'{}' must be a boolean", key), key);
  return body.at(key).get<bool>();
}

int token_id(const json& v, const char* key) {
  if (!v.is_number_integer()) throw invalid_request(fmt::format("'{}' must hold token ids (integers)", key), key);
  // v.dump(): an id past int64 would read as a wrapped negative number.
  if (v.is_number_unsigned() ? v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int>::max())
                             : v.get<int64_t>() < 0) {
    throw invalid_request(fmt::format("token id {} out of range", v.dump()), key);
  }
  return v.get<int>();
}

std::string message_content(const json& content, size_t index) {
  if (content.is_string()) return content.get<std::string>();
  if (content.is_null()) return "";
  if (!content.is_array()) {
    throw invalid_request(fmt::format("messages[{}].content must be a string or an array of text parts", index),
                          "messages");
  }
  std::string text;
  for (const auto& part : content) {
    if (!part.is_object() || !part.contains("type") || part.at("type") != "text" || !part.contains("text") ||
        !part.at("text").is_string()) {
      throw invalid_request(fmt::format("messages[{}].content: only parts {{\"type\": \"text\", \"text\": ...}} are "
                                        "supported", index), "messages");
    }
    text += part.at("text").get<std::string>();
  }
  return text;
}

// logit_bias: {"token id": bias in [-100, 100]}.
std::vector<std::pair<int, float>> logit_bias(const json& body, int vocab) {
  std::vector<std::pair<int, float>> out;
  if (!present(body, "logit_bias")) return out;
  const json& map = body.at("logit_bias");
  if (!map.is_object()) throw invalid_request("'logit_bias' must be an object of token id -> bias", "logit_bias");
  for (const auto& [key, value] : map.items()) {
    size_t used = 0;
    long long id = -1;
    try {
      id = std::stoll(key, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != key.size() || key.empty() || !std::isdigit(static_cast<unsigned char>(key[0])) || id >= vocab) {
      throw invalid_request(fmt::format("'logit_bias' key '{}' is not a token id below the vocabulary size {}", key,
                                        vocab), "logit_bias");
    }
    if (!value.is_number() || !std::isfinite(value.get<double>()) || std::abs(value.get<double>()) > 100) {
      throw invalid_request(fmt::format("'logit_bias' values must be numbers between -100 and 100, got {} for {}",
                                        value.dump(), key), "logit_bias");
    }
    out.emplace_back(static_cast<int>(id), value.get<float>());
  }
  return out;
}

std::vector<std::string> stop_strings(const json& body) {
  std::vector<std::string> out;
  if (!present(body, "stop")) return out;
  const json& stop = body.at("stop");
  if (stop.is_string()) {
    out.push_back(stop.get<std::string>());
  } else if (stop.is_array() && stop.size() <= 4) {
    for (const auto& s : stop) {
      if (!s.is_string()) throw invalid_request("'stop' must be a string or a list of up to 4 strings", "stop");
      out.push_back(s.get<std::string>());
    }
  } else {
    throw invalid_request("'stop' must be a string or a list of up to 4 strings", "stop");
  }
  return out;
}

// One message as the templates read it: role, content, and function calling's fields.
ChatMessage chat_message(const json& m, size_t i) {
  const std::string where = fmt::format("messages[{}]", i);
  if (!m.is_object() || !m.contains("role") || !m.at("role").is_string()) {
    throw invalid_request(fmt::format("{} must be an object with a string 'role'", where), "messages");
  }
  ChatMessage out;
  out.role = m.at("role").get<std::string>();
  if (out.role != "system" && out.role != "developer" && out.role != "user" && out.role != "assistant" &&
      out.role != "tool") {
    throw invalid_request(fmt::format("{}.role '{}' is not supported (system, developer, user, assistant, tool)",
                                      where, out.role), "messages");
  }
  out.content = message_content(m.contains("content") ? m.at("content") : json(), i);
  if (present(m, "name")) {
    if (!m.at("name").is_string()) throw invalid_request(fmt::format("'{}.name' must be a string", where), where + ".name");
    out.name = m.at("name").get<std::string>();
  }
  if (out.role == "assistant" && present(m, "tool_calls")) {
    out.tool_calls = parse_message_tool_calls(m.at("tool_calls"), where);
    out.content_null = !present(m, "content");  // a turn that only calls: content is None, as sent
  } else if (present(m, "tool_calls")) {
    throw invalid_request(fmt::format("'{}.tool_calls' is only allowed on assistant messages", where), where + ".tool_calls");
  }
  if (out.role == "tool") {
    if (!m.contains("tool_call_id") || !m.at("tool_call_id").is_string()) {
      throw invalid_request(fmt::format("'{}.tool_call_id' (the call this result answers) must be a string", where),
                            where + ".tool_call_id");
    }
    out.tool_call_id = m.at("tool_call_id").get<std::string>();
  }
  return out;
}

std::vector<ChatMessage> chat_messages(const json& body) {
  if (!present(body, "messages") || !body.at("messages").is_array() || body.at("messages").empty()) {
    throw invalid_request("'messages' must be a non-empty array", "messages");
  }
  std::vector<ChatMessage> out;
  for (const auto& m : body.at("messages")) out.push_back(chat_message(m, out.size()));
  return out;
}

// A string, a list of token ids, or a list of several of those (a batch: n choices each).
std::vector<PromptInput> prompts(const json& body) {
  if (!present(body, "prompt")) throw invalid_request("'prompt' is required", "prompt");
  const json& prompt = body.at("prompt");
  const bool batch = prompt.is_array() && !prompt.empty() && (prompt.at(0).is_string() || prompt.at(0).is_array());
  std::vector<PromptInput> out;
  for (const json& one : batch ? prompt : json::array({prompt})) {
    if (one.is_string()) {
      out.push_back({one.get<std::string>(), {}, false});
    } else if (one.is_array() && !one.empty()) {
      PromptInput tokens{"", {}, true};
      for (const auto& id : one) tokens.tokens.push_back(token_id(id, "prompt"));
      out.push_back(std::move(tokens));
    } else {
      throw invalid_request("'prompt' must be a string, a list of token ids, or a list of those", "prompt");
    }
  }
  return out;
}

}  // namespace

ParsedRequest parse_request(const std::string& body_text, bool chat, int context, int vocab) {
  json body;
  try {
    body = json::parse(body_text);
  } catch (const json::exception& e) {
    throw invalid_request(fmt::format("the body is not valid JSON: {}", e.what()));
  }
  if (!body.is_object()) throw invalid_request("the body must be a JSON object");
  check_fields(body, chat);
  ParsedRequest out;
  if (present(body, "model")) {
    if (!body.at("model").is_string()) throw invalid_request("'model' must be a string", "model");
    out.model = body.at("model").get<std::string>();
  }
  out.n = int_field(body, "n", 1, 128, 1);
  if (!chat) {
    out.echo = bool_field(body, "echo");
    // best_of n generates n and returns the best: only the trivial best_of 1 is implemented.
    if (present(body, "best_of") && !(body.at("best_of").is_number_integer() && body.at("best_of").get<int64_t>() == 1)) {
      throw unsupported_parameter("'best_of' other than 1 is not supported by this server", "best_of");
    }
  } else if (present(body, "response_format")) {
    // Plain text is what every answer is; JSON modes and schemas are not implemented.
    const json& rf = body.at("response_format");
    if (!rf.is_object() || !rf.contains("type") || rf.at("type") != "text") {
      throw unsupported_parameter("'response_format' other than {\"type\": \"text\"} is not supported by this server",
                                  "response_format");
    }
  }
  // max_completion_tokens is the newer name (chat); max_tokens the older one. 0 only with echo:
  // scoring a prompt (lm-evaluation-harness's loglikelihood requests).
  for (const char* key : {"max_tokens", "max_completion_tokens"}) {
    if (!present(body, key)) continue;
    out.generation.max_tokens = int_field(body, key, out.echo ? 0 : 1, context, 0);
    out.max_tokens_given = true;
  }
  // OpenAI's defaults: temperature 1, top_p 1.
  out.generation.sampling.temperature = static_cast<float>(number_field(body, "temperature", 0.0, 2.0, 1.0));
  out.generation.sampling.top_p = static_cast<float>(number_field(body, "top_p", 0.0, 1.0, 1.0));
  if (present(body, "top_p") && out.generation.sampling.top_p <= 0.0f) {
    throw invalid_request("'top_p' must be greater than 0", "top_p");
  }
  if (present(body, "seed")) {
    if (!body.at("seed").is_number_integer()) throw invalid_request("'seed' must be an integer", "seed");
    out.generation.sampling.seed = static_cast<uint64_t>(body.at("seed").get<int64_t>());
  } else {
    out.generation.sampling.seed = std::random_device{}();
  }
  out.generation.stop = stop_strings(body);
  out.stream = bool_field(body, "stream");
  if (present(body, "stream_options")) {
    const json& so = body.at("stream_options");
    if (!so.is_object()) throw invalid_request("'stream_options' must be an object", "stream_options");
    if (!out.stream) throw invalid_request("'stream_options' is only allowed with stream: true", "stream_options");
    out.include_usage = bool_field(so, "include_usage");
  }
  out.generation.ignore_eos = bool_field(body, "ignore_eos");
  // OpenAI's ranges.
  out.generation.sampling.frequency_penalty = static_cast<float>(number_field(body, "frequency_penalty", -2.0, 2.0, 0.0));
  out.generation.sampling.presence_penalty = static_cast<float>(number_field(body, "presence_penalty", -2.0, 2.0, 0.0));
  out.generation.sampling.logit_bias = logit_bias(body, vocab);
  // logprobs: chat says whether (with top_logprobs alternatives), completions how many
  // alternatives (with echo, the prompt's too).
  if (chat) {
    if (bool_field(body, "logprobs")) out.generation.logprobs = int_field(body, "top_logprobs", 0, 20, 0);
    if (present(body, "top_logprobs") && out.generation.logprobs < 0) {
      throw invalid_request("'top_logprobs' needs 'logprobs': true", "top_logprobs");
    }
  } else {
    out.generation.logprobs = int_field(body, "logprobs", 0, 20, -1);
    out.generation.prompt_logprobs = out.echo && out.generation.logprobs >= 0;
  }

  if (chat) {
    out.messages = chat_messages(body);
    // Extra variables for the model's chat template, as llama-server and vLLM accept them (e.g.
    // {"enable_thinking": false} for Qwen 3).
    if (present(body, "chat_template_kwargs")) {
      if (!body.at("chat_template_kwargs").is_object()) {
        throw invalid_request("'chat_template_kwargs' must be an object", "chat_template_kwargs");
      }
      out.chat_template_kwargs = body.at("chat_template_kwargs");
    }
    out.tools = parse_tool_request(body);
  } else {
    out.prompts = prompts(body);
  }
  return out;
}

bool bearer_token_matches(std::string_view authorization, std::string_view key) {
  constexpr std::string_view scheme = "bearer";
  if (key.empty() || authorization.size() <= scheme.size() || authorization[scheme.size()] != ' ') return false;
  for (size_t i = 0; i < scheme.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(authorization[i])) != scheme[i]) return false;
  }
  std::string_view token = authorization.substr(scheme.size());
  while (!token.empty() && token.front() == ' ') token.remove_prefix(1);
  // Every byte of the token is compared whether or not an earlier one differed, so the time
  // tells nothing about how much of a guess is right (CVE-2025-59425 in vLLM: a comparison that
  // stops at the first difference); it depends only on the length the client sent (the key is
  // read cyclically, a token of another length has already failed).
  unsigned char differ = token.size() == key.size() ? 0 : 1;
  for (size_t i = 0; i < token.size(); ++i) {
    differ |= static_cast<unsigned char>(token[i] ^ key[i % key.size()]);
  }
  return differ == 0;
}

}  // namespace turbokv::server
