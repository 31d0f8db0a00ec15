#include "server/text/tool_calls.hpp"

#include <nlohmann/json.hpp>

namespace turbokv::server {

using nlohmann::json;

namespace {

constexpr std::string_view kOpen = "<tool_call>";
constexpr std::string_view kClose = "</tool_call>";
constexpr std::string_view kPythonTag = "<|python_tag|>";

bool is_space(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

std::string_view skip_space(std::string_view s) {
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  return s;
}

// The length of the longest end of `text` that could be the start of `tag`.
size_t partial_tag_at_end(std::string_view text, std::string_view tag) {
  for (size_t n = std::min(text.size(), tag.size() - 1); n > 0; --n) {
    if (text.substr(text.size() - n) == tag.substr(0, n)) return n;
  }
  return 0;
}

// Where the JSON object starting at text[0] == '{' ends (one past its '}'), or npos.
size_t object_end(std::string_view text) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') ++i;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      ++depth;
    } else if (c == '}' || c == ']') {
      if (--depth == 0) return i + 1;
    }
  }
  return std::string_view::npos;
}

// A llama3_json reply: one or more call objects separated by ';', nothing else; false if not.
bool read_llama_calls(std::string_view text, std::vector<ToolCall>& calls) {
  text = skip_space(text);
  if (text.substr(0, kPythonTag.size()) == kPythonTag) text.remove_prefix(kPythonTag.size());
  for (text = skip_space(text); !text.empty(); text = skip_space(text)) {
    if (text.front() != '{') return false;
    const size_t end = object_end(text);
    ToolCall call;
    if (end == std::string_view::npos || !read_tool_call(text.substr(0, end), call)) return false;
    calls.push_back(std::move(call));
    text = skip_space(text.substr(end));
    if (!text.empty() && text.front() == ';') text.remove_prefix(1);
  }
  return !calls.empty();
}

}  // namespace

const char* tool_call_format_name(ToolCallFormat format) {
  switch (format) {
    case ToolCallFormat::hermes: return "hermes";
    case ToolCallFormat::llama3_json: return "llama3_json";
    case ToolCallFormat::none: return "none";
  }
  return "none";
}

ToolCallFormat detect_tool_call_format(const std::string& t) {
  if (t.find(kOpen) != std::string::npos) return ToolCallFormat::hermes;
  if (t.find("<|start_header_id|>") != std::string::npos && t.find("\"parameters\"") != std::string::npos) {
    return ToolCallFormat::llama3_json;
  }
  return ToolCallFormat::none;
}

bool read_tool_call(std::string_view json_text, ToolCall& call) {
  const json j = json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("name") || !j.at("name").is_string() || j.at("name").get<std::string>().empty()) {
    return false;
  }
  const char* key = j.contains("arguments") ? "arguments" : "parameters";
  std::string arguments = "{}";
  if (j.contains(key)) {
    const json& a = j.at(key);
    if (a.is_object()) {
      arguments = a.dump(-1, ' ', false, json::error_handler_t::replace);
    } else if (a.is_string() && json::parse(a.get<std::string>(), nullptr, false).is_object()) {
      arguments = a.get<std::string>();  // already OpenAI's form: a JSON text
    } else {
      return false;
    }
  }
  call.name = j.at("name").get<std::string>();
  call.arguments = std::move(arguments);
  return true;
}

void ToolCallParser::emit_content(std::string_view text, ToolCallParts& out) {
  if (after_call_) {
    text = skip_space(text);
    if (text.empty()) return;
    after_call_ = false;
  }
  size_t end = text.size();
  while (end > 0 && is_space(text[end - 1])) --end;
  if (end == 0) {
    held_space_ += text;
    return;
  }
  out.content += held_space_;
  out.content += text.substr(0, end);
  held_space_ = text.substr(end);
}

void ToolCallParser::close_block(size_t close, ToolCallParts& out) {
  const std::string_view body = std::string_view(pending_).substr(0, close);
  ToolCall call;
  if (read_tool_call(body, call)) {
    out.calls.push_back(std::move(call));
    ++calls_;
    held_space_.clear();  // the whitespace between the text and the call
    after_call_ = true;
  } else {
    emit_content(std::string(kOpen) + std::string(body) + std::string(kClose), out);
  }
  pending_.erase(0, close + kClose.size());
  inside_block_ = false;
  scanned_ = 0;
}

void ToolCallParser::feed_hermes(ToolCallParts& out) {
  for (;;) {
    if (inside_block_) {
      // Search only the new text (and a tag cut across pieces): a long block stays linear.
      const size_t close = pending_.find(kClose, scanned_ >= kClose.size() ? scanned_ - kClose.size() + 1 : 0);
      if (close == std::string::npos) {  // the call is not complete yet
        scanned_ = pending_.size();
        return;
      }
      close_block(close, out);
      continue;
    }
    if (!parallel_ && calls_ > 0) {  // only the first call is read: the rest is text
      emit_content(pending_, out);
      pending_.clear();
      return;
    }
    const size_t open = pending_.find(kOpen);
    if (open == std::string::npos) {
      const size_t keep = partial_tag_at_end(pending_, kOpen);
      emit_content(std::string_view(pending_).substr(0, pending_.size() - keep), out);
      pending_.erase(0, pending_.size() - keep);
      return;
    }
    emit_content(std::string_view(pending_).substr(0, open), out);
    pending_.erase(0, open + kOpen.size());
    inside_block_ = true;
  }
}

ToolCallParts ToolCallParser::feed(std::string_view text) {
  ToolCallParts out;
  pending_ += text;
  switch (format_) {
    case ToolCallFormat::none:
      out.content = std::move(pending_);
      pending_.clear();
      break;
    case ToolCallFormat::hermes:
      feed_hermes(out);
      break;
    case ToolCallFormat::llama3_json:
      if (!llama_decided_) {
        const std::string_view start = skip_space(pending_);
        if (start.empty()) break;
        if (start.front() == '{' || start.substr(0, kPythonTag.size()) == kPythonTag) {
          llama_decided_ = llama_holding_ = true;
        } else if (start.size() < kPythonTag.size() && kPythonTag.substr(0, start.size()) == start) {
          break;  // may still become <|python_tag|>
        } else {
          llama_decided_ = true;
        }
      }
      if (!llama_holding_) {
        out.content = std::move(pending_);
        pending_.clear();
      }
      break;
  }
  return out;
}

ToolCallParts ToolCallParser::finish() {
  ToolCallParts out;
  if (format_ == ToolCallFormat::llama3_json) {
    std::vector<ToolCall> calls;
    if (read_llama_calls(pending_, calls) && (parallel_ || calls.size() == 1)) {
      out.calls = std::move(calls);
    } else {
      out.content = std::move(pending_);
    }
  } else {
    if (inside_block_) pending_.insert(0, kOpen);  // never closed: text
    emit_content(pending_, out);
    out.content += held_space_;  // no call follows it
  }
  pending_.clear();
  held_space_.clear();
  inside_block_ = false;
  return out;
}

ToolCallParts parse_tool_calls(std::string_view reply, ToolCallFormat format, bool parallel) {
  ToolCallParser parser(format, parallel);
  ToolCallParts out = parser.feed(reply);
  ToolCallParts tail = parser.finish();
  out.content += tail.content;
  for (auto& c : tail.calls) out.calls.push_back(std::move(c));
  return out;
}

}  // namespace turbokv::server
