#include "server/text/chat_template.hpp"

#include <algorithm>
#include <optional>
#include <unordered_map>

namespace turbokv::server {

jinja::Value json_to_value(const nlohmann::json& j, bool marked) {
  using jinja::Value;
  switch (j.type()) {
    case nlohmann::json::value_t::null: return Value::none();
    case nlohmann::json::value_t::boolean: return Value::boolean(j.get<bool>());
    case nlohmann::json::value_t::number_integer: return Value::integer(j.get<int64_t>());
    case nlohmann::json::value_t::number_unsigned: {
      const auto u = j.get<uint64_t>();
      return u <= static_cast<uint64_t>(INT64_MAX) ? Value::integer(static_cast<int64_t>(u)) : Value::floating(static_cast<double>(u));
    }
    case nlohmann::json::value_t::number_float: return Value::floating(j.get<double>());
    case nlohmann::json::value_t::string: return marked ? Value::marked(j.get<std::string>()) : Value::string(j.get<std::string>());
    case nlohmann::json::value_t::array: {
      std::vector<Value> items;
      for (const auto& x : j) items.push_back(json_to_value(x, marked));
      return Value::list(std::move(items));
    }
    case nlohmann::json::value_t::object: {
      jinja::Dict d;
      for (const auto& [k, v] : j.items()) d.set(k, json_to_value(v, marked));
      return Value::dict(std::move(d));
    }
    default: return Value::none();
  }
}

jinja::Value ChatTemplate::messages_value(const std::vector<ChatMessage>& messages, size_t count) const {
  std::vector<jinja::Value> list;
  for (size_t k = 0; k < count; ++k) {
    const ChatMessage& in = messages[k];
    jinja::Dict m;
    // Templates know system, not OpenAI's newer developer role.
    m.set("role", jinja::Value::marked(in.role == "developer" ? "system" : in.role));
    if (in.content_null && !null_content_as_empty_) {
      m.set("content", jinja::Value::none());
    } else {
      m.set("content", jinja::Value::marked(in.content));
    }
    if (!in.tool_calls.is_null()) {
      nlohmann::json calls = in.tool_calls;
      for (auto& call : calls) {
        nlohmann::json& arguments = call["function"]["arguments"];
        if (!object_arguments_ || !arguments.is_string()) continue;
        nlohmann::json parsed = nlohmann::json::parse(arguments.get<std::string>(), nullptr, /*allow_exceptions=*/false);
        if (parsed.is_object()) arguments = std::move(parsed);  // a text that is no object stays text
      }
      m.set("tool_calls", json_to_value(calls, true));
    }
    if (!in.tool_call_id.empty()) m.set("tool_call_id", jinja::Value::marked(in.tool_call_id));
    if (!in.name.empty()) m.set("name", jinja::Value::marked(in.name));
    list.push_back(jinja::Value::dict(std::move(m)));
  }
  return jinja::Value::list(std::move(list));
}

void ChatTemplate::probe_tool_conventions() {
  // A conversation with a call and its result, rendered in each convention; the first that
  // renders (and, for arguments, shows them as written) is kept.
  const std::string arguments = "{\"probe_argument\": 1}";
  std::vector<ChatMessage> chat = {{"user", "Hi"}, {"assistant", ""}, {"tool", "ok"}};
  chat[1].content_null = true;
  chat[1].tool_calls = nlohmann::json::array(
      {{{"id", "call_probe"}, {"type", "function"}, {"function", {{"name", "probe_tool"}, {"arguments", arguments}}}}});
  chat[2].tool_call_id = "call_probe";
  const nlohmann::json parameters = {{"type", "object"}};
  const nlohmann::json function = {{"name", "probe_tool"}, {"parameters", parameters}};
  const nlohmann::json tools = nlohmann::json::array({{{"type", "function"}, {"function", function}}});
  auto render = [&]() -> std::optional<std::string> {
    try {
      return render_with_jinja(chat, nullptr, tools).text;
    } catch (const turbokv::Error&) {
      return std::nullopt;
    }
  };
  if (!render()) {
    null_content_as_empty_ = true;
    if (!render()) null_content_as_empty_ = false;  // neither renders: nothing learnt
  }
  const auto as_text = render();
  if (as_text && as_text->find(arguments) != std::string::npos) return;
  object_arguments_ = true;
  const auto as_object = render();
  if (!as_object || as_object->find("probe_argument") == std::string::npos) object_arguments_ = false;
}

ChatTemplate ChatTemplate::from_gguf(const std::string& jinja, std::string bos_token, std::string eos_token) {
  ChatTemplate t(detect_chat_format(jinja));
  t.bos_token_ = std::move(bos_token);
  t.eos_token_ = std::move(eos_token);
  if (jinja.empty()) {
    t.fallback_reason_ = "the model has no chat template";
    return t;
  }
  try {
    t.jinja_ = std::make_shared<const jinja::Template>(jinja);
    t.thinks_ = jinja.find("<think>") != std::string::npos;
    t.tool_format_ = detect_tool_call_format(jinja);
    t.probe_tool_conventions();
    (void)t.render({{"user", "Hello"}});  // a template that cannot render one message is no use
  } catch (const turbokv::Error& e) {
    t.jinja_.reset();
    t.thinks_ = false;
    t.tool_format_ = ToolCallFormat::none;
    t.object_arguments_ = t.null_content_as_empty_ = false;
    t.fallback_reason_ = std::string("the model's chat template cannot be run: ") + e.what();
  }
  return t;
}

std::string ChatTemplate::describe() const {
  return is_jinja() ? "jinja (the model's tokenizer.chat_template)" : chat_format_name(format_);
}

jinja::Rendered ChatTemplate::render_jinja(const jinja::Value& context, size_t input_bytes) const {
  if (!jinja_) throw ChatTemplateError("no Jinja chat template");
  // The output may repeat the input a few times (tojson of tools, a system prompt per turn);
  // past that a template is running away.
  jinja::RenderLimits limits;
  limits.max_output_bytes = std::max<size_t>(limits.max_output_bytes, 4 * input_bytes);
  try {
    return jinja_->render(context, limits);
  } catch (const jinja::Error& e) {
    throw ChatTemplateError(std::string("chat template: ") + e.what());
  }
}

RenderedChat ChatTemplate::render(const std::vector<ChatMessage>& messages, const nlohmann::json& kwargs,
                                  const nlohmann::json& tools) const {
  if (!jinja_) return render_chat(format_, messages);
  return render_with_jinja(messages, kwargs, tools);
}

RenderedChat ChatTemplate::render_with_jinja(const std::vector<ChatMessage>& messages, const nlohmann::json& kwargs,
                                             const nlohmann::json& tools) const {
  auto context = [&](size_t count, bool generation_prompt) {
    jinja::Dict d;
    if (kwargs.is_object()) {
      for (const auto& [k, v] : kwargs.items()) d.set(k, json_to_value(v, true));
    }
    d.set("messages", messages_value(messages, count));
    d.set("add_generation_prompt", jinja::Value::boolean(generation_prompt));
    d.set("bos_token", jinja::Value::string(bos_token_));
    d.set("eos_token", jinja::Value::string(eos_token_));
    if (!tools.is_null()) d.set("tools", json_to_value(tools, true));
    return jinja::Value::dict(std::move(d));
  };
  size_t input_bytes = (kwargs.is_object() ? kwargs.dump().size() : 0) + (tools.is_null() ? 0 : tools.dump().size());
  for (const auto& m : messages) {
    input_bytes += m.content.size() + m.role.size() + (m.tool_calls.is_null() ? 0 : m.tool_calls.dump().size());
  }
  jinja::Rendered full = render_jinja(context(messages.size(), true), input_bytes);
  RenderedChat out;
  out.add_bos = false;  // as transformers: the template writes BOS itself where the model wants one
  out.text = std::move(full.text);
  for (const jinja::Span& m : full.marks) out.contents.push_back({m.begin, m.end});
  // Where messages end, for the prefix cache: the conversation cut after message k renders to a
  // prefix of this text (templates may render earlier turns differently once later ones exist,
  // e.g. Qwen 3 drops old reasoning; then there is no mark). Only after the first message (a
  // shared system prompt) and the last two (the next turn's prefix): each costs a render.
  std::vector<size_t> cuts = {1, messages.size() - 1, messages.size()};
  std::sort(cuts.begin(), cuts.end());
  cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
  for (const size_t k : cuts) {
    if (k == 0 || k > messages.size()) continue;
    try {
      const std::string part = render_jinja(context(k, false), input_bytes).text;
      if (!part.empty() && out.text.compare(0, part.size(), part) == 0 &&
          (out.message_ends.empty() || out.message_ends.back() < part.size())) {
        out.message_ends.push_back(part.size());
      }
    } catch (const ChatTemplateError&) {
      // e.g. a template that wants the conversation to end with a user turn: no mark there
    }
  }
  return out;
}

const char* chat_format_name(ChatFormat format) {
  switch (format) {
    case ChatFormat::llama3: return "llama3";
    case ChatFormat::chatml: return "chatml";
    case ChatFormat::plain: return "plain";
  }
  return "plain";
}

ChatFormat detect_chat_format(const std::string& t) {
  if (t.find("<|start_header_id|>") != std::string::npos) return ChatFormat::llama3;
  if (t.find("<|im_start|>") != std::string::npos) return ChatFormat::chatml;
  return ChatFormat::plain;
}

RenderedChat render_chat(ChatFormat format, const std::vector<ChatMessage>& messages) {
  RenderedChat out;
  auto role_of = [](const ChatMessage& m) { return m.role == "developer" ? std::string("system") : m.role; };
  auto add_content = [&out](const ChatMessage& m) {
    out.contents.push_back({out.text.size(), out.text.size() + m.content.size()});
    out.text += m.content;
  };
  switch (format) {
    case ChatFormat::llama3:
      out.add_bos = false;
      out.text = "<|begin_of_text|>";
      for (const auto& m : messages) {
        out.text += "<|start_header_id|>" + role_of(m) + "<|end_header_id|>\n\n";
        add_content(m);
        out.text += "<|eot_id|>";
        out.message_ends.push_back(out.text.size());
      }
      out.text += "<|start_header_id|>assistant<|end_header_id|>\n\n";
      break;
    case ChatFormat::chatml:
      out.add_bos = false;
      for (const auto& m : messages) {
        out.text += "<|im_start|>" + role_of(m) + "\n";
        add_content(m);
        out.text += "<|im_end|>\n";
        out.message_ends.push_back(out.text.size());
      }
      out.text += "<|im_start|>assistant\n";
      break;
    case ChatFormat::plain:
      for (const auto& m : messages) {
        out.text += role_of(m) + ": ";
        add_content(m);
        out.text += "\n";
        out.message_ends.push_back(out.text.size());
      }
      out.text += "assistant:";
      break;
  }
  return out;
}

std::vector<size_t> message_marks(const engine::Tokenizer& tok, const RenderedChat& chat, const std::vector<int>& ids) {
  // One pass over the prompt's tokens: a message end is a mark where one of them ends exactly
  // there (the tokens before it spell exactly the text before it). Encoding the text up to each
  // end again was quadratic (issue 26: 4,000 messages took 14 s of CPU). Alone, the text up to
  // such an end encodes to the same tokens (llama3 and ChatML messages end at special tokens,
  // plain ones at a newline; tests/server/test_server_chat.cpp checks it against encoding each
  // prefix). Past a token that does not spell the text (a control token other than the
  // templates' ones) there are no marks: fewer marks only cost prefix reuse.
  //
  // Control tokens (BPE's <|eot_id|>, ...) decode to nothing; the templates' special strings
  // that encode to one token spell theirs.
  std::unordered_map<int, std::string_view> spelled;
  for (const std::string_view s : {"<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>",
                                   "<|im_start|>", "<|im_end|>"}) {
    if (const auto one = tok.encode(s, false); one.size() == 1) spelled.emplace(one[0], s);
  }
  std::vector<size_t> marks;
  const std::string_view text = chat.text;
  auto end = chat.message_ends.begin();
  size_t at = 0;  // bytes of text the tokens so far spell
  for (size_t k = 0; k < ids.size() && end != chat.message_ends.end(); ++k) {
    std::string piece;
    if (k == 0 && chat.add_bos && ids[0] == tok.bos_id()) {
      // BOS was added, it is not in the text
    } else if (const auto s = spelled.find(ids[k]); s != spelled.end()) {
      piece = s->second;
    } else {
      // After BOS, or first: SentencePiece drops its dummy-prefix space, which is not in the text.
      piece = tok.decode(k == 0 ? tok.bos_id() : ids[k - 1], ids[k]);
    }
    if (text.substr(at, piece.size()) != piece) break;  // the tokens no longer spell the text
    at += piece.size();
    while (end != chat.message_ends.end() && *end < at) ++end;  // ends inside this token: no mark
    if (end != chat.message_ends.end() && *end == at) {
      marks.push_back(k + 1);
      ++end;
    }
  }
  return marks;
}

}  // namespace turbokv::server
