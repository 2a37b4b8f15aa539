// Lexer and recursive-descent parser, following Jinja2's grammar (jinja2/lexer.py, parser.py)
// with transformers' environment settings. Whitespace control follows Jinja2's lexer exactly:
//   {%- / -%} (and {{- -}}, {#- -#}) strip all whitespace (str.isspace) on that side;
//   lstrip_blocks removes the spaces before a {% or {# that starts a line, unless {%+;
//   trim_blocks removes the first newline after %} or #}, unless +%};
//   a single trailing newline of the source is dropped (keep_trailing_newline=False).
#include <algorithm>
#include <cstring>

#include "core/jinja/ast.h"
#include "core/jinja/pystring.h"
#include "grpo/sdk/utf8.h"

namespace grpo::core::jinja {
namespace {

enum class Tok { kText, kVarBegin, kVarEnd, kBlockBegin, kBlockEnd, kName, kString, kInt, kFloat, kOp, kEnd };

struct Token {
  Tok type;
  std::string text;  // text, name, operator, string value
  Value number;
  int line;
};

bool space_at(const std::string& s, std::size_t pos, std::size_t* len) {
  *len = 1;
  if (pos >= s.size()) return false;
  return py::is_space(::grpo::sdk::decode_utf8_at(s, pos, len));
}

std::string rstrip_space(const std::string& s) { return py::rstrip(s); }

class Lexer {
 public:
  Lexer(std::string source, const std::string& name) : name_(name) {
    // Jinja2: every \r\n, \r, \n is a newline; one trailing newline is dropped.
    src_.reserve(source.size());
    for (std::size_t i = 0; i < source.size(); ++i) {
      if (source[i] == '\r') {
        src_ += '\n';
        if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
      } else {
        src_ += source[i];
      }
    }
    if (!src_.empty() && src_.back() == '\n') src_.pop_back();
  }

  std::vector<Token> run() {
    bool line_starting = true;
    while (pos_ < src_.size()) {
      std::size_t start = find_tag(pos_);
      std::string text = src_.substr(pos_, start - pos_);
      if (start == src_.size()) {
        emit_text(text, pos_);
        pos_ = start;
        break;
      }
      const char kind = src_[start + 1];  // '{', '%' or '#'
      const char sign = start + 2 < src_.size() ? src_[start + 2] : '\0';
      if (sign == '-') {
        text = rstrip_space(text);
      } else if (sign != '+' && kind != '{') {
        lstrip_block(text, line_starting);
      }
      emit_text(text, pos_);
      advance_to(start);
      pos_ = start + 2 + ((sign == '-' || sign == '+') ? 1 : 0);
      if (kind == '#') {
        line_starting = lex_comment();
      } else if (kind == '%' && is_raw_tag()) {
        line_starting = lex_raw();
      } else {
        line_starting = lex_tag(kind == '%');
      }
    }
    tokens_.push_back(Token{Tok::kEnd, "", Value(), line_});
    return std::move(tokens_);
  }

 private:
  [[noreturn]] void error(const std::string& what) { throw JinjaError(name_, line_, what); }

