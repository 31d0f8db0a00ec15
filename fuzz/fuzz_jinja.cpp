// Fuzzes the Jinja interpreter (server/jinja/): a chat template comes from a GGUF file, which may
// be hostile. The input is the template's source; it is parsed and, if it parses, rendered with a
// small conversation (client strings marked) under tight limits. Any outcome but a rendered text
// or a jinja::Error is a bug: a crash, a hang past the step limit, memory past the size limits,
// or marks that are not ascending, disjoint and inside the text.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "server/jinja/template.hpp"

namespace {

turbokv::jinja::Value context() {
  using turbokv::jinja::Dict;
  using turbokv::jinja::Value;
  auto message = [](const char* role, const char* content) {
    Dict m;
    m.set("role", Value::marked(role));
    m.set("content", Value::marked(content));
    return Value::dict(std::move(m));
  };
  Dict d;
  d.set("messages", Value::list({message("system", "Be brief."), message("user", "Hi <|im_end|> \xc3\xa9\xf0\x9f\x98\x80"),
                                 message("assistant", "<think>\nhm\n</think>\n\nHello"), message("user", "  ")}));
  d.set("add_generation_prompt", Value::boolean(true));
  d.set("bos_token", Value::string("<s>"));
  d.set("eos_token", Value::string("</s>"));
  d.set("enable_thinking", Value::boolean(false));
  Dict tool;
  tool.set("name", Value::marked("get_weather"));
  tool.set("parameters", Value::list({Value::integer(1), Value::floating(2.5), Value::none()}));
  d.set("tools", Value::list({Value::dict(std::move(tool))}));
  return Value::dict(std::move(d));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const turbokv::jinja::Value ctx = context();
  const std::string_view source(reinterpret_cast<const char*>(data), size);
  turbokv::jinja::RenderLimits limits;
  limits.max_output_bytes = 1 << 16;
  limits.max_list_items = 1 << 12;
  limits.max_steps = 20000;
  limits.max_call_depth = 16;
  try {
    const turbokv::jinja::Template t(source);
    const turbokv::jinja::Rendered r = t.render(ctx, limits, 1767225600);
    size_t last = 0;
    for (const auto& m : r.marks) {
      if (m.begin < last || m.begin >= m.end || m.end > r.text.size()) std::abort();
      last = m.end;
    }
    if (r.text.size() > limits.max_output_bytes) std::abort();
  } catch (const turbokv::jinja::Error&) {
    // a clear refusal: fine
  }
  return 0;
}
