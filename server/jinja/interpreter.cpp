#include "server/jinja/interpreter.hpp"

#include <cmath>

#include "server/jinja/parser.hpp"

namespace turbokv::jinja {

struct StmtListHolder {
  StmtList program;
};

Template::Template(std::string_view source) : program_(std::make_unique<StmtListHolder>(StmtListHolder{parse(source)})) {}
Template::~Template() = default;
Template::Template(Template&&) noexcept = default;
Template& Template::operator=(Template&&) noexcept = default;

Rendered Template::render(const Value& context, const RenderLimits& limits, std::time_t now) const {
  Interpreter in(limits, now == 0 ? std::time(nullptr) : now);
  return in.run(program_->program, context);
}

void Interpreter::fail(const std::string& what) const {
  throw Error("template line " + std::to_string(line_) + ": " + what);
}

void Interpreter::step() {
  if (++steps_ > limits_.max_steps) {
    fail("the render took more than " + std::to_string(limits_.max_steps) + " steps (a runaway loop?)");
  }
}

void Interpreter::check_size(size_t n) const {
  if (n > limits_.max_output_bytes) {
    fail("a value of " + std::to_string(n) + " bytes or items exceeds the limit of " +
         std::to_string(limits_.max_output_bytes));
  }
}

void Interpreter::check_list_size(size_t n) const {
  if (n > limits_.max_list_items) {
    fail("a list of " + std::to_string(n) + " items exceeds the limit of " + std::to_string(limits_.max_list_items));
  }
}

Rendered Interpreter::run(const StmtList& program, const Value& context) {
  frames_.assign(1, {});
  if (context.is_mapping()) {
    for (const auto& [k, v] : context.mapping().items) frames_[0][k] = v;
  }
  StringBuilder out;
  out_ = &out;
  exec(program);
  return {std::move(out.text), std::move(out.marks)};
}

void Interpreter::emit(const Value& v) {
  const Value s = v.to_str();
  total_output_ += s.str().size();
  if (total_output_ > limits_.max_output_bytes) {
    fail("the output exceeds the limit of " + std::to_string(limits_.max_output_bytes) + " bytes");
  }
  out_->append(s);
}

Value Interpreter::capture(const StmtList& body) {
  StringBuilder inner;
  StringBuilder* outer = out_;
  out_ = &inner;
  try {
    exec(body);
  } catch (...) {
    out_ = outer;
    throw;
  }
  out_ = outer;
  return inner.take();
}

Value Interpreter::lookup(const std::string& name) const {
  for (size_t k = frames_.size(); k-- > base_;) {
    if (const auto it = frames_[k].find(name); it != frames_[k].end()) return it->second;
  }
  if (const auto it = frames_[0].find(name); it != frames_[0].end()) return it->second;
  return builtin_global(name);
}

void Interpreter::exec(const StmtList& body) {
  for (const auto& sp : body) {
    const Stmt& s = *sp;
    line_ = s.line;
    step();
    switch (s.kind) {
      case Stmt::Kind::text: emit(Value::string(s.text)); break;
      case Stmt::Kind::output: emit(eval(*s.expr)); break;
      case Stmt::Kind::if_: {
        size_t k = 0;
        for (; k < s.conditions.size(); ++k) {
          if (eval(*s.conditions[k]).truthy()) break;
        }
        if (k < s.bodies.size()) exec(s.bodies[k]);
        break;
      }
      case Stmt::Kind::for_: exec_for(s); break;
      case Stmt::Kind::set: exec_set(s); break;
      case Stmt::Kind::set_block: frames_.back()[s.targets[0]] = capture(s.body); break;
      case Stmt::Kind::macro: frames_.back()[s.targets[0]] = make_macro(s); break;
      case Stmt::Kind::break_:
      case Stmt::Kind::continue_:
        if (loop_depth_ == 0) fail(std::string("'") + (s.kind == Stmt::Kind::break_ ? "break" : "continue") + "' outside a loop");
        control_.kind = s.kind == Stmt::Kind::break_ ? LoopControl::break_ : LoopControl::continue_;
        break;
    }
    if (control_.kind != LoopControl::none) return;
  }
}

void Interpreter::exec_set(const Stmt& s) {
  Value v = eval(*s.expr);
  if (!s.attr.empty()) {
    const Value target = lookup(s.targets[0]);
    if (target.kind() != Value::Kind::ns) fail("can only set attributes of a namespace(), '" + s.targets[0] + "' is not one");
    target.namespace_dict().set(s.attr, std::move(v));
    return;
  }
  if (s.targets.size() == 1) {
    frames_.back()[s.targets[0]] = std::move(v);
    return;
  }
  const std::vector<Value> parts = iterate(*this, v);
  if (parts.size() != s.targets.size()) fail("cannot unpack " + std::to_string(parts.size()) + " values into " + std::to_string(s.targets.size()) + " names");
  for (size_t k = 0; k < parts.size(); ++k) frames_.back()[s.targets[k]] = parts[k];
}

void Interpreter::exec_for(const Stmt& s) {
  const int line = s.line;
  std::vector<Value> items = iterate(*this, eval(*s.expr));
  auto bind = [&](Frame& frame, const Value& item) {
    if (s.targets.size() == 1) {
      frame[s.targets[0]] = item;
      return;
    }
    const std::vector<Value> parts = iterate(*this, item);
    if (parts.size() != s.targets.size()) fail("cannot unpack " + std::to_string(parts.size()) + " values into " + std::to_string(s.targets.size()) + " loop variables");
    for (size_t k = 0; k < parts.size(); ++k) frame[s.targets[k]] = parts[k];
  };
  if (s.filter) {  // "for x in xs if cond": the loop (and loop.length) sees only the items that pass
    std::vector<Value> kept;
    for (const Value& item : items) {
      step();
      frames_.emplace_back();
      bind(frames_.back(), item);
      const bool keep = eval(*s.filter).truthy();
      frames_.pop_back();
      if (keep) kept.push_back(item);
    }
    items = std::move(kept);
  }
  if (items.empty()) {
    exec(s.else_body);
    return;
  }
  ++loop_depth_;
  const auto n = static_cast<int64_t>(items.size());
  for (int64_t k = 0; k < n; ++k) {
    line_ = line;
    step();
    Dict loop;
    loop.set("index0", Value::integer(k));
    loop.set("index", Value::integer(k + 1));
    loop.set("revindex0", Value::integer(n - 1 - k));
    loop.set("revindex", Value::integer(n - k));
    loop.set("first", Value::boolean(k == 0));
    loop.set("last", Value::boolean(k == n - 1));
    loop.set("length", Value::integer(n));
    loop.set("depth", Value::integer(1));
    loop.set("depth0", Value::integer(0));
    if (k > 0) loop.set("previtem", items[static_cast<size_t>(k - 1)]);
    if (k + 1 < n) loop.set("nextitem", items[static_cast<size_t>(k + 1)]);
    loop.set("cycle", Value::function("loop.cycle", [k](Interpreter& in, const CallArgs& a) {
      if (a.positional.empty()) in.fail("loop.cycle() needs at least one argument");
      return a.positional[static_cast<size_t>(k) % a.positional.size()];
    }));
    frames_.emplace_back();
    frames_.back()["loop"] = Value::ns(std::move(loop));
    bind(frames_.back(), items[static_cast<size_t>(k)]);
    try {
      exec(s.body);
    } catch (...) {
      frames_.pop_back();
      --loop_depth_;
      throw;
    }
    frames_.pop_back();
    const auto control = control_.kind;
    control_.kind = LoopControl::none;
    if (control == LoopControl::break_) break;
  }
  --loop_depth_;
}

Value Interpreter::make_macro(const Stmt& s) {
  const Stmt* def = &s;
  return Value::function(s.targets[0], [def](Interpreter& in, const CallArgs& args) {
    if (args.positional.size() > def->params.size()) {
      in.fail("macro '" + def->targets[0] + "' takes " + std::to_string(def->params.size()) + " arguments, got " +
              std::to_string(args.positional.size()));
    }
    if (++in.call_depth_ > in.limits_.max_call_depth) {
      --in.call_depth_;
      in.fail("macro calls nested deeper than " + std::to_string(in.limits_.max_call_depth) + " (runaway recursion?)");
    }
    Frame frame;
    for (size_t k = 0; k < def->params.size(); ++k) {
      const auto& [pname, pdefault] = def->params[k];
      if (const Value* v = args.get(k, pname)) {
        frame[pname] = *v;
      } else if (pdefault) {
        frame[pname] = in.eval(*pdefault);
      } else {
        frame[pname] = Value();
      }
    }
    for (const auto& [key, v] : args.named) {
      bool known = false;
      for (const auto& p : def->params) known = known || p.first == key;
      if (!known) in.fail("macro '" + def->targets[0] + "' has no parameter '" + key + "'");
    }
    const size_t saved_base = in.base_;
    const int saved_loops = in.loop_depth_;
    const int saved_line = in.line_;
    in.frames_.push_back(std::move(frame));
    in.base_ = in.frames_.size() - 1;
    in.loop_depth_ = 0;
    auto restore = [&] {
      in.frames_.pop_back();
      in.base_ = saved_base;
      in.loop_depth_ = saved_loops;
      in.line_ = saved_line;
      --in.call_depth_;
    };
    Value out;
    try {
      out = in.capture(def->body);
    } catch (...) {
      restore();
      throw;
    }
    restore();
    return out;
  });
}

CallArgs Interpreter::eval_args(const Expr& e, size_t first) {
  CallArgs args;
  for (size_t k = first; k < e.items.size(); ++k) args.positional.push_back(eval(*e.items[k]));
  for (const auto& [key, v] : e.named) args.named.emplace_back(key, eval(*v));
  return args;
}

Value Interpreter::call(const Value& callee, const CallArgs& args) {
  if (callee.kind() != Value::Kind::function) {
    fail(callee.is_undefined() ? "call of an undefined function" : std::string("a ") + callee.type_name() + " is not callable");
  }
  step();
  return callee.fn().call(*this, args);
}

Value Interpreter::eval(const Expr& e) {
  if (e.line) line_ = e.line;
  switch (e.kind) {
    case Expr::Kind::literal: return e.value;
    case Expr::Kind::name: return lookup(e.name);
    case Expr::Kind::list: {
      std::vector<Value> items;
      for (const auto& item : e.items) items.push_back(eval(*item));
      return e.name == "tuple" ? Value::tuple(std::move(items)) : Value::list(std::move(items));
    }
    case Expr::Kind::dict: {
      Dict d;
      for (size_t k = 0; k < e.keys.size(); ++k) {
        const Value key = eval(*e.keys[k]);
        if (!key.is_string()) fail("dict literal keys must be strings here");
        d.set(key.str(), eval(*e.items[k]));
      }
      return Value::dict(std::move(d));
    }
    case Expr::Kind::attribute: return get_attribute(*this, eval(*e.items[0]), e.name);
    case Expr::Kind::subscript: {
      const Value obj = eval(*e.items[0]);
      return get_item(*this, obj, eval(*e.items[1]));
    }
    case Expr::Kind::slice: {
      const Value obj = eval(*e.items[0]);
      auto part = [&](size_t k) { return e.items[k] ? eval(*e.items[k]) : Value::none(); };
      return get_slice(*this, obj, part(1), part(2), part(3));
    }
    case Expr::Kind::call: {
      const Value callee = eval(*e.items[0]);
      return call(callee, eval_args(e, 1));
    }
    case Expr::Kind::filter: {
      const Value subject = eval(*e.items[0]);
      return apply_filter(*this, e.name, subject, eval_args(e, 1));
    }
    case Expr::Kind::test: {
      const Value subject = e.name == "defined" || e.name == "undefined" ? eval(*e.items[0]) : eval(*e.items[0]);
      const bool r = apply_test(*this, e.name, subject, eval_args(e, 1));
      return Value::boolean(r != e.negated);
    }
    case Expr::Kind::unary: {
      const Value v = eval(*e.items[0]);
      if (e.name == "not") return Value::boolean(!v.truthy());
      if (!v.is_number()) fail(std::string("bad operand type for unary ") + e.name + ": '" + v.type_name() + "'");
      if (e.name == "+") return v.kind() == Value::Kind::boolean ? Value::integer(v.as_int()) : v;
      if (v.kind() == Value::Kind::floating) return Value::floating(-v.as_float());
      if (v.as_int() == INT64_MIN) fail("integer overflow in unary -");
      return Value::integer(-v.as_int());
    }
    case Expr::Kind::binary: return eval_binary(e);
    case Expr::Kind::compare: {
      Value left = eval(*e.items[0]);
      for (const auto& [op, operand] : e.named) {
        Value right = eval(*operand);
        if (!compare(op, left, right)) return Value::boolean(false);
        left = std::move(right);
      }
      return Value::boolean(true);
    }
    case Expr::Kind::conditional:
      if (eval(*e.items[1]).truthy()) return eval(*e.items[0]);
      return e.items[2] ? eval(*e.items[2]) : Value();
  }
  return Value();
}

namespace {

int64_t floor_div(int64_t a, int64_t b) {
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

}  // namespace

bool Interpreter::compare(const std::string& op, const Value& a, const Value& b) {
  if (op == "==") return equal(a, b);
  if (op == "!=") return !equal(a, b);
  if (op == "in") return contains(*this, b, a);
  if (op == "not in") return !contains(*this, b, a);
  int c = 0;
  if (a.is_number() && b.is_number()) {
    if (a.kind() != Value::Kind::floating && b.kind() != Value::Kind::floating) {
      c = a.as_int() < b.as_int() ? -1 : a.as_int() > b.as_int() ? 1 : 0;
    } else {
      const double x = a.as_float(), y = b.as_float();
      c = x < y ? -1 : x > y ? 1 : 0;
    }
  } else if (a.is_string() && b.is_string()) {
    c = a.str().compare(b.str());
    c = c < 0 ? -1 : c > 0 ? 1 : 0;
  } else if (a.is_undefined() || b.is_undefined()) {
    fail("'" + op + "' with an undefined value");
  } else {
    fail(std::string("'") + op + "' not supported between '" + a.type_name() + "' and '" + b.type_name() + "'");
  }
  if (op == "<") return c < 0;
  if (op == ">") return c > 0;
  if (op == "<=") return c <= 0;
  return c >= 0;
}

Value Interpreter::eval_binary(const Expr& e) {
  const std::string& op = e.name;
  if (op == "and") {
    Value a = eval(*e.items[0]);
    return a.truthy() ? eval(*e.items[1]) : a;
  }
  if (op == "or") {
    Value a = eval(*e.items[0]);
    return a.truthy() ? a : eval(*e.items[1]);
  }
  const Value a = eval(*e.items[0]);
  const Value b = eval(*e.items[1]);
  line_ = e.line;
  if (op == "~") {
    const Value sa = a.to_str(), sb = b.to_str();
    check_size(sa.str().size() + sb.str().size());
    return concat(sa, sb);
  }
  if (op == "==" || op == "!=" || op == "in" || op == "not in" || op == "<" || op == ">" || op == "<=" || op == ">=") {
    return Value::boolean(compare(op, a, b));
  }
  auto type_error = [&]() {
    if (a.is_undefined() || b.is_undefined()) fail("'" + op + "' with an undefined value");
    fail(std::string("unsupported operand types for ") + op + ": '" + a.type_name() + "' and '" + b.type_name() + "'");
  };
  if (op == "+") {
    if (a.is_string() && b.is_string()) {
      check_size(a.str().size() + b.str().size());
      return concat(a, b);
    }
    if (a.is_list() && b.is_list()) {
      check_list_size(a.items().size() + b.items().size());
      std::vector<Value> items = a.items();
      items.insert(items.end(), b.items().begin(), b.items().end());
      return Value::list(std::move(items));
    }
  }
  if (op == "*") {
    const Value* seq = a.is_string() || a.is_list() ? &a : b.is_string() || b.is_list() ? &b : nullptr;
    const Value* count = seq == &a ? &b : &a;
    if (seq != nullptr && count->is_number() && count->kind() != Value::Kind::floating) {
      const int64_t n = std::max<int64_t>(0, count->as_int());
      const size_t unit = seq->is_string() ? seq->str().size() : seq->items().size();
      const size_t cap = seq->is_string() ? limits_.max_output_bytes : limits_.max_list_items;
      if (unit != 0 && static_cast<uint64_t>(n) > cap / unit) {
        seq->is_string() ? check_size(cap + 1) : check_list_size(cap + 1);
      }
      if (seq->is_string()) {
        StringBuilder out;
        for (int64_t k = 0; k < n; ++k) out.append(*seq);
        return out.take();
      }
      std::vector<Value> items;
      for (int64_t k = 0; k < n; ++k) items.insert(items.end(), seq->items().begin(), seq->items().end());
      return Value::list(std::move(items));
    }
  }
  if (!a.is_number() || !b.is_number()) type_error();
  const bool floating = a.kind() == Value::Kind::floating || b.kind() == Value::Kind::floating;
  if (op == "/") {
    if (b.as_float() == 0) fail("division by zero");
    return Value::floating(a.as_float() / b.as_float());
  }
  if (floating) {
    const double x = a.as_float(), y = b.as_float();
    if (op == "+") return Value::floating(x + y);
    if (op == "-") return Value::floating(x - y);
    if (op == "*") return Value::floating(x * y);
    if (op == "**") return Value::floating(std::pow(x, y));
    if (y == 0) fail("division by zero");
    if (op == "//") return Value::floating(std::floor(x / y));
    if (op == "%") {
      double r = std::fmod(x, y);
      if (r != 0 && ((r < 0) != (y < 0))) r += y;
      return Value::floating(r);
    }
  } else {
    const int64_t x = a.as_int(), y = b.as_int();
    int64_t r = 0;
    if (op == "+" && !__builtin_add_overflow(x, y, &r)) return Value::integer(r);
    if (op == "-" && !__builtin_sub_overflow(x, y, &r)) return Value::integer(r);
    if (op == "*" && !__builtin_mul_overflow(x, y, &r)) return Value::integer(r);
    if (op == "**") {
      if (y < 0) return Value::floating(std::pow(static_cast<double>(x), static_cast<double>(y)));
      if (x == 0 || x == 1) return Value::integer(y == 0 ? 1 : x);
      if (x == -1) return Value::integer(y % 2 == 0 ? 1 : -1);
      int64_t p = 1;
      for (int64_t k = 0; k < y; ++k) {  // |x| >= 2: overflows within 63 steps
        if (__builtin_mul_overflow(p, x, &p)) fail("integer overflow in **");
      }
      return Value::integer(p);
    }
    if (op == "//" || op == "%") {
      if (y == 0) fail("division by zero");
      if (x == INT64_MIN && y == -1) fail("integer overflow");
      const int64_t q = floor_div(x, y);
      return Value::integer(op == "//" ? q : x - q * y);
    }
    if (op == "+" || op == "-" || op == "*") fail("integer overflow in " + op);
  }
  fail("unsupported operator " + op);
}

}  // namespace turbokv::jinja