  std::size_t find_tag(std::size_t from) const {
    for (std::size_t i = from; i + 1 < src_.size(); ++i)
      if (src_[i] == '{' && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#')) return i;
    return src_.size();
  }

  bool all_space(const std::string& s, std::size_t from) const {
    for (std::size_t i = from; i < s.size();) {
      std::size_t len;
      if (!space_at(s, i, &len)) return false;
      i += len;
    }
    return true;
  }

  // lstrip_blocks: the spaces between the last newline (or a line start) and a block or
  // comment tag go.
  void lstrip_block(std::string& text, bool line_starting) const {
    const std::size_t nl = text.rfind('\n');
    const std::size_t l_pos = nl == std::string::npos ? 0 : nl + 1;
    if ((l_pos > 0 || line_starting) && l_pos < text.size() && all_space(text, l_pos)) text.erase(l_pos);
  }

  void advance_to(std::size_t p) {
    for (; counted_ < p && counted_ < src_.size(); ++counted_)
      if (src_[counted_] == '\n') ++line_;
  }

  void emit_text(const std::string& text, std::size_t at) {
    advance_to(at);
    if (!text.empty()) tokens_.push_back(Token{Tok::kText, text, Value(), line_});
  }

  // After an end marker: "-" strips the whitespace that follows; trim_blocks drops one newline
  // after a block or comment. Returns whether the consumed text ends with a newline (Jinja2's
  // line_starting, which lstrip_blocks needs for the next tag).
  bool after_end(char sign, bool trim) {
    bool ends_newline = false;
    if (sign == '-') {
      std::size_t len;
      while (space_at(src_, pos_, &len)) {
        ends_newline = src_[pos_] == '\n';
        pos_ += len;
      }
    } else if (trim && sign != '+' && pos_ < src_.size() && src_[pos_] == '\n') {
      ++pos_;
      ends_newline = true;
    }
    return ends_newline;
  }

  bool lex_comment() {
    const std::size_t end = src_.find("#}", pos_);
    if (end == std::string::npos) error("unclosed comment: '{#' without '#}'");
    const char sign = end > pos_ && (src_[end - 1] == '-' || src_[end - 1] == '+') ? src_[end - 1] : '\0';
    pos_ = end + 2;
    return after_end(sign, true);
  }

  // {% raw %} ... {% endraw %}: the text in between is output as is.
  bool is_raw_tag() const {
    std::size_t p = pos_;
    std::size_t len;
    while (space_at(src_, p, &len)) p += len;
    if (src_.compare(p, 3, "raw") != 0) return false;
    p += 3;
    if (p < src_.size() && (std::isalnum(static_cast<unsigned char>(src_[p])) || src_[p] == '_')) return false;
    return true;
  }

  bool lex_raw() {
    const int raw_line = line_;
    std::size_t end = src_.find("%}", pos_);
    if (end == std::string::npos) error("unclosed tag: '{% raw' without '%}'");
    const char sign = src_[end - 1] == '-' ? '-' : '\0';
    pos_ = end + 2;
    after_end(sign, /*trim=*/false);  // Jinja2's raw_begin rule has no trim_blocks newline
    // Find {% endraw %} / {%- endraw -%}.
    std::size_t search = pos_;
    while (true) {
      const std::size_t open = src_.find("{%", search);
      if (open == std::string::npos) {
        line_ = raw_line;
        error("unclosed '{% raw %}': no '{% endraw %}'");
      }
      std::size_t p = open + 2;
      const char lsign = p < src_.size() && (src_[p] == '-' || src_[p] == '+') ? src_[p] : '\0';
      if (lsign) ++p;
      std::size_t len;
      while (space_at(src_, p, &len)) p += len;
      if (src_.compare(p, 6, "endraw") != 0) {
        search = open + 2;
        continue;
      }
      p += 6;
      while (space_at(src_, p, &len)) p += len;
      char rsign = '\0';
      if (p < src_.size() && (src_[p] == '-' || src_[p] == '+')) rsign = src_[p++];
      if (src_.compare(p, 2, "%}") != 0) {
        search = open + 2;
        continue;
      }
      std::string text = src_.substr(pos_, open - pos_);
      if (lsign == '-') {
        text = rstrip_space(text);
      } else if (lsign != '+') {
        lstrip_block(text, /*line_starting=*/false);
      }
      emit_text(text, pos_);
      advance_to(open);
      pos_ = p + 2;
      return after_end(rsign, true);
    }
  }

  // The inside of {{ ... }} or {% ... %}.
  bool lex_tag(bool block) {
    tokens_.push_back(Token{block ? Tok::kBlockBegin : Tok::kVarBegin, "", Value(), line_});
    std::vector<char> brackets;
    while (true) {
      std::size_t len;
      while (space_at(src_, pos_, &len)) pos_ += len;
      advance_to(pos_);
      if (pos_ >= src_.size()) error(block ? "unclosed tag: '{%' without '%}'" : "unclosed tag: '{{' without '}}'");
      if (brackets.empty()) {
        const char* close = block ? "%}" : "}}";
        for (const char* sign : {"-", "+", ""}) {
          if (!block && *sign == '+') continue;
          const std::size_t n = std::strlen(sign);
          if (src_.compare(pos_, n, sign) == 0 && src_.compare(pos_ + n, 2, close) == 0) {
            tokens_.push_back(Token{block ? Tok::kBlockEnd : Tok::kVarEnd, "", Value(), line_});
            pos_ += n + 2;
            return after_end(n ? *sign : '\0', block);
          }
        }
      }
      const char c = src_[pos_];
      if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        std::size_t e = pos_;
        while (e < src_.size() && (std::isalnum(static_cast<unsigned char>(src_[e])) || src_[e] == '_')) ++e;
        tokens_.push_back(Token{Tok::kName, src_.substr(pos_, e - pos_), Value(), line_});
        pos_ = e;
      } else if (std::isdigit(static_cast<unsigned char>(c))) {
        lex_number();
      } else if (c == '\'' || c == '"') {
        lex_string(c);
      } else {
        static const char* const kOps[] = {"//", "**", "==", "!=", ">=", "<=", "+", "-", "/", "*", "%", "~", "[", "]",
                                           "(", ")", "{", "}", "<", ">", "=", ".", ":", "|", ",", ";"};
        std::string op;
        for (const char* o : kOps)
          if (src_.compare(pos_, std::strlen(o), o) == 0) {
            op = o;
            break;
          }
        if (op.empty()) {
          std::size_t clen = 1;
          const std::uint32_t cp = ::grpo::sdk::decode_utf8_at(src_, pos_, &clen);
          std::string ch;
          ::grpo::sdk::append_utf8(ch, cp);
          error("unexpected character '" + ch + "' in a tag");
        }
        if (op == "(" || op == "[" || op == "{") brackets.push_back(op[0]);
        if (op == ")" || op == "]" || op == "}") {
          const char open = op == ")" ? '(' : op == "]" ? '[' : '{';
          if (brackets.empty() || brackets.back() != open) error("unexpected '" + op + "'");
          brackets.pop_back();
        }
        tokens_.push_back(Token{Tok::kOp, op, Value(), line_});
        pos_ += op.size();
      }
    }
  }

