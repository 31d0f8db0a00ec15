// Tokens -> statements. Anything outside the subset (a statement, filter or test we do not
// implement, an unbalanced block) is a jinja::Error naming it and its line, at parse time, so a
// server learns at start-up that it cannot run a model's template.
#pragma once

#include <string_view>

#include "server/jinja/ast.hpp"

namespace turbokv::jinja {

StmtList parse(std::string_view source);

// The filters and tests the interpreter implements (builtins.cpp); the parser refuses others.
bool is_known_filter(std::string_view name);
bool is_known_test(std::string_view name);

}  // namespace turbokv::jinja
