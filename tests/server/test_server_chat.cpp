// Chat templates: family detection from GGUF Jinja templates and the prompts rendered for each
// (written out here from the published formats, not from the renderer).
#include <gtest/gtest.h>

#include "server/text/chat_template.hpp"

namespace turbokv::server {
namespace {

const std::vector<ChatMessage> kConversation = {
    {"system", "Be brief."}, {"user", "Hi"}, {"assistant", "Hello."}, {"user", "Who are you?"}};

TEST(ChatTemplate, DetectsTheFamilies) {
  EXPECT_EQ(detect_chat_format("{% for message in messages %}<|start_header_id|>{{ message['role'] }}"),
            ChatFormat::llama3);
  EXPECT_EQ(detect_chat_format("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n'"),
            ChatFormat::chatml);
  EXPECT_EQ(detect_chat_format("{{ bos_token }}[INST] {{ message }} [/INST]"), ChatFormat::plain);
  EXPECT_EQ(detect_chat_format(""), ChatFormat::plain);
}

TEST(ChatTemplate, Llama3) {
  const auto r = render_chat(ChatFormat::llama3, kConversation);
  EXPECT_FALSE(r.add_bos);
  EXPECT_EQ(r.text,
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\nHello.<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nWho are you?<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
  ASSERT_EQ(r.message_ends.size(), 4u);
  EXPECT_EQ(r.text.substr(0, r.message_ends[0]),
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>");
}

TEST(ChatTemplate, ChatMlAndPlain) {
  const auto c = render_chat(ChatFormat::chatml, {{"developer", "Be brief."}, {"user", "Hi"}});
  EXPECT_FALSE(c.add_bos);
  EXPECT_EQ(c.text, "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  const auto p = render_chat(ChatFormat::plain, {{"user", "Hi"}});
  EXPECT_TRUE(p.add_bos);
  EXPECT_EQ(p.text, "user: Hi\nassistant:");
  EXPECT_EQ(p.message_ends, std::vector<size_t>{9});
}

}  // namespace
}  // namespace turbokv::server
