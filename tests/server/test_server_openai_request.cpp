// parse_request: the OpenAI fields the server implements are read with their types and ranges
// checked (a bad value is a 400 naming the field), and every field it does not implement, or
// that OpenAI does not define, is a 400 with code unsupported_parameter naming it, never
// silently ignored.
#include <gtest/gtest.h>

#include <string>

#include "server/http/openai_request.hpp"

namespace turbokv::server {
namespace {

constexpr int kContext = 256;
constexpr int kVocab = 512;

ParsedRequest completion(const std::string& fields) {
  return parse_request(R"({"prompt": "In the beginning")" + (fields.empty() ? "" : ", " + fields) + "}", false,
                       kContext, kVocab);
}
ParsedRequest chat(const std::string& fields) {
  return parse_request(R"({"messages": [{"role": "user", "content": "hi"}])" + (fields.empty() ? "" : ", " + fields) +
                           "}",
                       true, kContext, kVocab);
}

// The ApiError a request raises (status 0 if none).
template <class F>
ApiError refusal(F&& parse) {
  try {
    parse();
  } catch (const ApiError& e) {
    return e;
  }
  return ApiError(0, "", "", "accepted");
}

TEST(OpenAIRequest, UnimplementedFieldsAreRefusedByName) {
  for (const std::string field : {R"("functions": [{"name": "f"}])",
                                  R"("function_call": "auto")", R"("tool_choice": "required")",
                                  R"("tool_choice": {"type": "function", "function": {"name": "f"}})",
                                  R"("response_format": {"type": "json_object"})", R"("audio": {})",
                                  R"("modalities": ["text"])", R"("store": true)", R"("metadata": {})",
                                  R"("reasoning_effort": "low")", R"("service_tier": "auto")", R"("echo": true)",
                                  R"("best_of": 2)", R"("suffix": "x")"}) {
    SCOPED_TRACE(field);
    const std::string name = field.substr(1, field.find('"', 1) - 1);
    const ApiError e = refusal([&] { chat(field); });
    EXPECT_EQ(e.status, 400);
    EXPECT_EQ(e.code, "unsupported_parameter");
    EXPECT_EQ(e.param, name);
  }
  for (const std::string field : {R"("suffix": " amen")", R"("best_of": 3)", R"("tools": [])",
                                  R"("response_format": {"type": "text"})", R"("top_logprobs": 2)",
                                  R"("max_completion_tokens": 5)"}) {
    SCOPED_TRACE(field);
    const ApiError e = refusal([&] { completion(field); });
    EXPECT_EQ(e.status, 400);
    EXPECT_EQ(e.code, "unsupported_parameter");
    EXPECT_EQ(e.param, field.substr(1, field.find('"', 1) - 1));
  }
}

TEST(OpenAIRequest, UnknownFieldsAreRefusedAndDocumentedOnesAccepted) {
  const ApiError e = refusal([] { completion(R"("temprature": 0.5)"); });
  EXPECT_EQ(e.status, 400);
  EXPECT_EQ(e.code, "unsupported_parameter");
  EXPECT_EQ(e.param, "temprature");
  EXPECT_NE(std::string(e.what()).find("Unrecognized request argument"), std::string::npos) << e.what();
  EXPECT_EQ(refusal([] { chat(R"("top_k": 40)"); }).param, "top_k");
  // Accepted: the extension ignore_eos, the harmless user, null for any field (absent), the
  // trivial best_of 1 and response_format text.
  EXPECT_TRUE(completion(R"("ignore_eos": true, "user": "u1", "tools": null, "suffix": null, "best_of": 1)")
                  .generation.ignore_eos);
  EXPECT_NO_THROW(chat(R"("response_format": {"type": "text"}, "user": "u1", "tool_choice": null)"));
}

TEST(OpenAIRequest, PenaltiesAndLogitBias) {
  const ParsedRequest p =
      completion(R"("frequency_penalty": 0.5, "presence_penalty": -2, "logit_bias": {"13": -100, "7": 2.5})");
  EXPECT_FLOAT_EQ(p.generation.sampling.frequency_penalty, 0.5f);
  EXPECT_FLOAT_EQ(p.generation.sampling.presence_penalty, -2.0f);
  ASSERT_EQ(p.generation.sampling.logit_bias.size(), 2u);
  const ParsedRequest none = chat("");
  EXPECT_EQ(none.generation.sampling.frequency_penalty, 0.0f);
  EXPECT_TRUE(none.generation.sampling.logit_bias.empty());
  const std::pair<std::string, std::string> bad[] = {
      {R"("frequency_penalty": 2.5)", "frequency_penalty"}, {R"("frequency_penalty": "1")", "frequency_penalty"},
      {R"("presence_penalty": -2.01)", "presence_penalty"},  {R"("presence_penalty": 1e999)", "presence_penalty"},
      {R"("logit_bias": [1])", "logit_bias"},                {R"("logit_bias": {"abc": 1})", "logit_bias"},
      {R"("logit_bias": {"-1": 1})", "logit_bias"},          {R"("logit_bias": {"512": 1})", "logit_bias"},
      {R"("logit_bias": {"12x": 1})", "logit_bias"},         {R"("logit_bias": {" 12": 1})", "logit_bias"},
      {R"("logit_bias": {"5": 100.5})", "logit_bias"},       {R"("logit_bias": {"5": "1"})", "logit_bias"},
      {R"("logit_bias": {"5": null})", "logit_bias"},        {R"("logit_bias": {"99999999999999999999": 1})", "logit_bias"},
  };
  for (const auto& [field, name] : bad) {
    SCOPED_TRACE(field);
    const ApiError e = refusal([&] { completion(field); });
    // nlohmann refuses 1e999 (number overflow): then the body itself is refused, naming no field.
    EXPECT_EQ(e.status, 400);
    if (field.find("1e999") == std::string::npos) {
      EXPECT_EQ(e.param, name);
    }
  }
}

TEST(OpenAIRequest, LogprobsEchoAndMaxTokensZero) {
  const ParsedRequest scored = completion(R"("echo": true, "logprobs": 1, "max_tokens": 0)");
  EXPECT_TRUE(scored.echo);
  EXPECT_EQ(scored.generation.logprobs, 1);
  EXPECT_TRUE(scored.generation.prompt_logprobs);
  EXPECT_EQ(scored.generation.max_tokens, 0);
  EXPECT_FALSE(completion(R"("logprobs": 3)").generation.prompt_logprobs);  // generated tokens only
  EXPECT_FALSE(completion(R"("echo": true)").generation.prompt_logprobs);   // text only
  EXPECT_EQ(completion("").generation.logprobs, -1);
  EXPECT_EQ(chat(R"("logprobs": true, "top_logprobs": 20)").generation.logprobs, 20);
  EXPECT_EQ(chat(R"("logprobs": true)").generation.logprobs, 0);
  EXPECT_EQ(chat(R"("logprobs": false)").generation.logprobs, -1);
  const std::pair<std::string, std::string> bad[] = {
      {R"("max_tokens": 0)", "max_tokens"},          {R"("echo": false, "max_tokens": 0)", "max_tokens"},
      {R"("logprobs": 21)", "logprobs"},             {R"("logprobs": -1)", "logprobs"},
      {R"("logprobs": true)", "logprobs"},           {R"("logprobs": 1.5)", "logprobs"},
      {R"("echo": "yes")", "echo"},                  {R"("echo": true, "max_tokens": -1)", "max_tokens"},
      {R"("n": 0)", "n"},                            {R"("n": 129)", "n"},
      {R"("n": "2")", "n"},                          {R"("n": 2.5)", "n"},
      {R"("n": 18446744073709551615)", "n"},         {R"("logprobs": 9223372036854775808)", "logprobs"},
  };
  for (const auto& [field, name] : bad) {
    SCOPED_TRACE(field);
    const ApiError e = refusal([&] { completion(field); });
    EXPECT_EQ(e.status, 400);
    EXPECT_EQ(e.param, name);
    EXPECT_EQ(std::string(e.what()).find("got -9"), std::string::npos) << e.what();  // past int64: as sent
  }
  const std::pair<std::string, std::string> bad_chat[] = {
      {R"("logprobs": 2)", "logprobs"},
      {R"("top_logprobs": 2)", "top_logprobs"},
      {R"("logprobs": false, "top_logprobs": 2)", "top_logprobs"},
      {R"("logprobs": true, "top_logprobs": 21)", "top_logprobs"},
      {R"("logprobs": true, "top_logprobs": -1)", "top_logprobs"},
      {R"("max_completion_tokens": 0)", "max_completion_tokens"},
  };
  for (const auto& [field, name] : bad_chat) {
    SCOPED_TRACE(field);
    const ApiError e = refusal([&] { chat(field); });
    EXPECT_EQ(e.status, 400);
    EXPECT_EQ(e.param, name);
  }
  EXPECT_EQ(completion(R"("n": 4)").n, 4);
}

TEST(OpenAIRequest, PromptsAreATextTokensOrABatchOfThose) {
  auto prompts = [](const std::string& prompt) {
    return parse_request(R"({"prompt": )" + prompt + "}", false, kContext, kVocab).prompts;
  };
  ASSERT_EQ(prompts(R"("In the beginning")").size(), 1u);
  EXPECT_EQ(prompts(R"("In the beginning")")[0].text, "In the beginning");
  const auto ids = prompts("[1, 2, 3]");
  ASSERT_EQ(ids.size(), 1u);
  EXPECT_TRUE(ids[0].is_tokens);
  EXPECT_EQ(ids[0].tokens, (std::vector<int>{1, 2, 3}));
  const auto batch = prompts(R"([[1, 2], [3], [4, 5, 6]])");
  ASSERT_EQ(batch.size(), 3u);
  EXPECT_EQ(batch[2].tokens, (std::vector<int>{4, 5, 6}));
  const auto texts = prompts(R"(["a", "b"])");
  ASSERT_EQ(texts.size(), 2u);
  EXPECT_EQ(texts[1].text, "b");
  for (const std::string bad : {"[]", "[[]]", "[[1], []]", R"([["a"]])", "[1, [2]]", "[[1.5]]", "5", "{}", "[[-1]]",
                                R"(["a", 3])"}) {
    SCOPED_TRACE(bad);
    const ApiError e = refusal([&] { prompts(bad); });
    EXPECT_EQ(e.status, 400);
    EXPECT_EQ(e.param, "prompt");
  }
}

}  // namespace
}  // namespace turbokv::server

