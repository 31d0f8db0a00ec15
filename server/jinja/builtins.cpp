// Filters, tests, methods of str/dict/list and the global functions, with Python's semantics
// (strings are sequences of code points: length, indexing and slicing count characters).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <ctime>
#include <optional>
#include <string_view>

#include "server/jinja/interpreter.hpp"
#include "server/jinja/parser.hpp"

namespace turbokv::jinja {

namespace {

constexpr const char* kFilters[] = {"trim", "tojson", "length", "count", "items", "join", "upper", "lower",
                                    "capitalize", "title", "default", "d", "first", "last", "list", "string",
                                    "int", "float", "abs", "round", "replace", "reverse", "sort", "selectattr",
                                    "rejectattr", "select", "reject", "map", "safe", "indent", "unique", "sum",
                                    "min", "max", "dictsort", "wordcount"};
constexpr const char* kTests[] = {"defined", "undefined", "none", "string", "number", "integer", "float",
                                  "mapping", "iterable", "sequence", "boolean", "true", "false", "callable",
                                  "even", "odd", "divisibleby", "equalto", "eq", "ne", "lt", "gt", "le", "ge",
                                  "sameas", "in", "lower", "upper"};

// One code point at s[at]; invalid UTF-8 reads as its single byte.
uint32_t decode(std::string_view s, size_t at, size_t& len) {
  const auto c = static_cast<unsigned char>(s[at]);
  size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
  if (n == 0 || at + n > s.size()) {
    len = 1;
    return c;
  }
  uint32_t cp = n == 1 ? c : n == 2 ? (c & 0x1F) : n == 3 ? (c & 0x0F) : (c & 0x07);
  for (size_t k = 1; k < n; ++k) {
    const auto d = static_cast<unsigned char>(s[at + k]);
    if ((d >> 6) != 0x2) {
      len = 1;
      return c;
    }
    cp = (cp << 6) | (d & 0x3F);
  }
  len = n;
  return cp;
}

// Byte offsets of each code point, plus the end.
std::vector<size_t> char_offsets(std::string_view s) {
  std::vector<size_t> at;
  for (size_t k = 0; k < s.size();) {
    at.push_back(k);
    size_t len = 1;
    decode(s, k, len);
    k += len;
  }
  at.push_back(s.size());
  return at;
}

bool is_python_space(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F ||
         cp == 0x3000;
}

// str.strip/lstrip/rstrip(chars): chars none means whitespace.
Value strip(const Value& s, const Value* chars, bool left, bool right) {
  std::vector<uint32_t> set;
  const bool whitespace = chars == nullptr || chars->is_none() || chars->is_undefined();
  if (!whitespace) {
    const std::string& c = chars->str();
    for (size_t k = 0; k < c.size();) {
      size_t len = 1;
      set.push_back(decode(c, k, len));
      k += len;
    }
  }
  auto strip_it = [&](uint32_t cp) {
    return whitespace ? is_python_space(cp) : std::find(set.begin(), set.end(), cp) != set.end();
  };
  const std::vector<size_t> at = char_offsets(s.str());
  size_t b = 0, e = at.size() - 1;
  if (left) {
    while (b < e) {
      size_t len = 1;
      if (!strip_it(decode(s.str(), at[b], len))) break;
      ++b;
    }
  }
  if (right) {
    while (e > b) {
      size_t len = 1;
      if (!strip_it(decode(s.str(), at[e - 1], len))) break;
      --e;
    }
  }
  return substring(s, at[b], at[e]);
}

Value whole_marked_if(const Value& source, std::string s) {
  return source.has_marks() ? Value::marked(std::move(s)) : Value::string(std::move(s));
}

std::string ascii_case(std::string s, bool upper) {
  for (char& c : s) c = static_cast<char>(upper ? std::toupper(static_cast<unsigned char>(c)) : std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string title_case(const std::string& s) {  // Python's str.title, ASCII letters
  std::string out = s;
  bool prev_cased = false;
  for (char& c : out) {
    const auto u = static_cast<unsigned char>(c);
    if (std::isalpha(u)) {
      c = static_cast<char>(prev_cased ? std::tolower(u) : std::toupper(u));
      prev_cased = true;
    } else {
      prev_cased = false;
    }
  }
  return out;
}

const Value& need_string(Interpreter& in, const Value& v, const char* what) {
  if (!v.is_string()) in.fail(std::string(what) + " needs a string, got " + v.type_name());
  return v;
}

Value split(Interpreter& in, const Value& s, const Value* sep, const Value* maxsplit_v) {
  int64_t maxsplit = maxsplit_v && maxsplit_v->is_number() ? maxsplit_v->as_int() : -1;
  std::vector<Value> parts;
  const std::string& t = s.str();
  if (sep == nullptr || sep->is_none()) {  // runs of whitespace, none empty
    const std::vector<size_t> at = char_offsets(t);
    size_t k = 0;
    const size_t n = at.size() - 1;
    auto space = [&](size_t i) {
      size_t len = 1;
      return is_python_space(decode(t, at[i], len));
    };
    while (k < n) {
      while (k < n && space(k)) ++k;
      if (k == n) break;
      if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) == maxsplit) {
        size_t e = n;
        while (e > k && space(e - 1)) --e;
        parts.push_back(substring(s, at[k], at[e]));
        break;
      }
      size_t e = k;
      while (e < n && !space(e)) ++e;
      parts.push_back(substring(s, at[k], at[e]));
      k = e;
    }
    return Value::list(std::move(parts));
  }
  const std::string& d = need_string(in, *sep, "split's separator").str();
  if (d.empty()) in.fail("split: empty separator");
  size_t from = 0;
  while (true) {
    in.step();
    const size_t hit = (maxsplit >= 0 && static_cast<int64_t>(parts.size()) >= maxsplit) ? std::string::npos : t.find(d, from);
    if (hit == std::string::npos) {
      parts.push_back(substring(s, from, t.size()));
      break;
    }
    parts.push_back(substring(s, from, hit));
    from = hit + d.size();
  }
  return Value::list(std::move(parts));
}

Value replace(Interpreter& in, const Value& s, const Value& old_v, const Value& new_v, const Value* count_v) {
  const std::string& t = s.str();
  const std::string& o = need_string(in, old_v, "replace").str();
  const std::string& n = need_string(in, new_v, "replace").str();
  int64_t count = count_v && count_v->is_number() ? count_v->as_int() : -1;
  std::string out;
  if (o.empty()) {  // Python inserts `new` between characters and at both ends
    const std::vector<size_t> at = char_offsets(t);
    for (size_t k = 0; k + 1 < at.size() && count != 0; ++k, --count) {
      out += n;
      out.append(t, at[k], at[k + 1] - at[k]);
      in.check_size(out.size());
      if (count > 0 && count == 1) {
        out.append(t, at[k + 1], std::string::npos);
        return whole_marked_if(Value::list({s, new_v}), std::move(out));
      }
    }
    if (count != 0) out += n;
    return whole_marked_if(Value::list({s, new_v}), std::move(out));
  }
  size_t from = 0;
  while (count != 0) {
    const size_t hit = t.find(o, from);
    if (hit == std::string::npos) break;
    out.append(t, from, hit - from);
    out += n;
    in.check_size(out.size());
    from = hit + o.size();
    if (count > 0) --count;
  }
  out.append(t, from, std::string::npos);
  return whole_marked_if(Value::list({s, new_v}), std::move(out));
}

bool starts_or_ends(Interpreter& in, const Value& s, const Value& what, bool starts) {
  if (what.is_list()) {
    for (const Value& w : what.items()) {
      if (starts_or_ends(in, s, w, starts)) return true;
    }
    return false;
  }
  const std::string& t = s.str();
  const std::string& w = need_string(in, what, starts ? "startswith" : "endswith").str();
  if (w.size() > t.size()) return false;
  return starts ? t.compare(0, w.size(), w) == 0 : t.compare(t.size() - w.size(), w.size(), w) == 0;
}

Value join(Interpreter& in, const std::vector<Value>& items, const Value& sep) {
  StringBuilder out;
  for (size_t k = 0; k < items.size(); ++k) {
    const Value piece = items[k].to_str();
    in.check_size(out.text.size() + sep.str().size() + piece.str().size());
    if (k) out.append(sep);
    out.append(piece);
  }
  return out.take();
}

Value string_method(const Value& s, const std::string& name) {
  auto bound = [&](auto body) { return Value::function(name, [s, body](Interpreter& i, const CallArgs& a) { return body(i, s, a); }); };
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    const bool l = name != "rstrip", r = name != "lstrip";
    return bound([l, r](Interpreter&, const Value& v, const CallArgs& a) { return strip(v, a.get(0, "chars"), l, r); });
  }
  if (name == "split") {
    return bound([](Interpreter& i, const Value& v, const CallArgs& a) { return split(i, v, a.get(0, "sep"), a.get(1, "maxsplit")); });
  }
  if (name == "startswith" || name == "endswith") {
    const bool starts = name == "startswith";
    return bound([starts](Interpreter& i, const Value& v, const CallArgs& a) {
      const Value* w = a.get(0, "prefix");
      if (w == nullptr) i.fail("startswith/endswith need an argument");
      return Value::boolean(starts_or_ends(i, v, *w, starts));
    });
  }
  if (name == "replace") {
    return bound([](Interpreter& i, const Value& v, const CallArgs& a) {
      if (a.positional.size() < 2) i.fail("replace needs two arguments");
      return replace(i, v, a.positional[0], a.positional[1], a.get(2, "count"));
    });
  }
  if (name == "upper" || name == "lower") {
    const bool up = name == "upper";
    return bound([up](Interpreter&, const Value& v, const CallArgs&) { return whole_marked_if(v, ascii_case(v.str(), up)); });
  }
  if (name == "title") {
    return bound([](Interpreter&, const Value& v, const CallArgs&) { return whole_marked_if(v, title_case(v.str())); });
  }
  if (name == "capitalize") {
    return bound([](Interpreter&, const Value& v, const CallArgs&) {
      std::string t = ascii_case(v.str(), false);
      if (!t.empty()) t[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(t[0])));
      return whole_marked_if(v, std::move(t));
    });
  }
  if (name == "find" || name == "count") {
    const bool find = name == "find";
    return bound([find](Interpreter& i, const Value& v, const CallArgs& a) {
      const Value* w = a.get(0, "sub");
      if (w == nullptr) i.fail("find/count need an argument");
      const std::string& sub = need_string(i, *w, "find/count").str();
      if (find) {
        const size_t at = v.str().find(sub);
        return Value::integer(at == std::string::npos ? -1 : static_cast<int64_t>(utf8_length(v.str().substr(0, at))));
      }
      if (sub.empty()) return Value::integer(static_cast<int64_t>(utf8_length(v.str()) + 1));
      int64_t n = 0;
      for (size_t at = v.str().find(sub); at != std::string::npos; at = v.str().find(sub, at + sub.size())) ++n;
      return Value::integer(n);
    });
  }
  if (name == "join") {
    return bound([](Interpreter& i, const Value& v, const CallArgs& a) {
      const Value* items = a.get(0, "iterable");
      if (items == nullptr) i.fail("join needs an argument");
      return join(i, iterate(i, *items), v);
    });
  }
  if (name == "isdigit" || name == "isspace" || name == "isalpha" || name == "isalnum") {
    return bound([name](Interpreter&, const Value& v, const CallArgs&) {
      if (v.str().empty()) return Value::boolean(false);
      for (const char c : v.str()) {
        const auto u = static_cast<unsigned char>(c);
        const bool ok = name == "isdigit" ? std::isdigit(u) : name == "isspace" ? std::isspace(u)
                        : name == "isalpha" ? std::isalpha(u) : std::isalnum(u);
        if (!ok) return Value::boolean(false);
      }
      return Value::boolean(true);
    });
  }
  return Value();
}