  void lex_number() {
    std::size_t e = pos_;
    auto digits = [&] {
      while (e < src_.size() && (std::isdigit(static_cast<unsigned char>(src_[e])) ||
                                 (src_[e] == '_' && e + 1 < src_.size() && std::isdigit(static_cast<unsigned char>(src_[e + 1])))))
        ++e;
    };
    digits();
    bool is_float = false;
    if (e + 1 < src_.size() && src_[e] == '.' && std::isdigit(static_cast<unsigned char>(src_[e + 1]))) {
      is_float = true;
      ++e;
      digits();
    }
    if (e < src_.size() && (src_[e] == 'e' || src_[e] == 'E')) {
      std::size_t f = e + 1;
      if (f < src_.size() && (src_[f] == '+' || src_[f] == '-')) ++f;
      if (f < src_.size() && std::isdigit(static_cast<unsigned char>(src_[f]))) {
        is_float = true;
        e = f;
        digits();
      }
    }
    std::string text;
    for (std::size_t i = pos_; i < e; ++i)
      if (src_[i] != '_') text += src_[i];
    pos_ = e;
    if (is_float) {
      tokens_.push_back(Token{Tok::kFloat, text, Value(std::strtod(text.c_str(), nullptr)), line_});
      return;
    }
    errno = 0;
    const long long v = std::strtoll(text.c_str(), nullptr, 10);
    if (errno == ERANGE) error("integer literal " + text + " does not fit in 64 bits");
    tokens_.push_back(Token{Tok::kInt, text, Value(static_cast<std::int64_t>(v)), line_});
  }

  // Python's unicode-escape decoding of the literal's body (what Jinja2 applies).
  void lex_string(char quote) {
    const int start_line = line_;
    std::string out;
    std::size_t p = pos_ + 1;
    while (true) {
      if (p >= src_.size()) {
        line_ = start_line;
        error("unterminated string literal");
      }
      const char c = src_[p];
      if (c == quote) break;
      if (c != '\\') {
        out += c;
        ++p;
        continue;
      }
      if (p + 1 >= src_.size()) {
        line_ = start_line;
        error("unterminated string literal");
      }
      const char e = src_[p + 1];
      p += 2;
      auto hex = [&](int n) -> std::uint32_t {
        std::uint32_t v = 0;
        for (int i = 0; i < n; ++i, ++p) {
          if (p >= src_.size() || !std::isxdigit(static_cast<unsigned char>(src_[p])))
            error(std::string("truncated \\") + e + " escape in a string literal");
          v = v * 16 + static_cast<std::uint32_t>(std::isdigit(static_cast<unsigned char>(src_[p]))
                                                       ? src_[p] - '0'
                                                       : std::tolower(static_cast<unsigned char>(src_[p])) - 'a' + 10);
        }
        return v;
      };
      switch (e) {
        case '\n': break;  // line continuation
        case '\\': out += '\\'; break;
        case '\'': out += '\''; break;
        case '"': out += '"'; break;
        case 'a': out += '\a'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'v': out += '\v'; break;
        case 'x': ::grpo::sdk::append_utf8(out, hex(2)); break;
        case 'u': ::grpo::sdk::append_utf8(out, hex(4)); break;
        case 'U': {
          const std::uint32_t v = hex(8);
          if (v > 0x10FFFF) error("\\U escape out of range in a string literal");
          ::grpo::sdk::append_utf8(out, v);
          break;
        }
        case 'N': error("\\N{...} escapes are not supported in string literals");
        default:
          if (e >= '0' && e <= '7') {
            std::uint32_t v = static_cast<std::uint32_t>(e - '0');
            for (int i = 0; i < 2 && p < src_.size() && src_[p] >= '0' && src_[p] <= '7'; ++i, ++p)
              v = v * 8 + static_cast<std::uint32_t>(src_[p] - '0');
            ::grpo::sdk::append_utf8(out, v);
          } else {
            out += '\\';
            out += e;
          }
      }
    }
    tokens_.push_back(Token{Tok::kString, out, Value(), start_line});
    pos_ = p + 1;
  }

