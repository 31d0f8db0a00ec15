// The evaluator behind Template::render (internal to server/jinja/): scopes, output with marks,
// limits; builtins.cpp holds the filters, tests, methods and global functions.
#pragma once

#include <ctime>
#include <string>
#include <unordered_map>
#include <vector>

#include "server/jinja/ast.hpp"
#include "server/jinja/template.hpp"

namespace turbokv::jinja {

class Interpreter {
 public:
  Interpreter(const RenderLimits& limits, std::time_t now) : limits_(limits), now_(now) {}

  Rendered run(const StmtList& program, const Value& context);

  [[noreturn]] void fail(const std::string& what) const;
  // Charges one step (a statement, a loop iteration, a call) against the limit.
  void step();
  // A string or list of `n` bytes (elements) is about to be built: refused past the limits.
  void check_size(size_t n) const;
  void check_list_size(size_t n) const;
  std::time_t now() const { return now_; }
  const RenderLimits& limits() const { return limits_; }

  Value eval(const Expr& e);
  Value call(const Value& callee, const CallArgs& args);

 private:
  struct LoopControl {
    enum Kind { none, break_, continue_ } kind = none;
  };
  void exec(const StmtList& body);
  void exec_for(const Stmt& s);
  void exec_set(const Stmt& s);
  Value make_macro(const Stmt& s);
  void emit(const Value& v);
  Value capture(const StmtList& body);  // renders body into a string (set blocks, macros)
  Value lookup(const std::string& name) const;
  Value eval_binary(const Expr& e);
  bool compare(const std::string& op, const Value& a, const Value& b);
  CallArgs eval_args(const Expr& e, size_t first);

  using Frame = std::unordered_map<std::string, Value>;
  const RenderLimits& limits_;
  std::time_t now_;
  std::vector<Frame> frames_;  // frames_[0]: the context and top-level sets
  size_t base_ = 1;            // the current macro call's first frame (frames below it, but 0, are hidden)
  StringBuilder* out_ = nullptr;
  size_t total_output_ = 0;
  size_t steps_ = 0;
  int call_depth_ = 0;
  int line_ = 0;
  LoopControl control_;
  int loop_depth_ = 0;
};

// builtins.cpp
Value builtin_global(const std::string& name);  // undefined if there is none
Value apply_filter(Interpreter& in, const std::string& name, const Value& subject, const CallArgs& args);
bool apply_test(Interpreter& in, const std::string& name, const Value& subject, const CallArgs& args);
Value get_attribute(Interpreter& in, const Value& obj, const std::string& name);
Value get_item(Interpreter& in, const Value& obj, const Value& key);
Value get_slice(Interpreter& in, const Value& obj, const Value& start, const Value& stop, const Value& step);
bool contains(Interpreter& in, const Value& container, const Value& item);
// The items a for loop walks: a list's, a string's characters, a dict's keys.
std::vector<Value> iterate(Interpreter& in, const Value& v);
size_t utf8_length(const std::string& s);

}  // namespace turbokv::jinja