Value dict_method(const Value& d, const std::string& name) {
  if (name == "items" || name == "keys" || name == "values") {
    return Value::function(name, [d, name](Interpreter&, const CallArgs&) {
      std::vector<Value> out;
      for (const auto& [k, v] : d.mapping().items) {
        if (name == "items") out.push_back(Value::tuple({Value::string(k), v}));
        if (name == "keys") out.push_back(Value::string(k));
        if (name == "values") out.push_back(v);
      }
      return Value::list(std::move(out));
    });
  }
  if (name == "get") {
    return Value::function(name, [d](Interpreter& in, const CallArgs& a) {
      const Value* key = a.get(0, "key");
      if (key == nullptr) in.fail("get needs a key");
      if (key->is_string()) {
        if (const Value* v = d.mapping().find(key->str())) return *v;
      }
      const Value* def = a.get(1, "default");
      return def ? *def : Value::none();
    });
  }
  return Value();
}

int64_t index_arg(Interpreter& in, const Value& v, const char* what) {
  if (!v.is_number() || v.kind() == Value::Kind::floating) in.fail(std::string(what) + " must be an integer");
  return v.as_int();
}

// Python's slice.indices for a sequence of n.
void slice_indices(Interpreter& in, int64_t n, const Value& start_v, const Value& stop_v, const Value& step_v,
                   int64_t& start, int64_t& stop, int64_t& step) {
  step = step_v.is_none() ? 1 : index_arg(in, step_v, "a slice step");
  if (step == 0) in.fail("slice step cannot be zero");
  auto clamp = [&](const Value& v, int64_t def) {
    if (v.is_none()) return def;
    int64_t x = index_arg(in, v, "a slice index");
    if (x < 0) x += n;
    if (step > 0) return std::clamp<int64_t>(x, 0, n);
    return std::clamp<int64_t>(x, -1, n - 1);
  };
  start = clamp(start_v, step > 0 ? 0 : n - 1);
  stop = clamp(stop_v, step > 0 ? n : -1);
}

