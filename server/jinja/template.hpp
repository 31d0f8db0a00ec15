// A small Jinja interpreter for the subset of jinja2 Hugging Face chat templates use, rendering
// as transformers' apply_chat_template does (trim_blocks, lstrip_blocks, loop controls, its
// tojson, raise_exception, strftime_now), byte for byte (tests/server/test_server_jinja_reference.cpp
// compares it with Python's jinja2 on the real templates of the npm packages in tests/e2e).
//
//   statements  {% if/elif/else %} {% for x in xs if c %}...{% else %} {% set %} (also ns.attr
//               and blocks) {% macro %} {% break/continue %} {% raw %}, {# comments #}, {%- -%}
//   expressions literals, lists, dicts, tuples, . [] [a:b:c] calls, filters |, tests is [not],
//               not and or, == != < > <= >= in, not in, + - * / // % ** ~, x if c else y
//   globals     range, namespace, raise_exception, strftime_now, dict, loop.* in loops
//
// Anything else is a jinja::Error at parse time (an unknown statement, filter or test) or at
// render time (an unknown method or function, an operation on undefined, a limit below).
#pragma once

#include <ctime>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "server/jinja/value.hpp"

namespace turbokv::jinja {

struct StmtListHolder;

// Bounds on one render, so a hostile or broken template cannot run away: output bytes (also the
// largest string a template may build), the longest list it may build (range, +, *), statements
// and loop iterations executed, and the depth of macro calls.
struct RenderLimits {
  size_t max_output_bytes = 8u << 20;
  size_t max_list_items = 1u << 18;
  size_t max_steps = 2'000'000;
  int max_call_depth = 64;
};

struct Rendered {
  std::string text;
  std::vector<Span> marks;  // where text holds marked (outside) strings, ascending, disjoint
};

class Template {
 public:
  // Throws jinja::Error if the source does not parse or uses what the interpreter lacks.
  explicit Template(std::string_view source);
  ~Template();
  Template(Template&&) noexcept;
  Template& operator=(Template&&) noexcept;

  // Renders with `context` (a dict: the template's variables). `now` is what strftime_now
  // formats (local time); 0 means the current time. Throws jinja::Error.
  Rendered render(const Value& context, const RenderLimits& limits = {}, std::time_t now = 0) const;

 private:
  std::unique_ptr<StmtListHolder> program_;
};

}  // namespace turbokv::jinja
