#include "server/jinja/value.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

namespace turbokv::jinja {

const Value* Dict::find(std::string_view key) const {
  const auto it = index.find(std::string(key));
  return it == index.end() ? nullptr : &items[it->second].second;
}

void Dict::set(const std::string& key, Value v) {
  if (const auto it = index.find(key); it != index.end()) {
    items[it->second].second = std::move(v);
    return;
  }
  index.emplace(key, items.size());
  items.emplace_back(key, std::move(v));
}

const Value* CallArgs::get(size_t pos, std::string_view name) const {
  if (pos < positional.size()) return &positional[pos];
  for (const auto& [k, v] : named) {
    if (k == name) return &v;
  }
  return nullptr;
}

Value Value::none() {
  Value v;
  v.kind_ = Kind::none;
  return v;
}
Value Value::boolean(bool b) {
  Value v;
  v.kind_ = Kind::boolean;
  v.b_ = b;
  return v;
}
Value Value::integer(int64_t i) {
  Value v;
  v.kind_ = Kind::integer;
  v.i_ = i;
  return v;
}
Value Value::floating(double f) {
  Value v;
  v.kind_ = Kind::floating;
  v.f_ = f;
  return v;
}
Value Value::string(std::string s, std::vector<Span> marks) {
  Value v;
  v.kind_ = Kind::string;
  v.s_ = std::move(s);
  v.marks_ = std::move(marks);
  return v;
}
Value Value::marked(std::string s) {
  const size_t n = s.size();
  return string(std::move(s), n == 0 ? std::vector<Span>{} : std::vector<Span>{{0, n}});
}
Value Value::list(std::vector<Value> items) {
  Value v;
  v.kind_ = Kind::list;
  v.list_ = std::make_shared<const std::vector<Value>>(std::move(items));
  return v;
}
Value Value::tuple(std::vector<Value> items) {
  Value v = list(std::move(items));
  v.tuple_ = true;
  return v;
}
Value Value::dict(Dict d) {
  Value v;
  v.kind_ = Kind::dict;
  v.dict_ = std::make_shared<Dict>(std::move(d));
  return v;
}
Value Value::ns(Dict d) {
  Value v = dict(std::move(d));
  v.kind_ = Kind::ns;
  return v;
}
Value Value::function(std::string name, std::function<Value(Interpreter&, const CallArgs&)> call) {
  Value v;
  v.kind_ = Kind::function;
  v.fn_ = std::make_shared<const Function>(Function{std::move(name), std::move(call)});
  return v;
}

bool Value::truthy() const {
  switch (kind_) {
    case Kind::undefined:
    case Kind::none: return false;
    case Kind::boolean: return b_;
    case Kind::integer: return i_ != 0;
    case Kind::floating: return f_ != 0;
    case Kind::string: return !s_.empty();
    case Kind::list: return !list_->empty();
    case Kind::dict: return !dict_->items.empty();
    case Kind::ns:
    case Kind::function: return true;
  }
  return false;
}

const char* Value::type_name() const {
  switch (kind_) {
    case Kind::undefined: return "undefined";
    case Kind::none: return "NoneType";
    case Kind::boolean: return "bool";
    case Kind::integer: return "int";
    case Kind::floating: return "float";
    case Kind::string: return "str";
    case Kind::list: return "list";
    case Kind::dict: return "dict";
    case Kind::ns: return "Namespace";
    case Kind::function: return "function";
  }
  return "?";
}

bool Value::has_marks() const {
  switch (kind_) {
    case Kind::string: return !marks_.empty();
    case Kind::list: return std::any_of(list_->begin(), list_->end(), [](const Value& v) { return v.has_marks(); });
    case Kind::dict:
    case Kind::ns:
      return std::any_of(dict_->items.begin(), dict_->items.end(), [](const auto& kv) { return kv.second.has_marks(); });
    default: return false;
  }
}

std::string python_float(double f) {
  if (std::isnan(f)) return "nan";
  if (std::isinf(f)) return f > 0 ? "inf" : "-inf";
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, f, std::chars_format::scientific);
  std::string sci(buf, r.ptr);  // [-]d[.ddd]e(+|-)XX, the shortest digits that round-trip
  const bool negative = sci[0] == '-';
  const size_t e = sci.find('e');
  std::string digits;
  for (size_t k = negative ? 1 : 0; k < e; ++k) {
    if (sci[k] != '.') digits += sci[k];
  }
  const int exp10 = std::stoi(sci.substr(e + 1));
  std::string out = negative ? "-" : "";
  if (exp10 >= -5 + 1 && exp10 < 16) {  // Python's repr: fixed notation for 1e-4 <= |f| < 1e16
    if (exp10 >= 0) {
      std::string ip = digits.substr(0, std::min(digits.size(), static_cast<size_t>(exp10) + 1));
      ip.append(static_cast<size_t>(exp10) + 1 - ip.size(), '0');
      std::string fp = digits.size() > static_cast<size_t>(exp10) + 1 ? digits.substr(exp10 + 1) : "0";
      out.append(ip).append(1, '.').append(fp);
    } else {
      out.append("0.").append(static_cast<size_t>(-exp10 - 1), '0').append(digits);
    }
    return out;
  }
  out.append(digits, 0, 1);
  if (digits.size() > 1) out.append(1, '.').append(digits, 1, std::string::npos);
  char ex[16];
  std::snprintf(ex, sizeof ex, "e%c%02d", exp10 < 0 ? '-' : '+', std::abs(exp10));
  return out + ex;
}