namespace turbokv::server {
namespace {

const char* kWeatherTool =
    R"({"type": "function", "function": {"name": "get_weather", "description": "d", "strict": false,
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}})";

TEST(OpenAIRequest, ToolsAreReadWithTheirChoice) {
  const ParsedRequest auto_ = chat(std::string(R"("tools": [)") + kWeatherTool + R"(, {"type": "function", "function": {"name": "a-b_9"}}])");
  ASSERT_TRUE(auto_.tools.tools.is_array());
  EXPECT_EQ(auto_.tools.tools.size(), 2u);
  EXPECT_TRUE(auto_.tools.parallel);
  EXPECT_TRUE(chat(std::string(R"("tools": [)") + kWeatherTool + R"(], "tool_choice": "auto")").tools.tools.is_array());
  // "none": as without tools (not rendered, not read back)
  EXPECT_TRUE(chat(std::string(R"("tools": [)") + kWeatherTool + R"(], "tool_choice": "none")").tools.tools.is_null());
  EXPECT_TRUE(chat(R"("tools": [])").tools.tools.is_null());
  EXPECT_TRUE(chat(R"("tool_choice": "none")").tools.tools.is_null());
  EXPECT_FALSE(chat(std::string(R"("tools": [)") + kWeatherTool + R"(], "parallel_tool_calls": false)").tools.parallel);
}

