// The Jinja interpreter's units (server/jinja/): lexing with whitespace control, parsing, Python
// semantics of the evaluator, marks on client strings, and the errors and limits that keep a bad
// or hostile template from crashing, hanging or eating memory. The byte-for-byte comparison with
// Python's jinja2 on real templates is test_server_jinja_reference.cpp.
#include <gtest/gtest.h>

#include <string>

#include "server/jinja/template.hpp"
#include "server/text/chat_template.hpp"

namespace {

using turbokv::jinja::Error;
using turbokv::jinja::RenderLimits;
using turbokv::jinja::Template;
using turbokv::jinja::Value;

std::string render(const std::string& source, const nlohmann::json& context = nlohmann::json::object(),
                   const RenderLimits& limits = {}) {
  return Template(source).render(turbokv::server::json_to_value(context, true), limits, 1767225600).text;
}

// The message of the error rendering `source` throws (parse or render), or "" if none.
std::string error_of(const std::string& source, const RenderLimits& limits = {}) {
  try {
    render(source, nlohmann::json::object(), limits);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(JinjaLexer, WhitespaceControlAsHuggingFaceRendersIt) {
  EXPECT_EQ(render("a  {%- if true -%}  b  {%- endif -%}  c"), "abc");
  EXPECT_EQ(render("a\n  {% if true %}\nb\n  {% endif %}\nc"), "a\nb\nc");  // lstrip_blocks + trim_blocks
  EXPECT_EQ(render("a\n  {{ 'v' }}\nc"), "a\n  v\nc");                       // variables keep both
  EXPECT_EQ(render("  {%+ if true %}x{% endif %}"), "  x");
  EXPECT_EQ(render("{% if true +%}\nx{% endif %}"), "\nx");
  EXPECT_EQ(render("a {# note #} b\n  {# alone #}\nc"), "a  b\nc");
  EXPECT_EQ(render("x\n"), "x");  // one trailing newline dropped (keep_trailing_newline=False)
  EXPECT_EQ(render("x\r\ny"), "x\ny");
  EXPECT_EQ(render("{% raw %}{{ x }}{% endraw %}"), "{{ x }}");
  EXPECT_EQ(render("{{ '\\n\\t\\x41\\u00e9\\'' }}"), "\n\tAé'");
}

TEST(JinjaParser, RefusesWhatItDoesNotImplementAtParseTime) {
  EXPECT_NE(error_of("{% include 'other.jinja' %}").find("{% include %} is not supported"), std::string::npos);
  EXPECT_NE(error_of("{% extends 'base' %}").find("extends"), std::string::npos);
  EXPECT_NE(error_of("{{ x | frobnicate }}").find("filter 'frobnicate'"), std::string::npos);
  EXPECT_NE(error_of("{{ x is frob }}").find("test 'frob'"), std::string::npos);
  EXPECT_NE(error_of("{% for x in y recursive %}{% endfor %}").find("recursive"), std::string::npos);
  // Unbalanced blocks, with the line.
  EXPECT_NE(error_of("line1\n{% if x %}never closed").find("missing {% endif %}"), std::string::npos);
  EXPECT_NE(error_of("{% endfor %}").find("without its opening block"), std::string::npos);
  EXPECT_NE(error_of("{% for x in y %}{% endif %}").find("without its opening block"), std::string::npos);
  EXPECT_NE(error_of("a\nb\n{{ x").find("line 3"), std::string::npos);
  EXPECT_NE(error_of("{{ 'open }}").find("unterminated string"), std::string::npos);
  EXPECT_NE(error_of("{# open").find("unterminated comment"), std::string::npos);
  EXPECT_NE(error_of("{{ a $ b }}").find("unexpected character '$'"), std::string::npos);
  EXPECT_NE(error_of("{{ }}").find("unexpected"), std::string::npos);
  EXPECT_NE(error_of("{% raw %}x").find("endraw"), std::string::npos);
  EXPECT_NE(error_of("{{ 99999999999999999999 }}").find("out of range"), std::string::npos);
}

// "{{ inner }}" (appending: GCC 12 warns falsely, -Wrestrict, on "literal" + std::string&&).
std::string var_tag(const std::string& inner) {
  std::string s = "{{ ";
  s += inner;
  s += " }}";
  return s;
}

TEST(JinjaParser, DeepNestingIsAnErrorNotAStackOverflow) {
  EXPECT_NE(error_of(var_tag(std::string(100000, '(') + "1" + std::string(100000, ')'))).find("nesting deeper"),
            std::string::npos);
  EXPECT_NE(error_of(var_tag(std::string(100000, '[') + std::string(100000, ']'))).find("nesting deeper"), std::string::npos);
  std::string ifs;
  for (int k = 0; k < 10000; ++k) ifs += "{% if true %}";
  EXPECT_NE(error_of(ifs).find("nesting deeper"), std::string::npos);
  EXPECT_NE(error_of(var_tag(std::string(100000, '-') + "1")).find("nesting deeper"), std::string::npos);
  EXPECT_NE(error_of(var_tag([] { std::string s; for (int k = 0; k < 100000; ++k) s += "not "; return s; }() + "1"))
                .find("nesting deeper"),
            std::string::npos);
}

TEST(JinjaEval, PythonSemantics) {
  EXPECT_EQ(render("{{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 1 / 4 }} {{ 2 ** 62 }} {{ 1e16 }} {{ 1e-5 }} {{ 0.5e-4 }}"),
            "3 -4 2 0.25 4611686018427387904 1e+16 1e-05 5e-05");
  EXPECT_EQ(render("{{ none }} {{ true }} {{ [1, 'a', none] }} {{ {'k': [1.0]} }} {{ (1,) }} {{ undefined_name }}|"),
            "None True [1, 'a', None] {'k': [1.0]} (1,) |");
  EXPECT_EQ(render("{{ 'héllo'[1] }} {{ 'héllo' | length }} {{ 'héllo'[::-1] }} {{ '😀x'[1:] }}"), "é 5 olléh x");
  EXPECT_EQ(render("{{ 1 < 2 < 3 }} {{ 1 < 3 < 2 }} {{ 0 or '' or 'z' }} {{ 'a' ~ 1 ~ none }}"), "True False z a1None");
  EXPECT_EQ(render("{% set ns = namespace(n=0) %}{% for i in range(5) %}{% set ns.n = ns.n + i %}{% endfor %}{{ ns.n }}"), "10");
  EXPECT_EQ(render("{% set x = 1 %}{% for i in [1] %}{% set x = 2 %}{% endfor %}{{ x }}"), "1");  // loops scope sets
  EXPECT_EQ(render("{% macro m(a, b='B') %}{{ a }}{{ b }}{% endmacro %}{{ m('x') }}{{ m('x', b='y') }}"), "xBxy");
  EXPECT_EQ(render("{% for x in [1, 2, 3, 4] %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 4 %}{% break %}{% endif %}{{ x }}{% endfor %}"),
            "13");
  EXPECT_EQ(render("{{ {'a': 1, 'b': [true, none]} | tojson }}"), "{\"a\": 1, \"b\": [true, null]}");
  EXPECT_EQ(render("{{ [1, 'é\"'] | tojson(indent=1) }}"), "[\n 1,\n \"é\\\"\"\n]");
  EXPECT_EQ(render("{{ strftime_now('%Y-%m-%d') }}").size(), 10u);
}

TEST(JinjaEval, ErrorsNameTheProblem) {
  EXPECT_NE(error_of("{{ x + 1 }}").find("undefined"), std::string::npos);
  EXPECT_NE(error_of("{{ x.y }}").find("undefined"), std::string::npos);
  EXPECT_NE(error_of("{{ 'a' + 1 }}").find("unsupported operand types for +: 'str' and 'int'"), std::string::npos);
  EXPECT_NE(error_of("{{ 1 // 0 }}").find("division by zero"), std::string::npos);
  EXPECT_NE(error_of("{{ raise_exception('Roles must alternate') }}").find("Roles must alternate"), std::string::npos);
  EXPECT_NE(error_of("{% break %}").find("outside a loop"), std::string::npos);
  EXPECT_NE(error_of("{% set x = 1 %}{% set x.a = 2 %}").find("namespace"), std::string::npos);
  EXPECT_NE(error_of("{{ nosuchfunction() }}").find("undefined function"), std::string::npos);
  EXPECT_NE(error_of("{{ 'a'.nosuchmethod() }}").find("undefined function"), std::string::npos);
  EXPECT_NE(error_of("{{ 9223372036854775807 + 1 }}").find("overflow"), std::string::npos);
  EXPECT_EQ(render("{{ (-1) ** 9223372036854775807 }}"), "-1");  // closed form, no 2^63-step loop
  // Integer edges are errors, not undefined behaviour (UBSan runs these in CI).
  EXPECT_NE(error_of("{{ -(-9223372036854775807 - 1) }}").find("overflow"), std::string::npos);
  EXPECT_NE(error_of("{{ (-9223372036854775807 - 1) | abs }}").find("overflow"), std::string::npos);
  EXPECT_NE(error_of("{{ 1e300 | int }}").find("out of range"), std::string::npos);
  EXPECT_NE(error_of("{{ [9223372036854775807, 1] | sum }}").find("overflow"), std::string::npos);
  EXPECT_EQ(render("{{ range(0, 9223372036854775807, 4611686018427387904) | list }}"), "[0, 4611686018427387904]");
  EXPECT_EQ(render("{{ [1, 2, 3][1::9223372036854775807] }} {{ 'abc'[::-9223372036854775807] }}"), "[2] c");
}

TEST(JinjaLimits, RunawayLoopsRecursionAndHugeOutputsStop) {
  RenderLimits small;
  small.max_steps = 100000;
  small.max_output_bytes = 1 << 20;
  EXPECT_NE(error_of("{% for i in range(1000) %}{% for j in range(1000) %}{% endfor %}{% endfor %}", small).find("steps"),
            std::string::npos);
  EXPECT_NE(error_of("{{ range(1000000000000) | length }}", small).find("the sandbox allows 100000"), std::string::npos);
  EXPECT_NE(error_of("{{ ([1] * 1000000000000) | length }}", small).find("exceeds the limit"), std::string::npos);
  EXPECT_NE(error_of("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", small).find("nested deeper"), std::string::npos);
  EXPECT_NE(error_of("{{ 'x' * 100000000000 }}", small).find("exceeds the limit"), std::string::npos);
  EXPECT_NE(error_of("{% set ns = namespace(s='x') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}", small)
                .find("exceeds the limit"),
            std::string::npos);
  EXPECT_NE(error_of("{% set ns = namespace(s=[1]) %}{% for i in range(64) %}{% set ns.s = ns.s + ns.s %}{% endfor %}", small)
                .find("exceeds the limit"),
            std::string::npos);
  EXPECT_NE(error_of("{% for i in range(100000) %}{{ 'abcdefghijklmnopqrstuvwxyz' }}{% endfor %}", small).find("output exceeds"),
            std::string::npos);
  // Within the limits the same constructs work.
  EXPECT_EQ(render("{% macro f(n) %}{% if n > 0 %}{{ f(n - 1) }}{% endif %}{{ n }}{% endmacro %}{{ f(5) }}"), "012345");
}

TEST(JinjaMarks, ClientStringsStayMarkedThroughSlicingStrippingAndJoining) {
  const nlohmann::json ctx = {{"m", "  Hello <|im_end|>  "}};
  const Template t("A{{ m | trim }}B{{ m[2:7] }}C{{ 'x' + m.strip() + 'y' }}D{{ [m.strip(), 'lit'] | join(',') }}E{{ m.replace('H', 'J') }}");
  const auto r = t.render(turbokv::server::json_to_value(ctx, true));
  std::string marked;
  for (const auto& s : r.marks) marked.append("[").append(r.text, s.begin, s.end - s.begin).append("]");
  EXPECT_EQ(marked, "[Hello <|im_end|>][Hello][Hello <|im_end|>][Hello <|im_end|>][  Jello <|im_end|>  ]");
  // Template text is never marked; unmarked context strings (the template's own variables) neither.
  const auto plain = t.render(turbokv::server::json_to_value(ctx, false));
  EXPECT_TRUE(plain.marks.empty());
}

TEST(ChatTemplateJinja, RendersTheGgufTemplateAndFallsBackWithAReason) {
  using turbokv::server::ChatTemplate;
  const std::string qwen_like =
      "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
      "{% if add_generation_prompt %}<|im_start|>assistant\n{% if enable_thinking is defined and enable_thinking is false %}"
      "<think>\n\n</think>\n\n{% endif %}{% endif %}";
  const ChatTemplate t = ChatTemplate::from_gguf(qwen_like, "", "<|im_end|>");
  ASSERT_TRUE(t.is_jinja()) << t.fallback_reason();
  EXPECT_TRUE(t.thinks());
  const auto chat = t.render({{"system", "S"}, {"user", "U"}});
  EXPECT_EQ(chat.text, "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_FALSE(chat.add_bos);
  ASSERT_EQ(chat.contents.size(), 4u);  // the roles and the contents came from the client
  EXPECT_EQ(chat.text.substr(chat.contents[1].begin, chat.contents[1].end - chat.contents[1].begin), "S");
  // Message ends where the conversation cut there renders to a prefix: after message 1 and 2.
  EXPECT_EQ(chat.message_ends, (std::vector<size_t>{31, 60}));
  const auto off = t.render({{"user", "U"}}, {{"enable_thinking", false}});
  EXPECT_EQ(off.text, "<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");

  // A template the interpreter cannot run: the native format its text suggests, and why.
  const ChatTemplate fallback = ChatTemplate::from_gguf("{% include 'x' %}<|im_start|>", "", "");
  EXPECT_FALSE(fallback.is_jinja());
  EXPECT_EQ(fallback.describe(), "chatml");
  EXPECT_NE(fallback.fallback_reason().find("include"), std::string::npos);
  const ChatTemplate refuses = ChatTemplate::from_gguf("{{ raise_exception('no') }}", "", "");
  EXPECT_FALSE(refuses.is_jinja());
  EXPECT_EQ(refuses.describe(), "plain");
  EXPECT_FALSE(ChatTemplate::from_gguf("", "", "").is_jinja());

  // A conversation the template refuses is the client's error.
  const ChatTemplate strict = ChatTemplate::from_gguf(
      "{% for m in messages %}{% if m.role == 'system' %}{{ raise_exception('no system role') }}{% endif %}{{ m.content }}{% endfor %}", "", "");
  ASSERT_TRUE(strict.is_jinja());
  try {
    strict.render({{"system", "S"}, {"user", "U"}});
    ADD_FAILURE() << "no error";
  } catch (const turbokv::server::ChatTemplateError& e) {
    EXPECT_NE(std::string(e.what()).find("no system role"), std::string::npos);
  }
}

}  // namespace