Value sort_values(Interpreter& in, std::vector<Value> items, bool reverse, const Value* attribute) {
  auto key = [&](const Value& v) {
    Value k = attribute && attribute->is_string() ? get_attribute(in, v, attribute->str()) : v;
    if (k.is_string()) return Value::string(ascii_case(k.str(), false));  // case_sensitive=False
    return k;
  };
  auto less = [&](const Value& a, const Value& b) {
    const Value ka = key(a), kb = key(b);
    if (ka.is_number() && kb.is_number()) return ka.as_float() < kb.as_float();
    if (ka.is_string() && kb.is_string()) return ka.str() < kb.str();
    in.fail(std::string("cannot sort ") + ka.type_name() + " and " + kb.type_name());
  };
  std::stable_sort(items.begin(), items.end(), [&](const Value& a, const Value& b) { return reverse ? less(b, a) : less(a, b); });
  return Value::list(std::move(items));
}

}  // namespace

size_t utf8_length(const std::string& s) { return char_offsets(s).size() - 1; }

bool is_known_filter(std::string_view name) {
  return std::any_of(std::begin(kFilters), std::end(kFilters), [&](const char* f) { return name == f; });
}
bool is_known_test(std::string_view name) {
  return std::any_of(std::begin(kTests), std::end(kTests), [&](const char* t) { return name == t; }) || name == "==" ;
}

