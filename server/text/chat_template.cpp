#include "server/text/chat_template.hpp"

#include <unordered_map>

namespace turbokv::server {

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
