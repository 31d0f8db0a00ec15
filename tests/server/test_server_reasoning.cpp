// Reasoning models' replies: the <think> part as reasoning_content (server/text/reasoning.hpp), on
// text (whole and streamed in every cut) and through the server, whose chat template here opens a
// <think> in the prompt the way DeepSeek R1's does, so the kjv model's reply is reasoning.
#include <gtest/gtest.h>
#include <httplib.h>

#include <fstream>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "engine/model/model.hpp"
#include "engine/tokenizer/tokenizer_factory.hpp"
#include "server/http/api_server.hpp"
#include "server/scheduling/scheduler.hpp"
#include "server/text/reasoning.hpp"
#include "kjv_api_fixture.hpp"
#include "serve_process.hpp"
#include "skip_policy.hpp"

namespace turbokv::server {
namespace {

using nlohmann::json;

ReplyParts streamed(const std::string& reply, bool open, size_t piece) {
  ReasoningSplitter s(open);
  ReplyParts out;
  for (size_t k = 0; k < reply.size(); k += piece) {
    const ReplyParts p = s.feed(std::string_view(reply).substr(k, piece));
    out.reasoning += p.reasoning;
    out.content += p.content;
  }
  const ReplyParts p = s.finish();
  out.reasoning += p.reasoning;
  out.content += p.content;
  return out;
}

TEST(Reasoning, SplitsTheThinkPartWholeAndStreamedAlike) {
  struct Case {
    std::string reply;
    bool open;
    std::string reasoning, content;
  };
  const Case cases[] = {
      {"<think>\nLet me see.\n</think>\n\nThe answer is 4.", false, "\nLet me see.\n", "The answer is 4."},
      {"  \n<think>a</think>b", false, "a", "b"},
      {"No thinking here.", false, "", "No thinking here."},
      {"<thinking> is not the tag", false, "", "<thinking> is not the tag"},
      {"text then <think>x</think>", false, "", "text then <think>x</think>"},  // only a leading tag opens
      {"reasoned</think>\n\nanswer", true, "reasoned", "answer"},              // the prompt opened it
      {"cut off mid-thought </thi", true, "cut off mid-thought </thi", ""},    // never closed: all reasoning
      {"<think>a</think>", false, "a", ""},
      {"<thi", false, "", "<thi"},
      {"", false, "", ""},
      {"<think></think>x </think> y", false, "", "x </think> y"},
      {"<think>😀 é</think>\t\nü", false, "😀 é", "ü"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.reply);
    const ReplyParts whole = split_reasoning(c.reply, c.open);
    EXPECT_EQ(whole.reasoning, c.reasoning);
    EXPECT_EQ(whole.content, c.content);
    for (size_t piece = 1; piece <= c.reply.size() + 1; ++piece) {
      const ReplyParts s = streamed(c.reply, c.open, piece);
      EXPECT_EQ(s.reasoning, c.reasoning) << "pieces of " << piece;
      EXPECT_EQ(s.content, c.content) << "pieces of " << piece;
    }
  }
}

TEST(Reasoning, APromptThatEndsInsideThinkOpensTheReply) {
  EXPECT_TRUE(prompt_opens_reasoning("<|Assistant|><think>\n"));
  EXPECT_FALSE(prompt_opens_reasoning("<|im_start|>assistant\n<think>\n\n</think>\n\n"));
  EXPECT_FALSE(prompt_opens_reasoning("<|im_start|>assistant\n"));
}

SchedulerOptions two_sequences() {
  SchedulerOptions o = test::small_scheduler("turboquant:bits=4,window=32,sinks=1", 64 << 20);
  o.parallel = 2;
  return o;
}

// A thinking template: the generation prompt opens <think> unless enable_thinking is false.
const char* kThinkingTemplate =
    "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}"
    "{% if add_generation_prompt %}assistant:{% if enable_thinking is defined and enable_thinking is false %} "
    "{% else %}<think>{% endif %}{% endif %}";

TEST(Reasoning, TheServerAnswersReasoningContentAsLlamaServerDoes) {
  const ChatTemplate thinking = ChatTemplate::from_gguf(kThinkingTemplate, "", "");
  ASSERT_TRUE(thinking.is_jinja()) << thinking.fallback_reason();
  ASSERT_TRUE(thinking.thinks());
  const test::ServedKjv served(two_sequences(), thinking);
  httplib::Client client = served.client();

  json body = {{"messages", {{{"role", "user"}, {"content", "And God said"}}}}, {"max_tokens", 12}, {"temperature", 0}};
  auto res = client.Post("/v1/chat/completions", body.dump(), "application/json");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  const json whole = json::parse(res->body)["choices"][0]["message"];
  const std::string reasoning = whole.value("reasoning_content", "");
  EXPECT_FALSE(reasoning.empty()) << whole.dump();
  EXPECT_EQ(whole["content"], "");  // the tag never closes in 12 tokens of scripture

  // Streamed: the deltas' reasoning_content adds up to the same text, and no content.
  body["stream"] = true;
  res = client.Post("/v1/chat/completions", body.dump(), "application/json");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200);
  std::string streamed_reasoning, streamed_content;
  for (size_t at = res->body.find("data: "); at != std::string::npos; at = res->body.find("data: ", at + 6)) {
    const size_t end = res->body.find("\n\n", at);
    const std::string data = res->body.substr(at + 6, end - at - 6);
    if (data == "[DONE]") break;
    const json delta = json::parse(data)["choices"][0]["delta"];
    streamed_reasoning += delta.value("reasoning_content", "");
    streamed_content += delta.value("content", "");
  }
  EXPECT_EQ(streamed_reasoning, reasoning);
  EXPECT_EQ(streamed_content, "");