std::vector<Value> iterate(Interpreter& in, const Value& v) {
  switch (v.kind()) {
    case Value::Kind::undefined: return {};  // jinja2's Undefined iterates as empty
    case Value::Kind::list: return v.items();
    case Value::Kind::dict:
    case Value::Kind::ns: {
      std::vector<Value> keys;
      for (const auto& kv : v.mapping().items) keys.push_back(Value::string(kv.first));
      return keys;
    }
    case Value::Kind::string: {
      const std::vector<size_t> at = char_offsets(v.str());
      std::vector<Value> chars;
      for (size_t k = 0; k + 1 < at.size(); ++k) chars.push_back(substring(v, at[k], at[k + 1]));
      return chars;
    }
    default: in.fail(std::string("'") + v.type_name() + "' object is not iterable");
  }
}

bool contains(Interpreter& in, const Value& container, const Value& item) {
  switch (container.kind()) {
    case Value::Kind::string:
      if (!item.is_string()) in.fail(std::string("'in <string>' requires a string, not ") + item.type_name());
      return container.str().find(item.str()) != std::string::npos;
    case Value::Kind::list:
      return std::any_of(container.items().begin(), container.items().end(), [&](const Value& v) { return equal(v, item); });
    case Value::Kind::dict:
    case Value::Kind::ns: return item.is_string() && container.mapping().find(item.str()) != nullptr;
    case Value::Kind::undefined: in.fail("'in' an undefined value");
    default: in.fail(std::string("argument of type '") + container.type_name() + "' is not iterable");
  }
}

Value get_attribute(Interpreter& in, const Value& obj, const std::string& name) {
  switch (obj.kind()) {
    case Value::Kind::undefined: in.fail("attribute '" + name + "' of an undefined value");
    case Value::Kind::string: return string_method(obj, name);
    case Value::Kind::dict: {
      if (Value m = dict_method(obj, name); !m.is_undefined()) return m;  // attributes first, as jinja2's getattr
      const Value* v = obj.mapping().find(name);
      return v ? *v : Value();
    }
    case Value::Kind::ns: {
      const Value* v = obj.mapping().find(name);
      return v ? *v : Value();
    }
    default: return Value();
  }
}

Value get_item(Interpreter& in, const Value& obj, const Value& key) {
  switch (obj.kind()) {
    case Value::Kind::undefined: in.fail("subscript of an undefined value");
    case Value::Kind::list:
    case Value::Kind::string: {
      if (!key.is_number() || key.kind() == Value::Kind::floating) {
        return key.is_string() && obj.is_string() ? string_method(obj, key.str()) : Value();
      }
      int64_t k = key.as_int();
      if (obj.is_list()) {
        const auto n = static_cast<int64_t>(obj.items().size());
        if (k < 0) k += n;
        return k >= 0 && k < n ? obj.items()[static_cast<size_t>(k)] : Value();
      }
      const std::vector<size_t> at = char_offsets(obj.str());
      const auto n = static_cast<int64_t>(at.size() - 1);
      if (k < 0) k += n;
      if (k < 0 || k >= n) return Value();
      return substring(obj, at[static_cast<size_t>(k)], at[static_cast<size_t>(k) + 1]);
    }
    case Value::Kind::dict:
    case Value::Kind::ns: {
      if (key.is_string()) {
        if (const Value* v = obj.mapping().find(key.str())) return *v;
        return obj.kind() == Value::Kind::dict ? dict_method(obj, key.str()) : Value();
      }
      return Value();
    }
    default: return Value();
  }
}