  std::string name_;
  std::string src_;
  std::size_t pos_ = 0;
  std::size_t counted_ = 0;
  int line_ = 1;
  std::vector<Token> tokens_;
};

// ---- parser ---------------------------------------------------------------------------------

class Parser {
 public:
  Parser(std::vector<Token> tokens, const std::string& name) : toks_(std::move(tokens)), name_(name) {}

  Body parse_all() {
    Body body = parse_body({});
    if (cur().type != Tok::kEnd) error("unexpected tag");
    return body;
  }

 private:
  struct DepthGuard {
    Parser& p;
    explicit DepthGuard(Parser& parser) : p(parser) {
      if (++p.depth_ > kMaxNesting)
        p.error("the template is nested deeper than " + std::to_string(kMaxNesting) + " levels");
    }
    ~DepthGuard() { --p.depth_; }
  };

  const Token& cur() const { return toks_[i_]; }
  const Token& peek(std::size_t n = 1) const { return toks_[std::min(i_ + n, toks_.size() - 1)]; }
  Token next() { return toks_[i_ < toks_.size() - 1 ? i_++ : i_]; }
  [[noreturn]] void error(const std::string& what) const { throw JinjaError(name_, cur().line, what); }

  bool is_op(const char* op) const { return cur().type == Tok::kOp && cur().text == op; }
  bool is_name(const char* n) const { return cur().type == Tok::kName && cur().text == n; }
  bool skip_op(const char* op) {
    if (!is_op(op)) return false;
    ++i_;
    return true;
  }
  bool skip_name(const char* n) {
    if (!is_name(n)) return false;
    ++i_;
    return true;
  }
  std::string describe(const Token& t) const {
    switch (t.type) {
      case Tok::kText: return "text";
      case Tok::kVarBegin: return "'{{'";
      case Tok::kVarEnd: return "'}}'";
      case Tok::kBlockBegin: return "'{%'";
      case Tok::kBlockEnd: return "'%}'";
      case Tok::kName: return "'" + t.text + "'";
      case Tok::kString: return "a string";
      case Tok::kInt:
      case Tok::kFloat: return "'" + t.text + "'";
      case Tok::kOp: return "'" + t.text + "'";
      case Tok::kEnd: return "the end of the template";
    }
    return "?";
  }
  void expect_op(const char* op) {
    if (!skip_op(op)) error(std::string("expected '") + op + "', got " + describe(cur()));
  }
  std::string expect_name() {
    if (cur().type != Tok::kName) error("expected a name, got " + describe(cur()));
    return next().text;
  }
  void expect_block_end(const std::string& tag) {
    if (cur().type != Tok::kBlockEnd) error("expected '%}' to end '" + tag + "', got " + describe(cur()));
    ++i_;
  }

  NodePtr node(Node::Kind k, int line) { return std::make_unique<Node>(k, line); }

  // Records how deep the tree below `n` is: chains (`a + b + c ...`, `x|f|g ...`, `a.b.c ...`)
  // grow in loops, and a tree too deep would overflow the stack when evaluated or freed.
  NodePtr deep(NodePtr n) {
    int d = 0;
    if (n->object) d = std::max(d, n->object->depth);
    for (const auto& a : n->args)
      if (a) d = std::max(d, a->depth);
    for (const auto& kv : n->kwargs) d = std::max(d, kv.second->depth);
    n->depth = d + 1;
    if (n->depth > kMaxTreeDepth)
      throw JinjaError(name_, n->line, "the template has an expression nested deeper than " + std::to_string(kMaxTreeDepth) + " levels");
    return n;
  }

  // ---- statements ----