  // chat_template_kwargs reach the template: thinking off, the same reply is content.
  body["stream"] = false;
  body["chat_template_kwargs"] = {{"enable_thinking", false}};
  res = client.Post("/v1/chat/completions", body.dump(), "application/json");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  const json off = json::parse(res->body)["choices"][0]["message"];
  EXPECT_FALSE(off.contains("reasoning_content")) << off.dump();
  EXPECT_FALSE(off["content"].get<std::string>().empty());

  body["chat_template_kwargs"] = "not an object";
  res = client.Post("/v1/chat/completions", body.dump(), "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 400);
  EXPECT_NE(res->body.find("chat_template_kwargs"), std::string::npos);
}

TEST(Reasoning, AConversationTheTemplateRefusesIsA400WithItsMessage) {
  const ChatTemplate strict = ChatTemplate::from_gguf(
      "{% for m in messages %}{% if (m.role == 'user') != (loop.index0 % 2 == 0) %}"
      "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
      "{{ m.content }}{% endfor %}",
      "", "");
  ASSERT_TRUE(strict.is_jinja()) << strict.fallback_reason();
  const test::ServedKjv served(two_sequences(), strict);
  httplib::Client client = served.client();
  const json body = {{"messages", {{{"role", "user"}, {"content", "a"}}, {{"role", "user"}, {"content", "b"}}}}, {"max_tokens", 2}};
  const auto res = client.Post("/v1/chat/completions", body.dump(), "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 400);
  EXPECT_NE(res->body.find("Conversation roles must alternate"), std::string::npos) << res->body;
}

// The binary: `serve --chat-template-file` runs a template file for a model without one (here
// the llama2.c kjv model), and one the interpreter cannot run leaves chat on the plain format.
TEST(Reasoning, ServeRunsAChatTemplateFile) {
  if (!test::have_tool()) TURBOKV_SKIP_MISSING() << "turbokv tool not built";
  const std::string dir = ::testing::TempDir();
  const std::string thinking = dir + "/thinking.jinja", broken = dir + "/broken.jinja";
  std::ofstream(thinking) << kThinkingTemplate;
  std::ofstream(broken) << "{% include 'elsewhere.jinja' %}";
  const std::string model = std::string(TURBOKV_MODELS_DIR) + "/kjv-llama-3M.bin";
  const std::string body =
      json{{"messages", {{{"role", "user"}, {"content", "And God said"}}}}, {"max_tokens", 8}, {"temperature", 0}}.dump();
  {
    test::Serve s({"--model", model, "--chat-template-file", thinking, "--parallel", "2"});
    ASSERT_TRUE(s.ready());
    const json message = json::parse(test::body_of(s.post("/v1/chat/completions", body)))["choices"][0]["message"];
    EXPECT_FALSE(message.value("reasoning_content", "").empty()) << message.dump();
    EXPECT_EQ(message["content"], "");
  }
  {
    test::Serve s({"--model", model, "--chat-template-file", broken, "--parallel", "2"});
    ASSERT_TRUE(s.ready());
    const json message = json::parse(test::body_of(s.post("/v1/chat/completions", body)))["choices"][0]["message"];
    EXPECT_FALSE(message.contains("reasoning_content"));
    EXPECT_FALSE(message["content"].get<std::string>().empty());
  }
}

}  // namespace
}  // namespace turbokv::server
