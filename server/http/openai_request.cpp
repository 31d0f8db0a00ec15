#include "server/http/openai_request.hpp"

#include <fmt/format.h>

#include <cctype>
#include <cmath>
#include <limits>
#include <random>

namespace turbokv::server {

using nlohmann::json;

ApiError invalid_request(const std::string& message, const std::string& param) {
  return ApiError(400, "invalid_request_error", "invalid_request", message, param);
}

namespace {

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

}  // namespace

ParsedRequest parse_request(const std::string& body_text, bool chat, int context) {
  json body;
  try {
    body = json::parse(body_text);
  } catch (const json::exception& e) {
    throw invalid_request(fmt::format("the body is not valid JSON: {}", e.what()));
  }
  if (!body.is_object()) throw invalid_request("the body must be a JSON object");
  ParsedRequest out;
  if (present(body, "model")) {
    if (!body.at("model").is_string()) throw invalid_request("'model' must be a string", "model");
    out.model = body.at("model").get<std::string>();
  }
  if (present(body, "n")) {
    if (!body.at("n").is_number_integer() || body.at("n").get<int64_t>() != 1) {
      throw invalid_request("only n = 1 is supported", "n");
    }
  }
  // max_completion_tokens is the newer name (chat); max_tokens the older one.
  for (const char* key : {"max_tokens", "max_completion_tokens"}) {
    if (!present(body, key)) continue;
    const json& v = body.at(key);
    // Past int64 the parser gives an unsigned integer (up to 2^64 - 1), then a double: compared
    // as such and reported as sent (read as int64, 2^63 was "got -9223372036854775808").
    const bool too_large = (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(context)) ||
                           (v.is_number_float() && v.get<double>() > 0x1p63);
    if (too_large) {
      throw invalid_request(
          fmt::format("'{}' must be between 1 and the context size {}, got {}: too large", key, context, v.dump()), key);
    }
    if (!v.is_number_integer()) throw invalid_request(fmt::format("'{}' must be an integer", key), key);
    const auto n = v.get<int64_t>();
    if (n < 1) {
      throw invalid_request(fmt::format("'{}' must be between 1 and the context size {}, got {}", key, context, n), key);
    }
    out.generation.max_tokens = static_cast<int>(n);
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
  if (present(body, "stop")) {
    const json& stop = body.at("stop");
    if (stop.is_string()) {
      out.generation.stop.push_back(stop.get<std::string>());
    } else if (stop.is_array() && stop.size() <= 4) {
      for (const auto& s : stop) {
        if (!s.is_string()) throw invalid_request("'stop' must be a string or a list of up to 4 strings", "stop");
        out.generation.stop.push_back(s.get<std::string>());
      }
    } else {
      throw invalid_request("'stop' must be a string or a list of up to 4 strings", "stop");
    }
  }
  out.stream = bool_field(body, "stream");
  if (present(body, "stream_options")) {
    const json& so = body.at("stream_options");
    if (!so.is_object()) throw invalid_request("'stream_options' must be an object", "stream_options");
    if (!out.stream) throw invalid_request("'stream_options' is only allowed with stream: true", "stream_options");
    out.include_usage = bool_field(so, "include_usage");
  }
  out.generation.ignore_eos = bool_field(body, "ignore_eos");

  if (chat) {
    if (!present(body, "messages") || !body.at("messages").is_array() || body.at("messages").empty()) {
      throw invalid_request("'messages' must be a non-empty array", "messages");
    }
    size_t i = 0;
    for (const auto& m : body.at("messages")) {
      if (!m.is_object() || !m.contains("role") || !m.at("role").is_string()) {
        throw invalid_request(fmt::format("messages[{}] must be an object with a string 'role'", i), "messages");
      }
      const auto role = m.at("role").get<std::string>();
      if (role != "system" && role != "developer" && role != "user" && role != "assistant") {
        throw invalid_request(fmt::format("messages[{}].role '{}' is not supported (system, developer, user, "
                                          "assistant)", i, role), "messages");
      }
      out.messages.push_back({role, message_content(m.contains("content") ? m.at("content") : json(), i)});
      ++i;
    }
    return out;
  }
  if (!present(body, "prompt")) throw invalid_request("'prompt' is required", "prompt");
  const json& prompt = body.at("prompt");
  const json* single = &prompt;
  if (prompt.is_array() && !prompt.empty() && (prompt.at(0).is_string() || prompt.at(0).is_array())) {
    if (prompt.size() != 1) throw invalid_request("only one prompt per request is supported", "prompt");
    single = &prompt.at(0);
  }
  if (single->is_string()) {
    out.prompt_text = single->get<std::string>();
  } else if (single->is_array() && !single->empty()) {
    for (const auto& id : *single) out.generation.prompt.push_back(token_id(id, "prompt"));
    out.prompt_is_tokens = true;
  } else {
    throw invalid_request("'prompt' must be a string, a list of token ids, or a list holding one of those", "prompt");
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
