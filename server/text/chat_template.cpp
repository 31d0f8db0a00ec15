#include "server/text/chat_template.hpp"

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
  switch (format) {
    case ChatFormat::llama3:
      out.add_bos = false;
      out.text = "<|begin_of_text|>";
      for (const auto& m : messages) {
        out.text += "<|start_header_id|>" + role_of(m) + "<|end_header_id|>\n\n" + m.content + "<|eot_id|>";
        out.message_ends.push_back(out.text.size());
      }
      out.text += "<|start_header_id|>assistant<|end_header_id|>\n\n";
      break;
    case ChatFormat::chatml:
      out.add_bos = false;
      for (const auto& m : messages) {
        out.text += "<|im_start|>" + role_of(m) + "\n" + m.content + "<|im_end|>\n";
        out.message_ends.push_back(out.text.size());
      }
      out.text += "<|im_start|>assistant\n";
      break;
    case ChatFormat::plain:
      for (const auto& m : messages) {
        out.text += role_of(m) + ": " + m.content + "\n";
        out.message_ends.push_back(out.text.size());
      }
      out.text += "assistant:";
      break;
  }
  return out;
}

}  // namespace turbokv::server
