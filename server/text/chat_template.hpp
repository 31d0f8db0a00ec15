// Chat templates: a conversation (role, content messages) -> the prompt text a chat model was
// trained on. GGUF files carry the template as a Jinja program (tokenizer.chat_template), which
// ChatTemplate runs with the project's Jinja interpreter (server/jinja/) as transformers'
// apply_chat_template would. Where that is impossible (no template, or one using what the
// interpreter lacks: reported at start-up) it falls back to a format rendered natively, chosen
// from the template's text:
//   llama3  "<|start_header_id|>" in the template (Llama 3.x Instruct);
//   chatml  "<|im_start|>" (Qwen 2.5 / Qwen 3, many others);
//   plain   anything else, and llama2.c models: "role: content" lines then "assistant:",
//           documented in README.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/tokenizer/tokenizer.hpp"
#include "server/jinja/template.hpp"
#include "server/text/tool_calls.hpp"

namespace turbokv::server {

struct ChatMessage {
  std::string role;  // system, user, assistant, tool (developer is read as system)
  std::string content;
  // OpenAI's function calling, as the request sent it (ChatTemplate adapts it to its template):
  bool content_null = false;  // an assistant turn that only calls tools: content null
  // assistant: [{id, type: "function", function: {name, arguments: JSON text}}], or null
  nlohmann::json tool_calls = nullptr;
  std::string tool_call_id = {};  // tool: the call this result answers
  std::string name = {};          // the message's optional name
};

enum class ChatFormat { llama3, chatml, plain };

const char* chat_format_name(ChatFormat format);
// The family of a GGUF template (plain for an empty or unknown one).
ChatFormat detect_chat_format(const std::string& jinja_template);

struct RenderedChat {
  std::string text;                  // encode with BOS for plain, without for llama3 (it has its own)
  bool add_bos = true;
  std::vector<size_t> message_ends;  // byte offsets in text where each message ends
  // Where the messages' contents are in text: what users wrote, encoded with control tokens
  // off (Tokenizer::encode_marked), so "<|eot_id|>" typed in a message cannot close its turn and
  // forge the next one; only the template's own text carries control tokens. (The plain format
  // has no control tokens: there a content line "system: ..." reads like a turn. It is for
  // models without a chat template and is no boundary between roles; see README, "Serving".)
  std::vector<engine::TextRange> contents;
  // The prompt's tokens.
  std::vector<int> encode(const engine::Tokenizer& tok) const { return tok.encode_marked(text, add_bos, contents); }
};

// The prompt for `messages`, ending with the assistant's turn header.
RenderedChat render_chat(ChatFormat format, const std::vector<ChatMessage>& messages);

// A chat the template refused (its raise_exception, or an error rendering these messages): the
// client's fault, answered 400.
struct ChatTemplateError : turbokv::Error {
  using turbokv::Error::Error;
};

// A JSON value as a template value; `marked`: its strings came from a client (see jinja/value.hpp).
jinja::Value json_to_value(const nlohmann::json& j, bool marked);

// The renderer serve uses: a GGUF's Jinja template, or one of the native formats.
class ChatTemplate {
 public:
  ChatTemplate(ChatFormat format = ChatFormat::plain) : format_(format) {}  // NOLINT: a format is a template
  // The model's template (tokenizer.chat_template) with its BOS and EOS strings. When the Jinja
  // interpreter cannot run it (it does not parse, or a one-message probe chat fails to render),
  // the native format detect_chat_format picks is used and fallback_reason() says why.
  static ChatTemplate from_gguf(const std::string& jinja, std::string bos_token, std::string eos_token);

  bool is_jinja() const { return jinja_ != nullptr; }
  std::string describe() const;  // "jinja (the model's tokenizer.chat_template)" or a format name
  const std::string& fallback_reason() const { return fallback_reason_; }
  // Whether the template writes <think> tags (a reasoning model: replies split into
  // reasoning_content and content).
  bool thinks() const { return thinks_; }
  // How the template renders tool calls, so replies can be read back (tool_calls.hpp); none for
  // native formats and templates without tools.
  ToolCallFormat tool_format() const { return tool_format_; }
  // How the template wants an OpenAI conversation's calls, probed at start-up as llama-server
  // does (templates differ and fail otherwise): arguments as the object their JSON text holds
  // (a template that writes them with tojson, as Llama 3.1's) rather than the text; content ""
  // rather than None for a turn that only calls (a template that fails on None, as Qwen 3's).
  bool object_arguments() const { return object_arguments_; }
  bool null_content_as_empty() const { return null_content_as_empty_; }

  // The prompt for `messages` ending with the assistant's turn header. `kwargs` (a JSON object or
  // null: the request's chat_template_kwargs, e.g. {"enable_thinking": false}) become template
  // variables; native formats ignore them. `tools` (OpenAI's tools array, or null) is the
  // template's `tools` variable. Throws ChatTemplateError when the template refuses.
  RenderedChat render(const std::vector<ChatMessage>& messages, const nlohmann::json& kwargs = nullptr,
                      const nlohmann::json& tools = nullptr) const;
  // The Jinja render alone (tests): the template's text for these variables; `input_bytes`
  // (what the client sent) scales the output limit. Throws ChatTemplateError.
  jinja::Rendered render_jinja(const jinja::Value& context, size_t input_bytes = 0) const;

 private:
  RenderedChat render_with_jinja(const std::vector<ChatMessage>& messages, const nlohmann::json& kwargs,
                                 const nlohmann::json& tools) const;
  jinja::Value messages_value(const std::vector<ChatMessage>& messages, size_t count) const;
  void probe_tool_conventions();

  ChatFormat format_ = ChatFormat::plain;
  std::shared_ptr<const jinja::Template> jinja_;
  std::string bos_token_, eos_token_, fallback_reason_;
  bool thinks_ = false;
  ToolCallFormat tool_format_ = ToolCallFormat::none;
  bool object_arguments_ = false;
  bool null_content_as_empty_ = false;
};

// Token counts at which each chat message ends, where the prompt's tokens `ids` (the encoding of
// chat.text) agree with encoding the text up to there on its own (true at the special tokens
// closing each message): the prefixes worth keeping for the conversation's next turn.
std::vector<size_t> message_marks(const engine::Tokenizer& tok, const RenderedChat& chat, const std::vector<int>& ids);

}  // namespace turbokv::server