namespace {

// Python's repr of a str: single quotes unless it holds ' and no ".
std::string repr_string(const std::string& s) {
  const bool dq = s.find('\'') != std::string::npos && s.find('"') == std::string::npos;
  const char q = dq ? '"' : '\'';
  std::string out(1, q);
  for (const char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (c == q || c == '\\') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (u < 0x20 || u == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", u);
      out += buf;
    } else {
      out += c;
    }
  }
  return out + q;
}

}  // namespace

std::string Value::repr() const {
  switch (kind_) {
    case Kind::string: return repr_string(s_);
    case Kind::list: {
      std::string out = tuple_ ? "(" : "[";
      for (size_t k = 0; k < list_->size(); ++k) out += (k ? ", " : "") + (*list_)[k].repr();
      if (tuple_ && list_->size() == 1) out += ",";
      return out + (tuple_ ? ")" : "]");
    }
    case Kind::dict: {
      std::string out = "{";
      bool first = true;
      for (const auto& [key, v] : dict_->items) {
        out += (first ? "" : ", ") + repr_string(key) + ": " + v.repr();
        first = false;
      }
      return out + "}";
    }
    default: return to_str().str();
  }
}

Value Value::to_str() const {
  switch (kind_) {
    case Kind::undefined: return string("");
    case Kind::none: return string("None");
    case Kind::boolean: return string(b_ ? "True" : "False");
    case Kind::integer: return string(std::to_string(i_));
    case Kind::floating: return string(python_float(f_));
    case Kind::string: return *this;
    case Kind::ns: return string("<Namespace>");
    case Kind::function: return string("<function " + fn_->name + ">");
    case Kind::list:
    case Kind::dict: {
      std::string s = repr();
      return has_marks() ? marked(std::move(s)) : string(std::move(s));
    }
  }
  return string("");
}

bool equal(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.kind() == Value::Kind::floating || b.kind() == Value::Kind::floating) return a.as_float() == b.as_float();
    return a.as_int() == b.as_int();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Value::Kind::undefined:
    case Value::Kind::none: return true;
    case Value::Kind::string: return a.str() == b.str();
    case Value::Kind::list: {
      if (a.items().size() != b.items().size()) return false;
      for (size_t k = 0; k < a.items().size(); ++k) {
        if (!equal(a.items()[k], b.items()[k])) return false;
      }
      return true;
    }
    case Value::Kind::dict: {
      if (a.mapping().items.size() != b.mapping().items.size()) return false;
      for (const auto& [k, v] : a.mapping().items) {
        const Value* o = b.mapping().find(k);
        if (o == nullptr || !equal(v, *o)) return false;
      }
      return true;
    }
    default: return &a.mapping() == &b.mapping();
  }
}