Value get_slice(Interpreter& in, const Value& obj, const Value& start_v, const Value& stop_v, const Value& step_v) {
  if (obj.is_undefined()) in.fail("slice of an undefined value");
  if (!obj.is_list() && !obj.is_string()) in.fail(std::string("cannot slice a ") + obj.type_name());
  const std::vector<size_t> at = obj.is_string() ? char_offsets(obj.str()) : std::vector<size_t>{};
  const auto n = static_cast<int64_t>(obj.is_string() ? at.size() - 1 : obj.items().size());
  int64_t start = 0, stop = 0, step = 1;
  slice_indices(in, n, start_v, stop_v, step_v, start, stop, step);
  if (obj.is_string() && step == 1) return substring(obj, at[static_cast<size_t>(start)], at[static_cast<size_t>(std::max(start, stop))]);
  std::vector<Value> picked;
  for (int64_t k = start; step > 0 ? k < stop : k > stop;) {
    picked.push_back(obj.is_list() ? obj.items()[static_cast<size_t>(k)]
                                   : substring(obj, at[static_cast<size_t>(k)], at[static_cast<size_t>(k) + 1]));
    if (__builtin_add_overflow(k, step, &k)) break;
  }
  if (obj.is_list()) return Value::list(std::move(picked));
  StringBuilder out;
  for (const Value& c : picked) out.append(c);
  return out.take();
}

Value builtin_global(const std::string& name) {
  if (name == "range") {
    return Value::function(name, [](Interpreter& in, const CallArgs& a) {
      int64_t start = 0, stop = 0, step = 1;
      if (a.positional.empty() || a.positional.size() > 3) in.fail("range takes 1 to 3 arguments");
      if (a.positional.size() == 1) {
        stop = index_arg(in, a.positional[0], "range's argument");
      } else {
        start = index_arg(in, a.positional[0], "range's argument");
        stop = index_arg(in, a.positional[1], "range's argument");
        if (a.positional.size() == 3) step = index_arg(in, a.positional[2], "range's step");
      }
      if (step == 0) in.fail("range() step must not be zero");
      const double count = std::max(0.0, std::ceil((static_cast<double>(stop) - static_cast<double>(start)) / static_cast<double>(step)));
      // jinja2's sandbox (transformers renders in one) refuses ranges over 100,000 items too.
      if (count > 100000) in.fail("range of " + python_float(count) + " items: the sandbox allows 100000");
      in.check_list_size(static_cast<size_t>(count));
      std::vector<Value> out;
      for (int64_t k = start; step > 0 ? k < stop : k > stop;) {
        out.push_back(Value::integer(k));
        if (__builtin_add_overflow(k, step, &k)) break;
      }
      return Value::list(std::move(out));
    });
  }
  if (name == "namespace" || name == "dict") {
    const bool ns = name == "namespace";
    return Value::function(name, [ns](Interpreter& in, const CallArgs& a) {
      Dict d;
      for (const Value& p : a.positional) {
        if (!p.is_mapping()) in.fail("namespace()/dict() take a dict or keyword arguments");
        for (const auto& [k, v] : p.mapping().items) d.set(k, v);
      }
      for (const auto& [k, v] : a.named) d.set(k, v);
      return ns ? Value::ns(std::move(d)) : Value::dict(std::move(d));
    });
  }
  if (name == "raise_exception") {
    return Value::function(name, [](Interpreter& in, const CallArgs& a) -> Value {
      const Value* m = a.get(0, "message");
      throw Error("template error: " + (m ? m->to_str().str() : std::string("raise_exception()")) +
                  (in.limits().max_steps ? "" : ""));
    });
  }
  if (name == "strftime_now") {
    return Value::function(name, [](Interpreter& in, const CallArgs& a) {
      const Value* f = a.get(0, "format");
      if (f == nullptr || !f->is_string()) in.fail("strftime_now needs a format string");
      if (f->str().size() > 256) in.fail("strftime_now: format longer than 256 bytes");
      std::tm tm{};
      const std::time_t now = in.now();
      localtime_r(&now, &tm);
      char buf[2048];
      const size_t n = std::strftime(buf, sizeof buf, f->str().c_str(), &tm);
      return Value::string(std::string(buf, n));
    });
  }
  return Value();
}

