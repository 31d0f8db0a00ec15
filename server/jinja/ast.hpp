// The parsed template: expressions and statements, as jinja2's parser builds them for the subset
// chat templates use.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "server/jinja/value.hpp"

namespace turbokv::jinja {

struct Expr;
struct Stmt;
using ExprPtr = std::unique_ptr<Expr>;
using StmtList = std::vector<std::unique_ptr<Stmt>>;

struct Expr {
  enum class Kind {
    literal,     // value
    name,        // name
    list,        // items (a list or a tuple: both are sequences here)
    dict,        // keys[i]: items[i]
    attribute,   // a.name
    subscript,   // a[b]
    slice,       // a[b:c:d] (items: start, stop, step, each may be null)
    call,        // a(args)
    filter,      // a | name(args)
    test,        // a is [not] name(args)
    unary,       // op a: not, -, +
    binary,      // a op b: or and == != < > <= >= in "not in" + - * / // % ** ~
    conditional, // items[0] if items[1] else items[2] (the else may be null: undefined)
    compare      // a chain items[0] op1 x1 op2 x2 ... (named: the (op, x) pairs)
  };
  Kind kind;
  int line = 0;
  std::string name;  // name, attribute, filter/test name, operator
  Value value;       // literal
  bool negated = false;
  std::vector<ExprPtr> items;  // operands (for call/filter/test: the callee or subject first)
  std::vector<ExprPtr> keys;   // dict keys
  std::vector<std::pair<std::string, ExprPtr>> named;  // keyword arguments
};

struct Stmt {
  enum class Kind { text, output, if_, for_, set, set_block, macro, break_, continue_ };
  Kind kind;
  int line = 0;
  std::string text;                  // text
  ExprPtr expr;                      // output, set value, for's iterable
  std::vector<std::string> targets;  // set / for targets (set: "ns.attr" is target + attr)
  std::string attr;                  // set ns.attr
  // if: conditions[i] guards bodies[i]; a last body without a condition is the else.
  std::vector<ExprPtr> conditions;
  std::vector<StmtList> bodies;
  ExprPtr filter;                    // for ... if filter
  StmtList body, else_body;          // for, set_block, macro
  std::vector<std::pair<std::string, ExprPtr>> params;  // macro parameters and defaults
};

}  // namespace turbokv::jinja