  // Parses until a {% name %} with name in `ends` (not consumed: cur() is that name).
  Body parse_body(const std::vector<std::string>& ends) {
    DepthGuard guard(*this);
    Body body;
    while (true) {
      const Token& t = cur();
      if (t.type == Tok::kEnd) {
        if (!ends.empty()) error("unexpected end of template: expected '{% " + ends.back() + " %}'");
        return body;
      }
      if (t.type == Tok::kText) {
        auto n = node(Node::Kind::kText, t.line);
        n->value = Value(t.text);
        body.push_back(std::move(n));
        ++i_;
      } else if (t.type == Tok::kVarBegin) {
        ++i_;
        auto n = node(Node::Kind::kOutput, t.line);
        n->object = parse_tuple();
        if (cur().type != Tok::kVarEnd) error("expected '}}', got " + describe(cur()));
        ++i_;
        body.push_back(std::move(n));
      } else if (t.type == Tok::kBlockBegin) {
        if (peek().type == Tok::kName) {
          const std::string& kw = peek().text;
          for (const std::string& e : ends)
            if (kw == e) {
              ++i_;  // the '{%'
              return body;
            }
        }
        ++i_;
        body.push_back(parse_statement(ends));
      } else {
        error("unexpected " + describe(t));
      }
    }
  }

  NodePtr parse_statement(const std::vector<std::string>& open) {
    if (cur().type != Tok::kName) error("expected a statement name after '{%', got " + describe(cur()));
    const std::string kw = cur().text;
    const int line = cur().line;
    if (kw == "if") return parse_if();
    if (kw == "for") return parse_for();
    if (kw == "set") return parse_set();
    if (kw == "macro") return parse_macro();
    if (kw == "call") return parse_call_block();
    if (kw == "filter") return parse_filter_block();
    if (kw == "generation") {
      ++i_;
      expect_block_end("generation");
      auto n = node(Node::Kind::kScope, line);
      n->bodies.push_back(parse_body({"endgeneration"}));
      ++i_;
      expect_block_end("endgeneration");
      return n;
    }
    if (kw == "break" || kw == "continue") {
      ++i_;
      expect_block_end(kw);
      return node(kw == "break" ? Node::Kind::kBreak : Node::Kind::kContinue, line);
    }
    static const std::vector<std::string> kUnsupported = {"include", "import", "from", "extends", "block", "with",
                                                          "autoescape", "do", "trans", "pluralize"};
    for (const auto& u : kUnsupported)
      if (kw == u)
        error("'{% " + kw + " %}' is not supported in chat templates (supported statements: if, for, set, macro, call, "
              "filter, raw, generation, break, continue)");
    if (kw.rfind("end", 0) == 0 || kw == "elif" || kw == "else") {
      if (open.empty()) error("unexpected '{% " + kw + " %}': no block is open");
      error("unexpected '{% " + kw + " %}': expected '{% " + open.back() + " %}'");
    }
    error("unknown statement '{% " + kw + " %}'");
  }

  NodePtr parse_if() {
    auto n = node(Node::Kind::kIf, cur().line);
    ++i_;  // if
    while (true) {
      n->args.push_back(parse_tuple());
      expect_block_end("if");
      n->bodies.push_back(parse_body({"elif", "else", "endif"}));
      const std::string kw = next().text;
      if (kw == "elif") continue;
      if (kw == "else") {
        expect_block_end("else");
        n->bodies.push_back(parse_body({"endif"}));
        ++i_;
      } else {
        n->bodies.emplace_back();
      }
      expect_block_end("endif");
      return n;
    }
  }

  std::vector<std::string> parse_targets(const char* what) {
    std::vector<std::string> names;
    const bool paren = skip_op("(");
    do {
      if (cur().type != Tok::kName) error(std::string("expected a variable name in ") + what + ", got " + describe(cur()));
      names.push_back(next().text);
    } while (skip_op(",") && cur().type == Tok::kName);
    if (paren) expect_op(")");
    return names;
  }

  NodePtr parse_for() {
    auto n = node(Node::Kind::kFor, cur().line);
    ++i_;  // for
    n->targets = parse_targets("'for'");
    if (!skip_name("in")) error("expected 'in' in '{% for %}', got " + describe(cur()));
    n->object = parse_tuple(/*with_condexpr=*/false);
    n->args.push_back(skip_name("if") ? parse_expression() : nullptr);
    n->recursive = skip_name("recursive");
    expect_block_end("for");
    n->bodies.push_back(parse_body({"endfor", "else"}));
    if (next().text == "else") {
      expect_block_end("else");
      n->bodies.push_back(parse_body({"endfor"}));
      ++i_;
    } else {
      n->bodies.emplace_back();
    }
    expect_block_end("endfor");
    return n;
  }