bool apply_test(Interpreter& in, const std::string& name, const Value& v, const CallArgs& a) {
  using K = Value::Kind;
  auto arg = [&]() -> const Value& {
    if (a.positional.empty()) in.fail("the test '" + name + "' needs an argument");
    return a.positional[0];
  };
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_none();
  if (name == "string") return v.is_string();
  if (name == "number") return v.is_number();
  if (name == "integer") return v.kind() == K::integer;
  if (name == "float") return v.kind() == K::floating;
  if (name == "boolean") return v.kind() == K::boolean;
  if (name == "true") return v.kind() == K::boolean && v.as_bool();
  if (name == "false") return v.kind() == K::boolean && !v.as_bool();
  if (name == "mapping") return v.kind() == K::dict;
  if (name == "iterable") return v.is_string() || v.is_list() || v.is_mapping() || v.is_undefined();
  if (name == "sequence") return v.is_string() || v.is_list() || v.kind() == K::dict || v.is_undefined();
  if (name == "callable") return v.kind() == K::function;
  if (name == "even" || name == "odd") {
    if (!v.is_number() || v.kind() == K::floating) in.fail("the test '" + name + "' needs an integer");
    return (v.as_int() % 2 == 0) == (name == "even");
  }
  if (name == "divisibleby") {
    const Value& d = arg();
    if (!v.is_number() || !d.is_number() || d.as_float() == 0) in.fail("divisibleby needs numbers, not zero");
    return std::fmod(v.as_float(), d.as_float()) == 0;
  }
  if (name == "equalto" || name == "eq" || name == "==" || name == "sameas") return equal(v, arg());
  if (name == "ne") return !equal(v, arg());
  if (name == "lt" || name == "gt" || name == "le" || name == "ge") {
    const Value& b = arg();
    if (!v.is_number() || !b.is_number()) in.fail("the test '" + name + "' compares numbers");
    const double x = v.as_float(), y = b.as_float();
    return name == "lt" ? x < y : name == "gt" ? x > y : name == "le" ? x <= y : x >= y;
  }
  if (name == "in") return contains(in, arg(), v);
  if (name == "lower" || name == "upper") {
    return v.is_string() && ascii_case(v.str(), name == "upper") == v.str();
  }
  in.fail("the test '" + name + "' is not supported");
}

namespace {

// The filters, in three groups (each returns nothing for a name it does not have).
using FilterResult = std::optional<Value>;

// Strings, JSON, lengths and the container views.
FilterResult text_filter(Interpreter& in, const std::string& name, const Value& v, const CallArgs& a) {
  [[maybe_unused]] const Value* a0 = a.positional.empty() ? nullptr : &a.positional[0];
  using K [[maybe_unused]] = Value::Kind;
  if (name == "trim") return strip(v.to_str(), a.get(0, "chars"), true, true);
  if (name == "tojson") {
    // Hugging Face's tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False)
    if (const Value* ascii = a.get(0, "ensure_ascii"); ascii && ascii->truthy()) in.fail("tojson: ensure_ascii is not supported");
    const Value* indent = a.get(1, "indent");
    const int ind = indent && indent->is_number() ? static_cast<int>(std::clamp<int64_t>(indent->as_int(), 0, 64)) : -1;
    std::string item_sep = ind >= 0 ? "," : ", ", key_sep = ": ";
    if (const Value* sep = a.get(2, "separators"); sep && sep->is_list() && sep->items().size() == 2) {
      item_sep = sep->items()[0].str();
      key_sep = sep->items()[1].str();
    }
    const Value* sort = a.get(3, "sort_keys");
    std::string json = to_json(v, ind, item_sep, key_sep, sort && sort->truthy());
    in.check_size(json.size());
    return whole_marked_if(v, std::move(json));
  }
  if (name == "length" || name == "count") {
    switch (v.kind()) {
      case K::undefined: return Value::integer(0);
      case K::string: return Value::integer(static_cast<int64_t>(utf8_length(v.str())));
      case K::list: return Value::integer(static_cast<int64_t>(v.items().size()));
      case K::dict:
      case K::ns: return Value::integer(static_cast<int64_t>(v.mapping().items.size()));
      default: in.fail(std::string("object of type '") + v.type_name() + "' has no len()");
    }
  }
  if (name == "items") {
    if (v.is_undefined()) return Value::list({});
    if (!v.is_mapping()) in.fail(std::string("items needs a dict, got ") + v.type_name());
    std::vector<Value> out;
    for (const auto& [k, x] : v.mapping().items) out.push_back(Value::tuple({Value::string(k), x}));
    return Value::list(std::move(out));
  }
  if (name == "join") {
    std::vector<Value> items = iterate(in, v);
    if (const Value* attr = a.get(1, "attribute"); attr && attr->is_string()) {
      for (Value& x : items) x = get_attribute(in, x, attr->str());
    }
    const Value* sep = a.get(0, "d");
    return join(in, items, sep ? sep->to_str() : Value::string(""));
  }
  if (name == "upper" || name == "lower") return whole_marked_if(v, ascii_case(v.to_str().str(), name == "upper"));
  if (name == "title") return whole_marked_if(v, title_case(v.to_str().str()));
  if (name == "capitalize") {
    std::string t = ascii_case(v.to_str().str(), false);
    if (!t.empty()) t[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(t[0])));
    return whole_marked_if(v, std::move(t));
  }
  if (name == "default" || name == "d") {
    const Value* boolean = a.get(1, "boolean");
    const bool use_default = v.is_undefined() || (boolean && boolean->truthy() && !v.truthy());
    if (!use_default) return v;
    const Value* def = a.get(0, "default_value");
    return def ? *def : Value::string("");
  }
  if (name == "first" || name == "last") {
    const std::vector<Value> items = iterate(in, v);
    if (items.empty()) return Value();
    return name == "first" ? items.front() : items.back();
  }
  if (name == "list") return Value::list(iterate(in, v));
  if (name == "string") return v.to_str();
  if (name == "safe") return v;
  return std::nullopt;
}

