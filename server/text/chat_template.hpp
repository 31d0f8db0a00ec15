// Chat templates: a conversation (role, content messages) -> the prompt text a chat model was
// trained on. GGUF files carry the template as a Jinja program (tokenizer.chat_template); we
// recognize the families we render natively instead of running Jinja:
//   llama3  "<|start_header_id|>" in the template (Llama 3.x Instruct);
//   chatml  "<|im_start|>" (Qwen 2.5 / Qwen 3, many others);
//   plain   anything else, and llama2.c models: "role: content" lines then "assistant:",
//           documented in README; an unrecognized GGUF template is reported at start-up.
#pragma once

#include <string>
#include <vector>

#include "engine/tokenizer/tokenizer.hpp"

namespace turbokv::server {

struct ChatMessage {
  std::string role;  // system, user, assistant (developer is read as system)
  std::string content;
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

// Token counts at which each chat message ends, where the prompt's tokens `ids` (the encoding of
// chat.text) agree with encoding the text up to there on its own (true at the special tokens
// closing each message): the prefixes worth keeping for the conversation's next turn.
std::vector<size_t> message_marks(const engine::Tokenizer& tok, const RenderedChat& chat, const std::vector<int>& ids);

}  // namespace turbokv::server
