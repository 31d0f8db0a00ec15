// Template source -> tokens, as jinja2's lexer with Hugging Face's settings (trim_blocks,
// lstrip_blocks, no trailing newline kept): text runs with whitespace control already applied,
// then the tokens inside each {{ }} / {% %} tag; comments and {% raw %} are resolved here.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace turbokv::jinja {

struct Token {
  enum class Kind { text, block_begin, block_end, var_begin, var_end, name, string, integer, floating, op, end };
  Kind kind;
  std::string text;  // the text, name, operator, or the literal's decoded value
  int line = 1;
};

// Throws jinja::Error for an unterminated tag, comment or string, or a character no token starts with.
std::vector<Token> tokenize(std::string_view source);

}  // namespace turbokv::jinja