TEST(OpenAIRequest, MalformedToolsAreA400NamingTheField) {
  const std::pair<std::string, std::string> cases[] = {
      {R"("tools": {"type": "function"})", "tools"},
      {R"("tools": ["get_weather"])", "tools[0]"},
      {R"("tools": [{"type": "retrieval", "function": {"name": "f"}}])", "tools[0].type"},
      {R"("tools": [{"type": "function"}])", "tools[0].function"},
      {R"("tools": [{"type": "function", "function": {"description": "no name"}}])", "tools[0].function.name"},
      {R"("tools": [{"type": "function", "function": {"name": "get weather"}}])", "tools[0].function.name"},
      {R"("tools": [{"type": "function", "function": {"name": ""}}])", "tools[0].function.name"},
      {R"("tools": [{"type": "function", "function": {"name": "f.g"}}])", "tools[0].function.name"},
      {R"("tools": [{"type": "function", "function": {"name": "a234567890123456789012345678901234567890123456789012345678901234x"}}])",
       "tools[0].function.name"},
      {std::string(R"("tools": [)") + kWeatherTool + R"(, {"type": "function", "function": {"name": "f", "parameters": "x"}}])",
       "tools[1].function.parameters"},
      {R"("tools": [{"type": "function", "function": {"name": "f", "description": 3}}])", "tools[0].function.description"},
      {R"("tool_choice": "sometimes")", "tool_choice"},
      {R"("tool_choice": 1)", "tool_choice"},
      {R"("parallel_tool_calls": "yes")", "parallel_tool_calls"},
  };
  for (const auto& [fields, param] : cases) {
    SCOPED_TRACE(fields);
    const ApiError e = refusal([&] { chat(fields); });
    EXPECT_EQ(e.status, 400);
    EXPECT_EQ(e.code, "invalid_request");
    EXPECT_EQ(e.param, param);
    EXPECT_NE(std::string(e.what()).find(param), std::string::npos) << e.what();
  }
  EXPECT_TRUE(valid_function_name(std::string(64, 'a')));
  EXPECT_FALSE(valid_function_name(std::string(65, 'a')));
}

