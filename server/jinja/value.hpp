// The values a template computes with: Python's as jinja2 sees them (None, bool, int, float, str,
// list, dict, jinja2's Undefined and namespace, callables), immutable except namespaces.
//
// A string carries `marks`: the byte ranges of it that came from outside the template (a chat's
// messages and tools). Slicing, stripping, splitting and concatenation keep them exactly; any
// other transformation marks its whole result when its input had a mark. The chat renderer
// encodes marked text with control tokens off, so "<|im_end|>" typed by a user stays text.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "turbokv/error.hpp"

namespace turbokv::jinja {

// A template that does not parse, or a render that fails (an undefined operation, a limit, a
// raise_exception); the message says what and at which line.
struct Error : turbokv::Error {
  using turbokv::Error::Error;
};

struct Span {
  size_t begin = 0, end = 0;
};

class Value;
class Interpreter;

struct Dict {
  std::vector<std::pair<std::string, Value>> items;  // insertion order, as Python's dict
  std::unordered_map<std::string, size_t> index;
  const Value* find(std::string_view key) const;
  void set(const std::string& key, Value v);
};

struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> named;
  const Value* get(size_t pos, std::string_view name) const;  // positional pos, else by name
};

struct Function {
  std::string name;
  std::function<Value(Interpreter&, const CallArgs&)> call;
};

class Value {
 public:
  enum class Kind { undefined, none, boolean, integer, floating, string, list, dict, ns, function };

  Value() = default;  // undefined
  static Value none();
  static Value boolean(bool b);
  static Value integer(int64_t i);
  static Value floating(double f);
  static Value string(std::string s, std::vector<Span> marks = {});
  static Value marked(std::string s);  // a string wholly from outside the template
  static Value list(std::vector<Value> items);
  static Value tuple(std::vector<Value> items);  // a list that prints as Python's tuple: ('a', 1)
  static Value dict(Dict d);
  static Value ns(Dict d);
  static Value function(std::string name, std::function<Value(Interpreter&, const CallArgs&)> call);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::undefined; }
  bool is_none() const { return kind_ == Kind::none; }
  bool is_string() const { return kind_ == Kind::string; }
  bool is_number() const { return kind_ == Kind::integer || kind_ == Kind::floating || kind_ == Kind::boolean; }
  bool is_list() const { return kind_ == Kind::list; }
  bool is_mapping() const { return kind_ == Kind::dict || kind_ == Kind::ns; }

  bool as_bool() const { return b_; }
  int64_t as_int() const { return kind_ == Kind::boolean ? (b_ ? 1 : 0) : i_; }
  double as_float() const { return kind_ == Kind::floating ? f_ : static_cast<double>(as_int()); }
  const std::string& str() const { return s_; }
  const std::vector<Span>& marks() const { return marks_; }
  const std::vector<Value>& items() const { return *list_; }
  const Dict& mapping() const { return *dict_; }
  Dict& namespace_dict() const { return *dict_; }  // namespaces are mutable (`set ns.x = ...`)
  const Function& fn() const { return *fn_; }

  bool truthy() const;
  const char* type_name() const;
  // str(v) as Python prints it (None, True, 1.5, ['a', 1], {'k': 'v'}), marks kept for strings
  // and the whole result marked when any part was.
  Value to_str() const;
  std::string repr() const;  // Python's repr
  bool has_marks() const;    // this value or anything in it

 private:
  Kind kind_ = Kind::undefined;
  bool b_ = false;
  int64_t i_ = 0;
  double f_ = 0;
  std::string s_;
  std::vector<Span> marks_;
  std::shared_ptr<const std::vector<Value>> list_;
  bool tuple_ = false;
  std::shared_ptr<Dict> dict_;
  std::shared_ptr<const Function> fn_;
};

bool equal(const Value& a, const Value& b);
// Python's float repr (shortest round trip; 1.0, 1e-05, 1e+16).
std::string python_float(double f);
// The substring [begin, end) (bytes) with its marks.
Value substring(const Value& s, size_t begin, size_t end);
// a + b for strings, marks shifted.
Value concat(const Value& a, const Value& b);
// Builds a string piece by piece in linear time, marks kept.
struct StringBuilder {
  std::string text;
  std::vector<Span> marks;
  void append(const Value& s);
  Value take() { return Value::string(std::move(text), std::move(marks)); }
};
// json.dumps(v, ensure_ascii=False, indent, separators, sort_keys) as Hugging Face's tojson calls it.
std::string to_json(const Value& v, int indent, std::string_view item_sep, std::string_view key_sep, bool sort_keys);

}  // namespace turbokv::jinja
