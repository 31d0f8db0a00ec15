#include "server/jinja/parser.hpp"

#include <charconv>
#include <cstdlib>
#include <string>

#include "server/jinja/lexer.hpp"

namespace turbokv::jinja {

namespace {

constexpr int kMaxNesting = 128;  // expression and block depth: bounds the parser's recursion

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : t_(std::move(tokens)) {}

  StmtList parse_all() {
    std::string end_tag;
    StmtList body = parse_body({}, end_tag);
    return body;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw Error("template line " + std::to_string(cur().line) + ": " + what);
  }
  const Token& cur() const { return t_[pos_]; }
  const Token& peek(size_t k = 1) const { return t_[std::min(pos_ + k, t_.size() - 1)]; }
  bool is_op(const char* op) const { return cur().kind == Token::Kind::op && cur().text == op; }
  bool is_name(const char* n) const { return cur().kind == Token::Kind::name && cur().text == n; }
  void expect_op(const char* op) {
    if (!is_op(op)) fail(std::string("expected '") + op + "', got '" + describe(cur()) + "'");
    ++pos_;
  }
  std::string expect_name() {
    if (cur().kind != Token::Kind::name) fail("expected a name, got '" + describe(cur()) + "'");
    return t_[pos_++].text;
  }
  void expect_block_end() {
    if (cur().kind != Token::Kind::block_end) fail("expected the end of the tag, got '" + describe(cur()) + "'");
    ++pos_;
  }
  static std::string describe(const Token& t) {
    switch (t.kind) {
      case Token::Kind::block_end: return "%}";
      case Token::Kind::var_end: return "}}";
      case Token::Kind::end: return "end of template";
      default: return t.text;
    }
  }
  struct Depth {
    explicit Depth(Parser& p) : p_(p) {
      if (++p_.depth_ > kMaxNesting) p_.fail("nesting deeper than " + std::to_string(kMaxNesting));
    }
    ~Depth() { --p_.depth_; }
    Parser& p_;
  };

  // Statements until one of `ends` (a block tag name); its name is left in end_tag, the tag's
  // name consumed but not the rest of it.
  StmtList parse_body(const std::vector<std::string>& ends, std::string& end_tag) {
    Depth depth(*this);
    StmtList out;
    while (true) {
      const Token& t = cur();
      if (t.kind == Token::Kind::end) {
        if (!ends.empty()) fail("missing {% " + ends.back() + " %} (the template ended inside a block)");
        return out;
      }
      if (t.kind == Token::Kind::text) {
        auto s = std::make_unique<Stmt>();
        s->kind = Stmt::Kind::text;
        s->line = t.line;
        s->text = t.text;
        out.push_back(std::move(s));
        ++pos_;
      } else if (t.kind == Token::Kind::var_begin) {
        ++pos_;
        auto s = std::make_unique<Stmt>();
        s->kind = Stmt::Kind::output;
        s->line = t.line;
        s->expr = parse_tuple_or_expr();
        if (cur().kind != Token::Kind::var_end) fail("expected '}}', got '" + describe(cur()) + "'");
        ++pos_;
        out.push_back(std::move(s));
      } else if (t.kind == Token::Kind::block_begin) {
        ++pos_;
        const std::string name = expect_name();
        for (const auto& e : ends) {
          if (name == e) {
            end_tag = name;
            return out;
          }
        }
        out.push_back(parse_statement(name));
      } else {
        fail("unexpected '" + describe(t) + "'");
      }
    }
  }