ParsedRequest conversation(const std::string& messages) {
  return parse_request(R"({"messages": )" + messages + "}", true, kContext, kVocab);
}

TEST(OpenAIRequest, ConversationsCarryToolCallsAndResults) {
  const ParsedRequest p = conversation(R"([{"role": "user", "content": "Weather in Paris?"},
      {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
        "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}},
        {"id": "call_2", "type": "function", "function": {"name": "f", "arguments": "not json"}}]},
      {"role": "tool", "tool_call_id": "call_1", "content": "21 C"},
      {"role": "assistant", "content": "Warm.", "tool_calls": []}])");
  ASSERT_EQ(p.messages.size(), 4u);
  const ChatMessage& call = p.messages[1];
  EXPECT_TRUE(call.content_null);
  ASSERT_EQ(call.tool_calls.size(), 2u);
  // Arguments stay OpenAI's JSON text (ChatTemplate gives templates that want it the object).
  EXPECT_EQ(call.tool_calls[0]["function"]["arguments"], "{\"city\": \"Paris\"}");
  EXPECT_EQ(call.tool_calls[0]["id"], "call_1");
  EXPECT_EQ(call.tool_calls[1]["function"]["arguments"], "not json");
  EXPECT_EQ(p.messages[2].role, "tool");
  EXPECT_EQ(p.messages[2].tool_call_id, "call_1");
  EXPECT_EQ(p.messages[2].content, "21 C");
  EXPECT_FALSE(p.messages[3].content_null);

  const std::pair<std::string, std::string> refused[] = {
      {R"([{"role": "tool", "content": "21 C"}])", "messages[0].tool_call_id"},
      {R"([{"role": "assistant", "tool_calls": {"id": "x"}}])", "messages[0].tool_calls"},
      {R"([{"role": "assistant", "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": "{}"}}]}])",
       "messages[0].tool_calls[0].id"},
      {R"([{"role": "assistant", "tool_calls": [{"id": "x", "type": "function", "function": {"name": "f", "arguments": {}}}]}])",
       "messages[0].tool_calls[0].function.arguments"},
      {R"([{"role": "assistant", "tool_calls": [{"id": "x", "type": "code", "function": {"name": "f", "arguments": "{}"}}]}])",
       "messages[0].tool_calls[0].type"},
      {R"([{"role": "user", "content": "hi", "tool_calls": []}])", "messages[0].tool_calls"},
      {R"([{"role": "function", "content": "hi"}])", "messages"},
  };
  for (const auto& [messages, param] : refused) {
    SCOPED_TRACE(messages);
    const ApiError e = refusal([&] { conversation(messages); });
    EXPECT_EQ(e.status, 400);
    EXPECT_EQ(e.param, param);
  }
}

}  // namespace
}  // namespace turbokv::server
