#include "server/http/openai_tools.hpp"

#include <fmt/format.h>

#include "server/http/openai_request.hpp"

namespace turbokv::server {

using nlohmann::json;

namespace {

bool present(const json& o, const char* key) { return o.contains(key) && !o.at(key).is_null(); }

const json& object_field(const json& o, const char* key, const std::string& where) {
  if (!o.is_object() || !o.contains(key) || !o.at(key).is_object()) {
    throw invalid_request(fmt::format("'{}.{}' must be an object", where, key), where + "." + key);
  }
  return o.at(key);
}

std::string string_field(const json& o, const char* key, const std::string& where) {
  if (!o.contains(key) || !o.at(key).is_string()) {
    throw invalid_request(fmt::format("'{}.{}' must be a string", where, key), where + "." + key);
  }
  return o.at(key).get<std::string>();
}

void check_function_type(const json& o, const std::string& where) {
  if (!o.is_object()) throw invalid_request(fmt::format("'{}' must be an object", where), where);
  if (!o.contains("type") || o.at("type") != "function") {
    throw invalid_request(fmt::format("'{}.type' must be \"function\" (the only tool type this server has)", where),
                          where + ".type");
  }
}

void check_name(const std::string& name, const std::string& where) {
  if (!valid_function_name(name)) {
    throw invalid_request(fmt::format("'{}' must be 1 to 64 characters of a-z, A-Z, 0-9, '_' and '-', got \"{}\"",
                                      where, name), where);
  }
}

json parse_tools(const json& tools) {
  if (!tools.is_array()) throw invalid_request("'tools' must be an array of function tools", "tools");
  for (size_t i = 0; i < tools.size(); ++i) {
    const std::string where = fmt::format("tools[{}]", i);
    check_function_type(tools[i], where);
    const json& f = object_field(tools[i], "function", where);
    check_name(string_field(f, "name", where + ".function"), where + ".function.name");
    if (present(f, "description") && !f.at("description").is_string()) {
      throw invalid_request(fmt::format("'{}.function.description' must be a string", where), where + ".function.description");
    }
    if (present(f, "parameters") && !f.at("parameters").is_object()) {
      throw invalid_request(fmt::format("'{}.function.parameters' must be an object (a JSON Schema)", where),
                            where + ".function.parameters");
    }
    if (present(f, "strict") && !f.at("strict").is_boolean()) {
      throw invalid_request(fmt::format("'{}.function.strict' must be a boolean", where), where + ".function.strict");
    }
  }
  return tools.empty() ? json() : tools;
}

// "auto" or "none" (true: none); anything else is refused or malformed.
bool tool_choice_is_none(const json& choice) {
  if (choice == "auto") return false;
  if (choice == "none") return true;
  if (choice == "required" || (choice.is_object() && choice.value("type", "") == "function")) {
    throw unsupported_parameter(
        "'tool_choice' \"required\" or a named function is not supported by this server: it cannot force the "
        "model to call a tool (no constrained generation); use \"auto\" and check the reply's tool_calls",
        "tool_choice");
  }
  throw invalid_request("'tool_choice' must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", "
                        "\"function\": {\"name\": ...}}", "tool_choice");
}

}  // namespace

bool valid_function_name(const std::string& name) {
  if (name.empty() || name.size() > 64) return false;
  for (const char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

ToolRequest parse_tool_request(const json& body) {
  ToolRequest out;
  if (present(body, "tools")) out.tools = parse_tools(body.at("tools"));
  if (present(body, "tool_choice") && tool_choice_is_none(body.at("tool_choice"))) out.tools = nullptr;
  if (present(body, "parallel_tool_calls")) {
    if (!body.at("parallel_tool_calls").is_boolean()) {
      throw invalid_request("'parallel_tool_calls' must be a boolean", "parallel_tool_calls");
    }
    out.parallel = body.at("parallel_tool_calls").get<bool>();
  }
  return out;
}

json parse_message_tool_calls(const json& calls, const std::string& where) {
  const std::string field = where + ".tool_calls";
  if (!calls.is_array()) throw invalid_request(fmt::format("'{}' must be an array", field), field);
  json out = json::array();
  for (size_t i = 0; i < calls.size(); ++i) {
    const std::string at = fmt::format("{}[{}]", field, i);
    check_function_type(calls[i], at);
    const json& f = object_field(calls[i], "function", at);
    const std::string name = string_field(f, "name", at + ".function");
    const std::string arguments = string_field(f, "arguments", at + ".function");
    out.push_back({{"id", string_field(calls[i], "id", at)},
                   {"type", "function"},
                   {"function", {{"name", name}, {"arguments", arguments}}}});
  }
  return out;
}

}  // namespace turbokv::server