  std::unique_ptr<Stmt> parse_statement(const std::string& name) {
    const int line = t_[pos_ - 1].line;
    auto s = std::make_unique<Stmt>();
    s->line = line;
    std::string end;
    if (name == "if") {
      s->kind = Stmt::Kind::if_;
      s->conditions.push_back(parse_tuple_or_expr());
      expect_block_end();
      while (true) {
        s->bodies.push_back(parse_body({"elif", "else", "endif"}, end));
        if (end == "elif") {
          s->conditions.push_back(parse_tuple_or_expr());
          expect_block_end();
        } else if (end == "else") {
          expect_block_end();
          s->bodies.push_back(parse_body({"endif"}, end));
          expect_block_end();
          break;
        } else {
          expect_block_end();
          break;
        }
      }
    } else if (name == "for") {
      s->kind = Stmt::Kind::for_;
      s->targets.push_back(expect_name());
      while (is_op(",")) {
        ++pos_;
        s->targets.push_back(expect_name());
      }
      if (!is_name("in")) fail("expected 'in' in the for statement");
      ++pos_;
      s->expr = parse_tuple_or_expr(/*no_conditional=*/true);
      if (is_name("if")) {
        ++pos_;
        s->filter = parse_expr();
      }
      if (is_name("recursive")) fail("'for ... recursive' loops are not supported");
      expect_block_end();
      s->body = parse_body({"else", "endfor"}, end);
      expect_block_end();
      if (end == "else") {
        s->else_body = parse_body({"endfor"}, end);
        expect_block_end();
      }
    } else if (name == "set") {
      s->targets.push_back(expect_name());
      if (is_op(".")) {
        ++pos_;
        s->attr = expect_name();
      }
      while (is_op(",") && s->attr.empty()) {
        ++pos_;
        s->targets.push_back(expect_name());
      }
      if (is_op("=")) {
        ++pos_;
        s->kind = Stmt::Kind::set;
        s->expr = parse_tuple_or_expr();
        expect_block_end();
      } else {
        if (s->targets.size() != 1 || !s->attr.empty()) fail("a {% set %} block assigns one name");
        s->kind = Stmt::Kind::set_block;
        expect_block_end();
        s->body = parse_body({"endset"}, end);
        expect_block_end();
      }
    } else if (name == "macro") {
      s->kind = Stmt::Kind::macro;
      s->targets.push_back(expect_name());
      expect_op("(");
      while (!is_op(")")) {
        std::string p = expect_name();
        ExprPtr def;
        if (is_op("=")) {
          ++pos_;
          def = parse_expr();
        }
        s->params.emplace_back(std::move(p), std::move(def));
        if (!is_op(",")) break;
        ++pos_;
      }
      expect_op(")");
      expect_block_end();
      s->body = parse_body({"endmacro"}, end);
      if (cur().kind == Token::Kind::name) ++pos_;  // {% endmacro name %}
      expect_block_end();
    } else if (name == "break" || name == "continue") {
      s->kind = name == "break" ? Stmt::Kind::break_ : Stmt::Kind::continue_;
      expect_block_end();
    } else if (name == "endif" || name == "endfor" || name == "endmacro" || name == "endset" || name == "elif" ||
               name == "else") {
      fail("{% " + name + " %} without its opening block");
    } else {
      fail("the statement {% " + name + " %} is not supported");
    }
    return s;
  }

  // expr, or a tuple "a, b" (a list here)
  ExprPtr parse_tuple_or_expr(bool no_conditional = false) {
    ExprPtr first = no_conditional ? parse_or() : parse_expr();
    if (!is_op(",")) return first;
    auto tuple = make(Expr::Kind::list);
    tuple->name = "tuple";
    tuple->items.push_back(std::move(first));
    while (is_op(",")) {
      ++pos_;
      if (cur().kind == Token::Kind::block_end || cur().kind == Token::Kind::var_end) break;
      tuple->items.push_back(no_conditional ? parse_or() : parse_expr());
    }
    return tuple;
  }

  ExprPtr make(Expr::Kind kind) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = cur().line;
    return e;
  }
  ExprPtr binary(std::string op, ExprPtr a, ExprPtr b) {
    auto e = make(Expr::Kind::binary);
    e->name = std::move(op);
    e->items.push_back(std::move(a));
    e->items.push_back(std::move(b));
    return e;
  }