// Numbers, replacing, ordering.
FilterResult number_filter(Interpreter& in, const std::string& name, const Value& v, const CallArgs& a) {
  [[maybe_unused]] const Value* a0 = a.positional.empty() ? nullptr : &a.positional[0];
  using K [[maybe_unused]] = Value::Kind;
  if (name == "int") {
    if (v.kind() == K::floating) {
      const double f = v.as_float();
      if (!(std::fabs(f) < 9.2e18)) in.fail("int: " + python_float(f) + " is out of range");  // NaN too
      return Value::integer(static_cast<int64_t>(f));
    }
    if (v.is_number()) return Value::integer(v.as_int());
    if (v.is_string()) {
      try {
        size_t used = 0;
        const long long x = std::stoll(v.str(), &used);
        if (used == v.str().size()) return Value::integer(x);
      } catch (const std::exception&) {
      }
    }
    return a0 ? *a0 : Value::integer(0);
  }
  if (name == "float") {
    if (v.is_number()) return Value::floating(v.as_float());
    if (v.is_string()) {
      try {
        size_t used = 0;
        const double x = std::stod(v.str(), &used);
        if (used == v.str().size()) return Value::floating(x);
      } catch (const std::exception&) {
      }
    }
    return a0 ? *a0 : Value::floating(0);
  }
  if (name == "abs") {
    if (!v.is_number()) in.fail("abs needs a number");
    if (v.kind() == K::floating) return Value::floating(std::fabs(v.as_float()));
    if (v.as_int() == INT64_MIN) in.fail("integer overflow in abs");
    return Value::integer(v.as_int() < 0 ? -v.as_int() : v.as_int());
  }
  if (name == "round") {
    if (!v.is_number()) in.fail("round needs a number");
    const Value* prec = a.get(0, "precision");
    const double p = std::pow(10.0, prec && prec->is_number() ? static_cast<double>(prec->as_int()) : 0.0);
    return Value::floating(std::round(v.as_float() * p) / p);
  }
  if (name == "replace") {
    if (a.positional.size() < 2) in.fail("replace needs two arguments");
    return replace(in, v.to_str(), a.positional[0], a.positional[1], a.get(2, "count"));
  }
  if (name == "reverse") {
    if (v.is_string()) return get_slice(in, v, Value::none(), Value::none(), Value::integer(-1));
    std::vector<Value> items = iterate(in, v);
    std::reverse(items.begin(), items.end());
    return Value::list(std::move(items));
  }
  if (name == "sort") {
    const Value* rev = a.get(0, "reverse");
    return sort_values(in, iterate(in, v), rev && rev->truthy(), a.get(2, "attribute"));
  }
  if (name == "dictsort") {
    if (!v.is_mapping()) in.fail("dictsort needs a dict");
    std::vector<Value> pairs;
    for (const auto& [k, x] : v.mapping().items) pairs.push_back(Value::tuple({Value::string(k), x}));
    std::stable_sort(pairs.begin(), pairs.end(), [](const Value& p, const Value& q) {
      return ascii_case(p.items()[0].str(), false) < ascii_case(q.items()[0].str(), false);
    });
    return Value::list(std::move(pairs));
  }
  if (name == "unique") {
    std::vector<Value> out;
    for (const Value& x : iterate(in, v)) {
      if (std::none_of(out.begin(), out.end(), [&](const Value& y) { return equal(x, y); })) out.push_back(x);
    }
    return Value::list(std::move(out));
  }
  return std::nullopt;
}

