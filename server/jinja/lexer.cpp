#include "server/jinja/lexer.hpp"

#include <cctype>
#include <string>

#include "server/jinja/value.hpp"

namespace turbokv::jinja {

namespace {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

std::string fail_at(int line, const std::string& what) { return "template line " + std::to_string(line) + ": " + what; }

// jinja2 reads the source with its newlines normalized to \n and drops one trailing newline.
std::string normalize(std::string_view src) {
  std::string out;
  out.reserve(src.size());
  for (size_t k = 0; k < src.size(); ++k) {
    if (src[k] == '\r') {
      out += '\n';
      if (k + 1 < src.size() && src[k + 1] == '\n') ++k;
    } else {
      out += src[k];
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

class Lexer {
 public:
  explicit Lexer(std::string_view source) : src_(normalize(source)) {}

  std::vector<Token> run() {
    bool line_starting = true;  // the previous tag ended a line (or this is the template's start)
    bool strip_next = false;    // the previous tag ended with '-'
    while (pos_ < src_.size() || strip_next) {
      const size_t open = find_open(pos_);
      std::string text = src_.substr(pos_, open - pos_);
      if (strip_next) {
        size_t k = 0;
        while (k < text.size() && is_space(text[k])) ++k;
        text.erase(0, k);
        strip_next = false;
      }
      if (open == src_.size()) {
        emit_text(text);
        break;
      }
      const char kind = src_[open + 1];  // '{', '%' or '#'
      const char sign = open + 2 < src_.size() ? src_[open + 2] : '\0';
      if (sign == '-') {
        size_t e = text.size();
        while (e > 0 && is_space(text[e - 1])) --e;
        text.resize(e);
      } else if (sign != '+' && kind != '{') {  // lstrip_blocks: a block or comment tag alone at a line's start
        const size_t nl = text.rfind('\n');
        const size_t l_pos = nl == std::string::npos ? 0 : nl + 1;
        if (l_pos > 0 || line_starting) {
          bool blank = l_pos < text.size();
          for (size_t k = l_pos; k < text.size(); ++k) blank = blank && is_space(text[k]);
          if (blank) text.resize(l_pos);
        }
      }
      emit_text(text);
      line_ += count_lines(pos_, open);
      pos_ = open + 2 + ((sign == '-' || sign == '+') ? 1 : 0);
      if (kind == '#') {
        const size_t close = src_.find("#}", pos_);
        if (close == std::string::npos) throw Error(fail_at(line_, "unterminated comment {# ... #}"));
        const bool minus = close > pos_ && src_[close - 1] == '-';
        line_ += count_lines(pos_, close);
        pos_ = close + 2;
        finish_tag(minus, false, true, strip_next);
      } else if (kind == '%' && try_raw()) {
        // handled: the raw text was emitted
      } else {
        lex_tag(kind == '{', strip_next);
      }
      line_starting = pos_ > 0 && src_[pos_ - 1] == '\n';
      if (strip_next) line_starting = false;
    }
    tokens_.push_back({Token::Kind::end, "", line_});
    return std::move(tokens_);
  }

 private:
  size_t find_open(size_t from) const {
    for (size_t k = from; k + 1 < src_.size(); ++k) {
      if (src_[k] == '{' && (src_[k + 1] == '{' || src_[k + 1] == '%' || src_[k + 1] == '#')) return k;
    }
    return src_.size();
  }
  int count_lines(size_t a, size_t b) const {
    int n = 0;
    for (size_t k = a; k < b && k < src_.size(); ++k) n += src_[k] == '\n';
    return n;
  }
  void emit_text(const std::string& text) {
    if (!text.empty()) tokens_.push_back({Token::Kind::text, text, line_});
  }
  // After a tag's closing delimiter: '-' strips the following whitespace, a block tag (or comment)
  // without '+' drops one newline (trim_blocks).
  void finish_tag(bool minus, bool plus, bool block, bool& strip_next) {
    if (minus) {
      strip_next = true;
    } else if (block && !plus && pos_ < src_.size() && src_[pos_] == '\n') {
      ++pos_;
      ++line_;
    }
  }
  // {% raw %} ... {% endraw %}: the text between, as is.
  bool try_raw() {
    size_t k = pos_;
    while (k < src_.size() && is_space(src_[k])) ++k;
    if (src_.compare(k, 3, "raw") != 0) return false;
    k += 3;
    while (k < src_.size() && is_space(src_[k])) ++k;
    bool minus = false;
    if (k < src_.size() && src_[k] == '-') {
      minus = true;
      ++k;
    }
    if (src_.compare(k, 2, "%}") != 0) return false;
    k += 2;
    if (minus) {
      while (k < src_.size() && is_space(src_[k])) ++k;
    } else if (k < src_.size() && src_[k] == '\n') {
      ++k;
    }
    for (size_t at = src_.find("{%", k); at != std::string::npos; at = src_.find("{%", at + 2)) {
      size_t j = at + 2;
      const bool lminus = j < src_.size() && src_[j] == '-';
      if (j < src_.size() && (src_[j] == '-' || src_[j] == '+')) ++j;
      while (j < src_.size() && is_space(src_[j])) ++j;
      if (src_.compare(j, 6, "endraw") != 0) continue;
      j += 6;
      while (j < src_.size() && is_space(src_[j])) ++j;
      const bool rminus = j < src_.size() && src_[j] == '-';
      if (rminus) ++j;
      if (src_.compare(j, 2, "%}") != 0) continue;
      std::string text = src_.substr(k, at - k);
      if (lminus) {
        while (!text.empty() && is_space(text.back())) text.pop_back();
      }
      emit_text(text);
      line_ += count_lines(pos_, j + 2);
      pos_ = j + 2;
      if (rminus) {
        while (pos_ < src_.size() && is_space(src_[pos_])) ++pos_;
      } else if (pos_ < src_.size() && src_[pos_] == '\n') {
        ++pos_;
      }
      return true;
    }
    throw Error(fail_at(line_, "{% raw %} without {% endraw %}"));
  }

  void lex_tag(bool variable, bool& strip_next) {
    tokens_.push_back({variable ? Token::Kind::var_begin : Token::Kind::block_begin, "", line_});
    const char close = variable ? '}' : '%';
    int depth = 0;  // open brackets: "}}" inside {{ {'a': {}} }} closes a dict first
    while (true) {
      while (pos_ < src_.size() && is_space(src_[pos_])) {
        line_ += src_[pos_] == '\n';
        ++pos_;
      }
      if (pos_ >= src_.size()) throw Error(fail_at(line_, variable ? "unterminated {{ ... }}" : "unterminated {% ... %}"));
      const char c = src_[pos_];
      // The closing delimiter, with its optional whitespace control sign.
      for (const char sign : {'\0', '-', '+'}) {
        const size_t at = pos_ + (sign ? 1 : 0);
        if (sign && c != sign) continue;
        if (depth == 0 && at + 1 < src_.size() && src_[at] == close && src_[at + 1] == '}') {
          if (sign == '+' && variable) break;
          pos_ = at + 2;
          tokens_.push_back({variable ? Token::Kind::var_end : Token::Kind::block_end, "", line_});
          finish_tag(sign == '-', sign == '+', !variable, strip_next);
          return;
        }
      }
      if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        size_t e = pos_;
        while (e < src_.size() && (std::isalnum(static_cast<unsigned char>(src_[e])) || src_[e] == '_')) ++e;
        tokens_.push_back({Token::Kind::name, src_.substr(pos_, e - pos_), line_});
        pos_ = e;
      } else if (std::isdigit(static_cast<unsigned char>(c))) {
        lex_number();
      } else if (c == '\'' || c == '"') {
        lex_string(c);
      } else {
        static const char* const kOps[] = {"//", "**", "==", "!=", "<=", ">=", "+", "-", "*", "/", "%", "~", "<", ">",
                                           "=", "(", ")", "[", "]", "{", "}", ",", ".", ":", "|"};
        bool found = false;
        for (const char* op : kOps) {
          const std::string_view o(op);
          if (src_.compare(pos_, o.size(), o) == 0) {
            if (o == "(" || o == "[" || o == "{") ++depth;
            if ((o == ")" || o == "]" || o == "}") && depth > 0) --depth;
            tokens_.push_back({Token::Kind::op, std::string(o), line_});
            pos_ += o.size();
            found = true;
            break;
          }
        }
        if (!found) throw Error(fail_at(line_, std::string("unexpected character '") + c + "' in a tag"));
      }
    }
  }

  void lex_number() {
    size_t e = pos_;
    auto digits = [&] {
      while (e < src_.size() && (std::isdigit(static_cast<unsigned char>(src_[e])) || src_[e] == '_')) ++e;
    };
    digits();
    bool is_float = false;
    if (e + 1 < src_.size() && src_[e] == '.' && std::isdigit(static_cast<unsigned char>(src_[e + 1]))) {
      is_float = true;
      ++e;
      digits();
    }
    if (e < src_.size() && (src_[e] == 'e' || src_[e] == 'E')) {
      size_t k = e + 1;
      if (k < src_.size() && (src_[k] == '+' || src_[k] == '-')) ++k;
      if (k < src_.size() && std::isdigit(static_cast<unsigned char>(src_[k]))) {
        is_float = true;
        e = k;
        digits();
      }
    }
    std::string text;
    for (size_t k = pos_; k < e; ++k) {
      if (src_[k] != '_') text += src_[k];
    }
    tokens_.push_back({is_float ? Token::Kind::floating : Token::Kind::integer, text, line_});
    pos_ = e;
  }

  // A string literal, its escapes decoded as Python's unicode-escape does.
  void lex_string(char quote) {
    const int start_line = line_;
    std::string out;
    size_t k = pos_ + 1;
    while (true) {
      if (k >= src_.size()) throw Error(fail_at(start_line, "unterminated string literal"));
      const char c = src_[k];
      if (c == quote) break;
      if (c == '\n') ++line_;
      if (c != '\\' || k + 1 >= src_.size()) {
        out += c;
        ++k;
        continue;
      }
      const char e = src_[k + 1];
      k += 2;
      switch (e) {
        case 'n': out += '\n'; break;
        case 't': out += '\t'; break;
        case 'r': out += '\r'; break;
        case '\\': out += '\\'; break;
        case '\'': out += '\''; break;
        case '"': out += '"'; break;
        case 'a': out += '\a'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'v': out += '\v'; break;
        case '\n': ++line_; break;  // a backslash-newline continues the line
        case 'x':
        case 'u':
        case 'U': {
          const size_t n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
          if (k + n > src_.size()) throw Error(fail_at(line_, "truncated \\" + std::string(1, e) + " escape"));
          uint32_t cp = 0;
          for (size_t j = 0; j < n; ++j) {
            const char h = src_[k + j];
            if (!std::isxdigit(static_cast<unsigned char>(h))) throw Error(fail_at(line_, "bad \\" + std::string(1, e) + " escape"));
            cp = cp * 16 + static_cast<uint32_t>(std::isdigit(static_cast<unsigned char>(h)) ? h - '0' : (std::tolower(h) - 'a' + 10));
          }
          if (cp > 0x10FFFF) throw Error(fail_at(line_, "escape beyond U+10FFFF"));
          append_utf8(out, cp);
          k += n;
          break;
        }
        default:
          if (e >= '0' && e <= '7') {
            uint32_t cp = static_cast<uint32_t>(e - '0');
            for (int j = 0; j < 2 && k < src_.size() && src_[k] >= '0' && src_[k] <= '7'; ++j, ++k) {
              cp = cp * 8 + static_cast<uint32_t>(src_[k] - '0');
            }
            append_utf8(out, cp);
          } else {
            out += '\\';  // Python keeps an unknown escape as written
            out += e;
          }
      }
    }
    tokens_.push_back({Token::Kind::string, out, start_line});
    pos_ = k + 1;
  }

  std::string src_;
  size_t pos_ = 0;
  int line_ = 1;
  std::vector<Token> tokens_;
};

}  // namespace

std::vector<Token> tokenize(std::string_view source) { return Lexer(source).run(); }

}  // namespace turbokv::jinja