  NodePtr parse_set() {
    const int line = cur().line;
    ++i_;  // set
    if (cur().type == Tok::kName && peek().type == Tok::kOp && peek().text == "." && peek(2).type == Tok::kName) {
      auto n = node(Node::Kind::kSet, line);
      n->name = next().text;
      ++i_;
      n->attr = next().text;
      expect_op("=");
      n->object = parse_tuple();
      expect_block_end("set");
      return n;
    }
    std::vector<std::string> targets = parse_targets("'set'");
    if (skip_op("=")) {
      auto n = node(Node::Kind::kSet, line);
      n->targets = std::move(targets);
      n->object = parse_tuple();
      expect_block_end("set");
      return n;
    }
    if (targets.size() != 1) error("a block '{% set %}' takes one name");
    auto n = node(Node::Kind::kSetBlock, line);
    n->targets = std::move(targets);
    n->args.push_back(is_op("|") ? parse_filter_chain(nullptr) : nullptr);
    expect_block_end("set");
    n->bodies.push_back(parse_body({"endset"}));
    ++i_;
    expect_block_end("endset");
    return n;
  }

  void parse_signature(Node& n) {
    expect_op("(");
    while (!is_op(")")) {
      if (!n.targets.empty()) expect_op(",");
      if (is_op(")")) break;
      n.targets.push_back(expect_name());
      n.args.push_back(skip_op("=") ? parse_expression() : nullptr);
    }
    expect_op(")");
  }

  NodePtr parse_macro() {
    auto n = node(Node::Kind::kMacro, cur().line);
    ++i_;
    n->name = expect_name();
    parse_signature(*n);
    expect_block_end("macro");
    n->bodies.push_back(parse_body({"endmacro"}));
    ++i_;
    expect_block_end("endmacro");
    return n;
  }

  NodePtr parse_call_block() {
    auto n = node(Node::Kind::kCallBlock, cur().line);
    ++i_;
    if (is_op("(")) parse_signature(*n);
    n->object = parse_expression();
    if (n->object->kind != Node::Kind::kCall) error("expected a call after '{% call %}'");
    expect_block_end("call");
    n->bodies.push_back(parse_body({"endcall"}));
    ++i_;
    expect_block_end("endcall");
    return n;
  }

  NodePtr parse_filter_block() {
    auto n = node(Node::Kind::kFilterBlock, cur().line);
    ++i_;
    // `{% filter upper %}`: the chain starts without a '|'.
    n->object = parse_filter_chain(nullptr, /*leading_pipe=*/false);
    expect_block_end("filter");
    n->bodies.push_back(parse_body({"endfilter"}));
    ++i_;
    expect_block_end("endfilter");
    return n;
  }

  // ---- expressions ----

  NodePtr parse_tuple(bool with_condexpr = true) {
    const int line = cur().line;
    auto first = with_condexpr ? parse_expression() : parse_or();
    if (!is_op(",")) return first;
    auto t = node(Node::Kind::kTuple, line);
    t->args.push_back(std::move(first));
    while (skip_op(",")) {
      if (cur().type == Tok::kBlockEnd || cur().type == Tok::kVarEnd || is_op(")") || is_op("=")) break;
      t->args.push_back(with_condexpr ? parse_expression() : parse_or());
    }
    return t;
  }

  NodePtr parse_expression() {
    DepthGuard guard(*this);
    auto expr = parse_or();
    while (is_name("if")) {
      auto n = node(Node::Kind::kCondExpr, cur().line);
      ++i_;
      auto test = parse_or();
      NodePtr otherwise = skip_name("else") ? parse_expression() : nullptr;
      n->args.push_back(std::move(test));
      n->args.push_back(std::move(expr));
      n->args.push_back(std::move(otherwise));
      expr = deep(std::move(n));
    }
    return expr;
  }

  NodePtr binary(const std::string& op, NodePtr a, NodePtr b, int line) {
    auto n = node(Node::Kind::kBinary, line);
    n->ops.push_back(op);
    n->args.push_back(std::move(a));
    n->args.push_back(std::move(b));
    return deep(std::move(n));
  }

  NodePtr parse_or() {
    auto left = parse_and();
    while (is_name("or")) {
      const int line = next().line;
      left = binary("or", std::move(left), parse_and(), line);
    }
    return left;
  }

  NodePtr parse_and() {
    auto left = parse_not();
    while (is_name("and")) {
      const int line = next().line;
      left = binary("and", std::move(left), parse_not(), line);
    }
    return left;
  }

  NodePtr parse_not() {
    if (is_name("not")) {
      DepthGuard guard(*this);
      auto n = node(Node::Kind::kUnary, next().line);
      n->ops.push_back("not");
      n->object = parse_not();
      return n;
    }
    return parse_compare();
  }