// Selecting, mapping, indenting, aggregates.
FilterResult sequence_filter(Interpreter& in, const std::string& name, const Value& v, const CallArgs& a) {
  [[maybe_unused]] const Value* a0 = a.positional.empty() ? nullptr : &a.positional[0];
  using K [[maybe_unused]] = Value::Kind;
  if (name == "selectattr" || name == "rejectattr" || name == "select" || name == "reject") {
    const bool by_attr = name == "selectattr" || name == "rejectattr";
    const bool keep_if = name == "selectattr" || name == "select";
    size_t next = 0;
    std::string attr;
    if (by_attr) {
      if (!a0 || !a0->is_string()) in.fail(name + " needs an attribute name");
      attr = a0->str();
      next = 1;
    }
    std::string test;
    CallArgs test_args;
    if (next < a.positional.size()) {
      if (!a.positional[next].is_string()) in.fail(name + ": the test name must be a string");
      test = a.positional[next].str();
      if (!is_known_test(test)) in.fail("the test '" + test + "' is not supported");
      test_args.positional.assign(a.positional.begin() + static_cast<std::ptrdiff_t>(next + 1), a.positional.end());
    }
    std::vector<Value> out;
    for (const Value& x : iterate(in, v)) {
      in.step();
      const Value subject = by_attr ? get_attribute(in, x, attr) : x;
      const bool pass = test.empty() ? subject.truthy() : apply_test(in, test, subject, test_args);
      if (pass == keep_if) out.push_back(x);
    }
    return Value::list(std::move(out));
  }
  if (name == "map") {
    std::vector<Value> out;
    const Value* attr = a.get(99, "attribute");
    for (const Value& x : iterate(in, v)) {
      in.step();
      if (attr && attr->is_string()) {
        Value y = get_attribute(in, x, attr->str());
        if (y.is_undefined()) {
          if (const Value* def = a.get(99, "default")) y = *def;
        }
        out.push_back(std::move(y));
      } else if (a0 && a0->is_string()) {
        if (!is_known_filter(a0->str()) || a0->str() == "map") in.fail("map: the filter '" + a0->str() + "' is not supported");
        CallArgs rest;
        rest.positional.assign(a.positional.begin() + 1, a.positional.end());
        out.push_back(apply_filter(in, a0->str(), x, rest));
      } else {
        in.fail("map needs a filter name or attribute=");
      }
    }
    return Value::list(std::move(out));
  }
  if (name == "indent") {
    const Value* width_v = a.get(0, "width");
    const Value* first = a.get(1, "first");
    const Value* blank = a.get(2, "blank");
    const std::string pad = width_v && width_v->is_string() ? width_v->str()
                            : std::string(static_cast<size_t>(std::clamp<int64_t>(width_v && width_v->is_number() ? width_v->as_int() : 4, 0, 256)), ' ');
    const std::string t = v.to_str().str();
    std::string out;
    size_t start = 0;
    bool first_line = true;
    while (start <= t.size()) {
      size_t nl = t.find('\n', start);
      const std::string line = t.substr(start, nl == std::string::npos ? std::string::npos : nl - start);
      const bool pad_it = first_line ? (first && first->truthy()) : (!line.empty() || (blank && blank->truthy()));
      if (pad_it) out += pad;
      out += line;
      in.check_size(out.size());
      if (nl == std::string::npos) break;
      out += '\n';
      start = nl + 1;
      first_line = false;
    }
    return whole_marked_if(v, std::move(out));
  }
  if (name == "sum") {
    const Value* attr = a.get(0, "attribute");
    const Value* start = a.get(1, "start");
    Value total = start ? *start : Value::integer(0);
    for (Value x : iterate(in, v)) {
      if (attr && attr->is_string()) x = get_attribute(in, x, attr->str());
      if (!x.is_number() || !total.is_number()) in.fail("sum needs numbers");
      int64_t sum = 0;
      if (total.kind() == K::floating || x.kind() == K::floating) {
        total = Value::floating(total.as_float() + x.as_float());
      } else if (__builtin_add_overflow(total.as_int(), x.as_int(), &sum)) {
        in.fail("integer overflow in sum");
      } else {
        total = Value::integer(sum);
      }
    }
    return total;
  }
  if (name == "min" || name == "max") {
    const Value sorted = sort_values(in, iterate(in, v), false, a.get(1, "attribute"));
    if (sorted.items().empty()) return Value();
    return name == "min" ? sorted.items().front() : sorted.items().back();
  }
  if (name == "wordcount") {
    return Value::integer(static_cast<int64_t>(split(in, v.to_str(), nullptr, nullptr).items().size()));
  }
  return std::nullopt;
}

}  // namespace

Value apply_filter(Interpreter& in, const std::string& name, const Value& v, const CallArgs& a) {
  for (const auto group : {text_filter, number_filter, sequence_filter}) {
    if (FilterResult r = group(in, name, v, a)) return std::move(*r);
  }
  in.fail("the filter '" + name + "' is not supported");
}

}  // namespace turbokv::jinja