Value substring(const Value& s, size_t begin, size_t end) {
  std::vector<Span> marks;
  for (const Span& m : s.marks()) {
    const size_t b = std::max(m.begin, begin), e = std::min(m.end, end);
    if (b < e) marks.push_back({b - begin, e - begin});
  }
  return Value::string(s.str().substr(begin, end - begin), std::move(marks));
}

Value concat(const Value& a, const Value& b) {
  std::vector<Span> marks = a.marks();
  const size_t shift = a.str().size();
  for (const Span& m : b.marks()) marks.push_back({m.begin + shift, m.end + shift});
  return Value::string(a.str() + b.str(), std::move(marks));
}

void StringBuilder::append(const Value& s) {
  const size_t shift = text.size();
  text += s.str();
  for (const Span& m : s.marks()) {
    if (!marks.empty() && marks.back().end == m.begin + shift) {
      marks.back().end = m.end + shift;
    } else {
      marks.push_back({m.begin + shift, m.end + shift});
    }
  }
}

namespace {

void json_string(std::string& out, const std::string& s) {
  out += '"';
  for (const char c : s) {
    const auto u = static_cast<unsigned char>(c);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (u < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", u);
          out += buf;
        } else {
          out += c;
        }
    }
  }
  out += '"';
}

struct JsonWriter {
  int indent;
  std::string_view item_sep, key_sep;
  bool sort_keys;
  std::string out;

  void newline(int depth) {
    out += '\n';
    out.append(static_cast<size_t>(indent) * static_cast<size_t>(depth), ' ');
  }
  void write(const Value& v, int depth) {
    if (depth > 256) throw Error("tojson: nesting deeper than 256");
    switch (v.kind()) {
      case Value::Kind::undefined:
      case Value::Kind::none: out += "null"; return;
      case Value::Kind::boolean: out += v.as_bool() ? "true" : "false"; return;
      case Value::Kind::integer: out += std::to_string(v.as_int()); return;
      case Value::Kind::floating: {
        const double f = v.as_float();
        out += std::isnan(f) ? "NaN" : std::isinf(f) ? (f > 0 ? "Infinity" : "-Infinity") : python_float(f);
        return;
      }
      case Value::Kind::string: json_string(out, v.str()); return;
      case Value::Kind::list: {
        if (v.items().empty()) {
          out += "[]";
          return;
        }
        out += '[';
        for (size_t k = 0; k < v.items().size(); ++k) {
          if (k) out += item_sep;
          if (indent >= 0) newline(depth + 1);
          write(v.items()[k], depth + 1);
        }
        if (indent >= 0) newline(depth);
        out += ']';
        return;
      }
      case Value::Kind::dict:
      case Value::Kind::ns: {
        std::vector<const std::pair<std::string, Value>*> items;
        for (const auto& kv : v.mapping().items) items.push_back(&kv);
        if (items.empty()) {
          out += "{}";
          return;
        }
        if (sort_keys) std::sort(items.begin(), items.end(), [](auto* a, auto* b) { return a->first < b->first; });
        out += '{';
        for (size_t k = 0; k < items.size(); ++k) {
          if (k) out += item_sep;
          if (indent >= 0) newline(depth + 1);
          json_string(out, items[k]->first);
          out += key_sep;
          write(items[k]->second, depth + 1);
        }
        if (indent >= 0) newline(depth);
        out += '}';
        return;
      }
      case Value::Kind::function: throw Error("tojson: a function is not JSON serializable");
    }
  }
};

}  // namespace

std::string to_json(const Value& v, int indent, std::string_view item_sep, std::string_view key_sep, bool sort_keys) {
  JsonWriter w{indent, item_sep, key_sep, sort_keys, {}};
  w.write(v, 0);
  return std::move(w.out);
}

}  // namespace turbokv::jinja