  ExprPtr parse_expr() {
    Depth depth(*this);
    ExprPtr value = parse_or();
    while (is_name("if")) {
      ++pos_;
      auto e = make(Expr::Kind::conditional);
      ExprPtr cond = parse_or();
      ExprPtr otherwise;
      if (is_name("else")) {
        ++pos_;
        otherwise = parse_expr();
      }
      e->items.push_back(std::move(value));
      e->items.push_back(std::move(cond));
      e->items.push_back(std::move(otherwise));
      value = std::move(e);
    }
    return value;
  }
  ExprPtr parse_or() {
    ExprPtr a = parse_and();
    while (is_name("or")) {
      ++pos_;
      a = binary("or", std::move(a), parse_and());
    }
    return a;
  }
  ExprPtr parse_and() {
    ExprPtr a = parse_not();
    while (is_name("and")) {
      ++pos_;
      a = binary("and", std::move(a), parse_not());
    }
    return a;
  }
  ExprPtr parse_not() {
    if (is_name("not")) {
      Depth depth(*this);
      auto e = make(Expr::Kind::unary);
      ++pos_;
      e->name = "not";
      e->items.push_back(parse_not());
      return e;
    }
    return parse_compare();
  }
  // a < b, or a chain a < b <= c (Python's: (a < b) and (b <= c), b evaluated once): a chain is
  // a "compare" node, items[0] the first operand and named the (operator, operand) pairs.
  ExprPtr parse_compare() {
    ExprPtr first = parse_math1();
    std::vector<std::pair<std::string, ExprPtr>> rest;
    while (true) {
      std::string op;
      if (cur().kind == Token::Kind::op &&
          (cur().text == "==" || cur().text == "!=" || cur().text == "<" || cur().text == ">" || cur().text == "<=" ||
           cur().text == ">=")) {
        op = cur().text;
        ++pos_;
      } else if (is_name("in")) {
        op = "in";
        ++pos_;
      } else if (is_name("not") && peek().kind == Token::Kind::name && peek().text == "in") {
        op = "not in";
        pos_ += 2;
      } else {
        break;
      }
      rest.emplace_back(op, parse_math1());
    }
    if (rest.empty()) return first;
    if (rest.size() == 1) return binary(rest[0].first, std::move(first), std::move(rest[0].second));
    auto e = make(Expr::Kind::compare);
    e->items.push_back(std::move(first));
    e->named = std::move(rest);
    return e;
  }
  ExprPtr parse_math1() {
    ExprPtr a = parse_concat();
    while (is_op("+") || is_op("-")) {
      const std::string op = t_[pos_++].text;
      a = binary(op, std::move(a), parse_concat());
    }
    return a;
  }
  ExprPtr parse_concat() {
    ExprPtr a = parse_math2();
    while (is_op("~")) {
      ++pos_;
      a = binary("~", std::move(a), parse_math2());
    }
    return a;
  }
  ExprPtr parse_math2() {
    ExprPtr a = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const std::string op = t_[pos_++].text;
      a = binary(op, std::move(a), parse_pow());
    }
    return a;
  }
  ExprPtr parse_pow() {
    ExprPtr a = parse_unary(true);
    while (is_op("**")) {
      ++pos_;
      a = binary("**", std::move(a), parse_unary(true));
    }
    return a;
  }
  ExprPtr parse_unary(bool with_filter) {
    Depth depth(*this);
    ExprPtr node;
    if (is_op("-") || is_op("+")) {
      auto e = make(Expr::Kind::unary);
      e->name = t_[pos_++].text;
      e->items.push_back(parse_unary(false));
      node = std::move(e);
    } else {
      node = parse_primary();
    }
    node = parse_postfix(std::move(node));
    if (with_filter) node = parse_filters(std::move(node));
    return node;
  }
  ExprPtr parse_primary() {
    const Token& t = cur();
    switch (t.kind) {
      case Token::Kind::name: {
        ++pos_;
        auto e = make(Expr::Kind::literal);
        if (t.text == "true" || t.text == "True") {
          e->value = Value::boolean(true);
        } else if (t.text == "false" || t.text == "False") {
          e->value = Value::boolean(false);
        } else if (t.text == "none" || t.text == "None") {
          e->value = Value::none();
        } else {
          e->kind = Expr::Kind::name;
          e->name = t.text;
        }
        return e;
      }
      case Token::Kind::string: {
        auto e = make(Expr::Kind::literal);
        std::string s;
        while (cur().kind == Token::Kind::string) s += t_[pos_++].text;  // adjacent literals join
        e->value = Value::string(std::move(s));
        return e;
      }
      case Token::Kind::integer: {
        auto e = make(Expr::Kind::literal);
        int64_t v = 0;
        const auto r = std::from_chars(t.text.data(), t.text.data() + t.text.size(), v);
        if (r.ec != std::errc()) fail("integer literal out of range: " + t.text);
        e->value = Value::integer(v);
        ++pos_;
        return e;
      }
      case Token::Kind::floating: {
        auto e = make(Expr::Kind::literal);
        e->value = Value::floating(std::strtod(t.text.c_str(), nullptr));
        ++pos_;
        return e;
      }
      case Token::Kind::op:
        if (t.text == "(") {
          ++pos_;
          if (is_op(")")) {
            ++pos_;
            auto empty = make(Expr::Kind::list);  // the empty tuple
            empty->name = "tuple";
            return empty;
          }
          ExprPtr inner = parse_expr();
          if (is_op(",")) {
            auto tuple = make(Expr::Kind::list);
            tuple->name = "tuple";
            tuple->items.push_back(std::move(inner));
            while (is_op(",")) {
              ++pos_;
              if (is_op(")")) break;
              tuple->items.push_back(parse_expr());
            }
            inner = std::move(tuple);
          }
          expect_op(")");
          return inner;
        }
        if (t.text == "[") {
          auto e = make(Expr::Kind::list);
          ++pos_;
          while (!is_op("]")) {
            e->items.push_back(parse_expr());
            if (!is_op(",")) break;
            ++pos_;
          }
          expect_op("]");
          return e;
        }
        if (t.text == "{") {
          auto e = make(Expr::Kind::dict);
          ++pos_;
          while (!is_op("}")) {
            e->keys.push_back(parse_expr());
            expect_op(":");
            e->items.push_back(parse_expr());
            if (!is_op(",")) break;
            ++pos_;
          }
          expect_op("}");
          return e;
        }
        break;
      default: break;
    }
    fail("unexpected '" + describe(t) + "' in an expression");
  }
  ExprPtr parse_postfix(ExprPtr node) {
    while (true) {
      if (is_op(".")) {
        ++pos_;
        auto e = make(Expr::Kind::attribute);
        if (cur().kind == Token::Kind::integer) {  // a.0 is a[0]
          e->kind = Expr::Kind::subscript;
          auto index = make(Expr::Kind::literal);
          index->value = Value::integer(std::atoll(t_[pos_++].text.c_str()));
          e->items.push_back(std::move(node));
          e->items.push_back(std::move(index));
        } else {
          e->name = expect_name();
          e->items.push_back(std::move(node));
        }
        node = std::move(e);
      } else if (is_op("[")) {
        ++pos_;
        node = parse_subscript(std::move(node));
      } else if (is_op("(")) {
        auto e = make(Expr::Kind::call);
        e->items.push_back(std::move(node));
        parse_call_args(*e);
        node = std::move(e);
      } else {
        return node;
      }
    }
  }
  ExprPtr parse_subscript(ExprPtr node) {
    ExprPtr parts[3];
    int colons = 0;
    while (!is_op("]")) {
      if (is_op(":")) {
        if (++colons > 2) fail("a slice has at most two ':'");
        ++pos_;
        continue;
      }
      if (parts[colons]) fail("expected ']' or ':' in a subscript");
      parts[colons] = parse_expr();
    }
    expect_op("]");
    auto e = make(colons == 0 ? Expr::Kind::subscript : Expr::Kind::slice);
    e->items.push_back(std::move(node));
    if (colons == 0) {
      if (!parts[0]) fail("empty subscript []");
      e->items.push_back(std::move(parts[0]));
    } else {
      for (auto& p : parts) e->items.push_back(std::move(p));
    }
    return e;
  }
  void parse_call_args(Expr& e) {
    expect_op("(");
    while (!is_op(")")) {
      if (cur().kind == Token::Kind::name && peek().kind == Token::Kind::op && peek().text == "=") {
        std::string key = t_[pos_].text;
        pos_ += 2;
        e.named.emplace_back(std::move(key), parse_expr());
      } else {
        if (!e.named.empty()) fail("a positional argument after a keyword argument");
        e.items.push_back(parse_expr());
      }
      if (!is_op(",")) break;
      ++pos_;
    }
    expect_op(")");
  }
  ExprPtr parse_filters(ExprPtr node) {
    while (true) {
      if (is_op("|")) {
        ++pos_;
        auto e = make(Expr::Kind::filter);
        e->name = expect_name();
        if (!is_known_filter(e->name)) fail("the filter '" + e->name + "' is not supported");
        e->items.push_back(std::move(node));
        if (is_op("(")) parse_call_args(*e);
        node = std::move(e);
      } else if (is_name("is")) {
        ++pos_;
        auto e = make(Expr::Kind::test);
        if (is_name("not")) {
          e->negated = true;
          ++pos_;
        }
        e->name = expect_name();
        if (e->name == "none" || e->name == "true" || e->name == "false") {
          // lower-case keywords name tests here, as in jinja2
        }
        if (!is_known_test(e->name)) fail("the test '" + e->name + "' is not supported");
        e->items.push_back(std::move(node));
        if (is_op("(")) {
          parse_call_args(*e);
        } else if ((cur().kind == Token::Kind::name && !is_name("else") && !is_name("or") && !is_name("and") &&
                    !is_name("is") && !is_name("if") && !is_name("in") && !is_name("not")) ||
                   cur().kind == Token::Kind::string || cur().kind == Token::Kind::integer ||
                   cur().kind == Token::Kind::floating || is_op("[") || is_op("{")) {
          e->items.push_back(parse_postfix(parse_primary()));  // "x is divisibleby 3"
        }
        node = std::move(e);
      } else {
        return node;
      }
    }
  }

  std::vector<Token> t_;
  size_t pos_ = 0;
  int depth_ = 0;
};

}  // namespace

StmtList parse(std::string_view source) { return Parser(tokenize(source)).parse_all(); }

}  // namespace turbokv::jinja