  NodePtr parse_compare() {
    auto expr = parse_math1();
    NodePtr cmp;
    while (true) {
      std::string op;
      if (cur().type == Tok::kOp &&
          (cur().text == "==" || cur().text == "!=" || cur().text == "<" || cur().text == ">" || cur().text == "<=" ||
           cur().text == ">=")) {
        op = next().text;
      } else if (is_name("in")) {
        ++i_;
        op = "in";
      } else if (is_name("not") && peek().type == Tok::kName && peek().text == "in") {
        i_ += 2;
        op = "notin";
      } else {
        break;
      }
      if (!cmp) {
        cmp = node(Node::Kind::kCompare, expr->line);
        cmp->object = std::move(expr);
      }
      cmp->ops.push_back(op);
      cmp->args.push_back(parse_math1());
      if (cmp->args.size() > static_cast<std::size_t>(kMaxTreeDepth)) error("too many chained comparisons");
    }
    return cmp ? deep(std::move(cmp)) : std::move(expr);
  }

  NodePtr parse_math1() {
    auto left = parse_concat();
    while (is_op("+") || is_op("-")) {
      const Token t = next();
      left = binary(t.text, std::move(left), parse_concat(), t.line);
    }
    return left;
  }

  NodePtr parse_concat() {
    auto left = parse_math2();
    while (is_op("~")) {
      const int line = next().line;
      left = binary("~", std::move(left), parse_math2(), line);
    }
    return left;
  }

  NodePtr parse_math2() {
    auto left = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const Token t = next();
      left = binary(t.text, std::move(left), parse_pow(), t.line);
    }
    return left;
  }

  NodePtr parse_pow() {
    auto left = parse_unary();
    while (is_op("**")) {
      const int line = next().line;
      left = binary("**", std::move(left), parse_unary(), line);
    }
    return left;
  }

  NodePtr parse_unary(bool with_filter = true) {
    DepthGuard guard(*this);
    NodePtr n;
    if (is_op("-") || is_op("+")) {
      const Token t = next();
      n = node(Node::Kind::kUnary, t.line);
      n->ops.push_back(t.text);
      n->object = parse_unary(false);
      n = deep(std::move(n));
    } else {
      n = parse_primary();
    }
    n = parse_postfix(std::move(n));
    if (with_filter) n = parse_filter_expr(std::move(n));
    return n;
  }

  NodePtr parse_primary() {
    const Token& t = cur();
    switch (t.type) {
      case Tok::kName: {
        const std::string& s = t.text;
        auto n = node(Node::Kind::kLiteral, t.line);
        if (s == "true" || s == "True") n->value = Value(true);
        else if (s == "false" || s == "False") n->value = Value(false);
        else if (s == "none" || s == "None") n->value = Value::none();
        else {
          n->kind = Node::Kind::kName;
          n->name = s;
        }
        ++i_;
        return n;
      }
      case Tok::kString: {
        auto n = node(Node::Kind::kLiteral, t.line);
        std::string s;
        while (cur().type == Tok::kString) s += next().text;  // adjacent literals concatenate
        n->value = Value(std::move(s));
        return n;
      }
      case Tok::kInt:
      case Tok::kFloat: {
        auto n = node(Node::Kind::kLiteral, t.line);
        n->value = t.number;
        ++i_;
        return n;
      }
      case Tok::kOp: {
        if (t.text == "(") {
          ++i_;
          if (skip_op(")")) return node(Node::Kind::kTuple, t.line);
          auto inner = parse_tuple();
          expect_op(")");
          return inner;
        }
        if (t.text == "[") {
          auto n = node(Node::Kind::kList, t.line);
          ++i_;
          while (!is_op("]")) {
            if (!n->args.empty()) expect_op(",");
            if (is_op("]")) break;
            n->args.push_back(parse_expression());
          }
          expect_op("]");
          return n;
        }
        if (t.text == "{") {
          auto n = node(Node::Kind::kDict, t.line);
          ++i_;
          while (!is_op("}")) {
            if (!n->args.empty()) expect_op(",");
            if (is_op("}")) break;
            n->args.push_back(parse_expression());
            expect_op(":");
            n->args.push_back(parse_expression());
          }
          expect_op("}");
          return n;
        }
        break;
      }
      default: break;
    }
    error("unexpected " + describe(t) + " in an expression");
  }

  NodePtr parse_postfix(NodePtr n) {
    while (true) {
      if (is_op(".")) {
        const int line = next().line;
        auto a = node(Node::Kind::kGetAttr, line);
        if (cur().type == Tok::kName) {
          a->name = next().text;
        } else if (cur().type == Tok::kInt) {  // foo.0 is foo[0]
          a->kind = Node::Kind::kGetItem;
          auto idx = node(Node::Kind::kLiteral, line);
          idx->value = next().number;
          a->args.push_back(std::move(idx));
        } else {
          error("expected an attribute name after '.', got " + describe(cur()));
        }
        a->object = std::move(n);
        n = deep(std::move(a));
      } else if (is_op("[")) {
        n = deep(parse_subscript(std::move(n)));
      } else if (is_op("(")) {
        n = deep(parse_call(std::move(n)));
      } else {
        return n;
      }
    }
  }

  NodePtr parse_subscript(NodePtr obj) {
    DepthGuard guard(*this);
    const int line = next().line;  // '['
    NodePtr parts[3];
    int colons = 0;
    while (!is_op("]")) {
      if (skip_op(":")) {
        if (++colons > 2) error("a slice takes at most three parts");
        continue;
      }
      if (parts[colons]) error("expected ':' or ']' in a subscript, got " + describe(cur()));
      parts[colons] = parse_expression();
    }
    expect_op("]");
    if (colons == 0) {
      if (!parts[0]) error("empty subscript '[]'");
      auto n = node(Node::Kind::kGetItem, line);
      n->object = std::move(obj);
      n->args.push_back(std::move(parts[0]));
      return n;
    }
    auto n = node(Node::Kind::kSlice, line);
    n->object = std::move(obj);
    for (auto& p : parts) n->args.push_back(std::move(p));
    return n;
  }

  void parse_call_args(Node& n) {
    expect_op("(");
    bool first = true;
    while (!is_op(")")) {
      if (!first) expect_op(",");
      first = false;
      if (is_op(")")) break;
      if (is_op("*") || is_op("**")) error("*args and **kwargs in calls are not supported");
      if (cur().type == Tok::kName && peek().type == Tok::kOp && peek().text == "=") {
        std::string key = next().text;
        ++i_;
        n.kwargs.emplace_back(std::move(key), parse_expression());
      } else {
        if (!n.kwargs.empty()) error("a positional argument follows a keyword argument");
        n.args.push_back(parse_expression());
      }
    }
    expect_op(")");
  }

  NodePtr parse_call(NodePtr callee) {
    DepthGuard guard(*this);
    auto n = node(Node::Kind::kCall, cur().line);
    n->object = std::move(callee);
    parse_call_args(*n);
    return n;
  }

  // `| name(args) | name ...`; `input` null inside {% filter %} and {% set x | f %}.
  NodePtr parse_filter_chain(NodePtr input, bool leading_pipe = true) {
    bool first = true;
    while ((first && !leading_pipe) || skip_op("|")) {
      first = false;
      auto f = node(Node::Kind::kFilter, cur().line);
      f->name = expect_name();
      while (skip_op(".")) f->name += "." + expect_name();
      if (is_op("(")) parse_call_args(*f);
      f->object = std::move(input);
      input = deep(std::move(f));
    }
    return input;
  }

  NodePtr parse_filter_expr(NodePtr n) {
    while (true) {
      if (is_op("|")) {
        n = parse_filter_chain(std::move(n));
      } else if (is_name("is")) {
        DepthGuard guard(*this);
        auto t = node(Node::Kind::kTest, next().line);
        t->negated = skip_name("not");
        t->name = expect_name();
        while (skip_op(".")) t->name += "." + expect_name();
        if (is_op("(")) {
          parse_call_args(*t);
        } else if ((cur().type == Tok::kName || cur().type == Tok::kString || cur().type == Tok::kInt ||
                    cur().type == Tok::kFloat || is_op("[") || is_op("{")) &&
                   !(is_name("else") || is_name("or") || is_name("and") || is_name("if") || is_name("is") ||
                     is_name("in") || is_name("not"))) {
          // `is divisibleby 3`, `is sameas false`: one argument without parentheses.
          auto arg = parse_postfix(parse_primary());
          t->args.push_back(std::move(arg));
        }
        t->object = std::move(n);
        n = deep(std::move(t));
      } else if (is_op("(")) {
        n = deep(parse_call(std::move(n)));
      } else {
        return n;
      }
    }
  }

  std::vector<Token> toks_;
  std::string name_;
  std::size_t i_ = 0;
  int depth_ = 0;
};

}  // namespace

Body parse_template(const std::string& source, const std::string& name) {
  if (source.size() > kMaxTemplateBytes)
    throw JinjaError(name, 1, "the template is " + std::to_string(source.size()) + " bytes, more than the limit of " +
                                  std::to_string(kMaxTemplateBytes));
  if (::grpo::sdk::first_invalid_utf8(source) != std::string_view::npos)
    throw JinjaError(name, 1, "the template is not valid UTF-8");
  Lexer lexer(source, name);
  Parser parser(lexer.run(), name);
  return parser.parse_all();
}

}  // namespace grpo::core::jinja
