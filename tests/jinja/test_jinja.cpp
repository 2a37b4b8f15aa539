// The Jinja engine alone. Expected strings are what Python and Jinja2 3.1 give, worked out by
// hand from their documented rules (noted where not obvious); the broad parity runs are in
// tests/tokenizer/test_chat_template_parity.cpp.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "core/jinja/jinja.h"
#include "core/jinja/pystring.h"
#include "core/jinja/value.h"

namespace {

using grpo::core::jinja::JinjaError;
using grpo::core::jinja::RenderOptions;
using grpo::core::jinja::Template;
using ::testing::HasSubstr;

std::string render(const std::string& src, const std::string& ctx = "{}", const RenderOptions& o = {}) {
  return Template(src, "t.jinja").render(grpo::core::jinja::from_json(nlohmann::ordered_json::parse(ctx)), o);
}

std::string error(const std::string& src, const std::string& ctx = "{}", const RenderOptions& o = {}) {
  try {
    render(src, ctx, o);
  } catch (const JinjaError& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(Jinja, WhitespaceControlAsTransformersConfiguresIt) {
  // trim_blocks: the newline after a block tag goes; lstrip_blocks: the indentation before it.
  EXPECT_EQ(render("  {% if true %}\n    yes\n  {% endif %}\nend"), "    yes\nend");
  // {%- and -%} strip every whitespace character on their side, newlines included.
  EXPECT_EQ(render("a  \n {%- if true -%} \n b \n {%- endif %}"), "ab");
  EXPECT_EQ(render("a {{- 'x' -}} \n b"), "axb");
  // {%+ keeps the indentation; +%} keeps the newline.
  EXPECT_EQ(render("  {%+ if true +%}\nx{% endif %}"), "  \nx");
  // Variable tags are not lstripped; comments are.
  EXPECT_EQ(render("  {{ 1 }}\n  {# c #}\nz"), "  1\nz");
  // One trailing newline of the source is dropped; \r\n reads as \n.
  EXPECT_EQ(render("a\r\nb\n"), "a\nb");
  EXPECT_EQ(render("a\n\n"), "a\n");
  EXPECT_EQ(render("{% raw %}{{ x }}{% endraw %}"), "{{ x }}");
}

TEST(Jinja, PythonValuesPrintAsPythonDoes) {
  EXPECT_EQ(render("{{ none }} {{ true }} {{ False }} {{ 1.0 }} {{ 1e-5 }} {{ 0.0001 }} {{ 1e16 }} {{ 2.5e15 }} {{ 0.1 + 0.2 }}"),
            "None True False 1.0 1e-05 0.0001 1e+16 2500000000000000.0 0.30000000000000004");
  EXPECT_EQ(render("{{ [1, 'a', none, [true]] }} {{ {'k': 'it\\'s', 'n': 1.5} }} {{ (1,) }} {{ (1, 2) }}"),
            "[1, 'a', None, [True]] {'k': \"it's\", 'n': 1.5} (1,) (1, 2)");
  EXPECT_EQ(render("{{ undefined_name }}|{{ d.missing }}", R"({"d": {}})"), "|");
}

TEST(Jinja, ArithmeticIsPythons) {
  EXPECT_EQ(render("{{ 7 / 2 }} {{ 6 / 2 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 7 % -3 }} {{ 2 ** 10 }} {{ 2 ** -1 }}"),
            "3.5 3.0 3 -4 2 -2 1024 0.5");
  EXPECT_EQ(render("{{ 'ab' * 3 }} {{ [1] * 2 }} {{ 'a' ~ 1 ~ none }} {{ true + 1 }}"), "ababab [1, 1] a1None 2");
  EXPECT_THAT(error("{{ 'a' + 1 }}"), HasSubstr("t.jinja:1: unsupported operand type(s) for +: 'str' and 'int'"));
  EXPECT_THAT(error("\n{{ 1 / 0 }}"), HasSubstr("t.jinja:2: division by zero"));
}

TEST(Jinja, StringsAreIndexedByCodePoint) {
  EXPECT_EQ(render("{{ s[1] }} {{ s[-1] }} {{ s[1:3] }} {{ s[::-1] }} {{ s|length }}", R"({"s": "héllo🙂"})"),
            "é 🙂 él 🙂olléh 6");
  EXPECT_EQ(render("{{ 'a,b,,c'.split(',') }} {{ ' a  b '.split() }} {{ 'a b c'.split(none, 1) }} {{ 'a,b,c'.rsplit(',', 1) }}"),
            "['a', 'b', '', 'c'] ['a', 'b'] ['a', 'b c'] ['a,b', 'c']");
  EXPECT_EQ(render("{{ '\\u3000x\\xa0'|trim }}|{{ 'xxhixx'.strip('x') }}|{{ 'hello world'.title() }}|{{ 'ABC'.lower() }}"),
            "x|hi|Hello World|abc");
}

TEST(Jinja, ScopesFollowJinja2) {
  // A set inside a loop iteration is local to it (each iteration starts from the outer value);
  // inside an if it is not; a namespace carries values out.
  EXPECT_EQ(render("{% set x = 0 %}{% for i in [1, 2] %}{{ x }}{% set x = i %}{{ x }}{% endfor %}{{ x }}"), "01020");
  EXPECT_EQ(render("{% if true %}{% set y = 5 %}{% endif %}{{ y }}"), "5");
  EXPECT_EQ(render("{% set ns = namespace(n=0) %}{% for i in range(4) %}{% set ns.n = ns.n + i %}{% endfor %}{{ ns.n }}"), "6");
  EXPECT_THAT(error("{% set d = {} %}{% set d.x = 1 %}"), HasSubstr("can only set attributes on a namespace()"));
}

TEST(Jinja, LoopsAndMacros) {
  EXPECT_EQ(render("{% for x in 'abc' %}{{ loop.index }}{{ loop.revindex0 }}{{ loop.first }}{% endfor %}"),
            "12True21False30False");
  EXPECT_EQ(render("{% for x in [] %}x{% else %}empty{% endfor %}"), "empty");
  EXPECT_EQ(render("{% for x in range(10) if x is odd %}{% if x > 6 %}{% break %}{% endif %}{{ x }}/{{ loop.length }} {% endfor %}"),
            "1/5 3/5 5/5 ");
  EXPECT_EQ(render("{% for k, v in {'a': 1, 'b': 2}.items() %}{{ k }}={{ v }};{% endfor %}"), "a=1;b=2;");
  EXPECT_EQ(render("{% macro m(a, b='B') %}<{{ a }}{{ b }}>{% endmacro %}{{ m(1) }}{{ m(b=2, a=3) }}"), "<1B><32>");
  EXPECT_EQ(render("{% macro wrap() %}[{{ caller() }}]{% endmacro %}{% call wrap() %}in{% endcall %}"), "[in]");
  // A recursive loop: loop(children) renders the body one level deeper.
  EXPECT_EQ(render("{% for n in t recursive %}{{ n.k }}{{ loop.depth }}{% if n.c %}({{ loop(n.c) }}){% endif %}{% endfor %}",
                   R"({"t": [{"k": "a", "c": [{"k": "b", "c": []}, {"k": "c"}]}, {"k": "d"}]})"),
            "a1(b2c2)d1");
  EXPECT_EQ(render("{% macro f(a) %}{{ a }}{{ varargs }}{{ kwargs }}{% endmacro %}{{ f(1, 2, k=3) }}"), "1(2,){'k': 3}");
  EXPECT_EQ(render("{% filter upper %}abc{% endfilter %}{% set b %}x{{ 1 }}{% endset %}{{ b }}"), "ABCx1");
}

TEST(Jinja, TojsonIsTransformersJsonDumps) {
  const std::string ctx = R"({"v": {"b": [1, 2.0, "é\n"], "a": null, "t": true}})";
  EXPECT_EQ(render("{{ v|tojson }}", ctx), R"({"b": [1, 2.0, "é\n"], "a": null, "t": true})");
  EXPECT_EQ(render("{{ v|tojson(indent=2) }}", ctx),
            "{\n  \"b\": [\n    1,\n    2.0,\n    \"é\\n\"\n  ],\n  \"a\": null,\n  \"t\": true\n}");
  EXPECT_EQ(render("{{ v|tojson(sort_keys=true, ensure_ascii=true) }}", ctx), R"({"a": null, "b": [1, 2.0, "\u00e9\n"], "t": true})");
  EXPECT_EQ(render("{{ '<&>'|tojson }}"), "\"<&>\"");  // transformers' tojson does not HTML-escape
}

TEST(Jinja, FiltersAndTests) {
  const std::string ctx = R"({"m": [{"role": "user", "c": "a"}, {"role": "tool", "c": "b"}, {"role": "user", "c": "c"}]})";
  EXPECT_EQ(render("{{ m|selectattr('role', 'equalto', 'user')|map(attribute='c')|join(',') }}", ctx), "a,c");
  EXPECT_EQ(render("{{ m|rejectattr('role', 'eq', 'user')|list|length }}", ctx), "1");
  EXPECT_EQ(render("{{ ['b', 'A', 'c']|sort }} {{ ['a', 'A', 'b']|unique|list }} {{ [3, 1, 2]|max }}"),
            "['A', 'b', 'c'] ['a', 'b'] 3");
  EXPECT_EQ(render("{{ x|default('d') }} {{ ''|default('e', true) }} {{ '42.7'|int }} {{ 'x'|int(7) }} {{ 3.14159|round(2) }}"),
            "d e 42 7 3.14");
  EXPECT_EQ(render("{{ 'a\nb\n\nc'|indent(2) }}|{{ 'a'|indent(2, true) }}"), "a\n  b\n\n  c|  a");
  EXPECT_EQ(render("{{ 3 is odd }} {{ none is none }} {{ x is defined }} {{ 'a' is string }} {{ {} is mapping }} "
                   "{{ 9 is divisibleby 3 }} {{ 2 is in [1, 2] }}"),
            "True True False True True True True");
  EXPECT_EQ(render("{{ '%s has %d items (%.1f%%)' % ('cart', 3, 42.25) }} {{ '{} and {name}'.format(1, name='x') }}"),
            "cart has 3 items (42.2%) 1 and x");
}

TEST(Jinja, GlobalsOfTransformers) {
  EXPECT_EQ(render("{{ range(3)|list }} {{ range(1, 7, 2)|list }} {{ range(3, 0, -1)|list }}"), "[0, 1, 2] [1, 3, 5] [3, 2, 1]");
  RenderOptions fixed;
  fixed.strftime_now = [](const std::string& f) { return "26 Jul 2024 (" + f + ")"; };
  EXPECT_EQ(render("{{ strftime_now('%d %b %Y') }}", "{}", fixed), "26 Jul 2024 (%d %b %Y)");
  EXPECT_EQ(render("{{ strftime_now('%Y')|length }}"), "4");
  try {
    render("a\n{{ raise_exception('bad: ' ~ 3) }}");
    FAIL() << "no exception";
  } catch (const JinjaError& e) {
    EXPECT_TRUE(e.raised());
    EXPECT_EQ(e.message(), "bad: 3");
    EXPECT_EQ(e.line(), 2);
  }
}

TEST(Jinja, TheSandboxRefusesMutation) {
  EXPECT_THAT(error("{% set l = [] %}{{ l.append(1) }}"), HasSubstr("access to attribute 'append' of 'list' object is unsafe"));
  EXPECT_THAT(error("{% set d = {} %}{% set _ = d.update({'a': 1}) %}"), HasSubstr("'update' of 'dict' object is unsafe"));
}

TEST(Jinja, UnsupportedFeaturesNameThemselvesAndTheLine) {
  EXPECT_THAT(error("x\n{% extends 'base.html' %}"), HasSubstr("t.jinja:2: '{% extends %}' is not supported in chat templates"));
  EXPECT_THAT(error("\n\n{{ x|wordwrap }}"), HasSubstr("t.jinja:3: unknown filter 'wordwrap'"));
  EXPECT_THAT(error("{{ x is frobbed }}"), HasSubstr("t.jinja:1: unknown test 'frobbed'"));
  EXPECT_THAT(error("{% if x %}\n{% endfor %}"), HasSubstr("t.jinja:2: unexpected '{% endfor %}': expected '{% endif %}'"));
  EXPECT_THAT(error("{{ 'abc }}"), HasSubstr("t.jinja:1: unterminated string literal"));
  EXPECT_THAT(error("{{ a.b }}"), HasSubstr("'a' is undefined"));
}

TEST(Jinja, HostileTemplatesGetErrorsNotCrashes) {
  // Deep nesting of expressions and of blocks.
  EXPECT_THAT(error("{{ " + std::string(100000, '(') + "1" + std::string(100000, ')') + " }}"),
              HasSubstr("nested deeper than 128 levels"));
  EXPECT_THAT(error("{{ " + std::string(5000, '-') + "1 }}"), HasSubstr("nested deeper than 128 levels"));
  std::string blocks;
  for (int i = 0; i < 5000; ++i) blocks += "{% if true %}";
  EXPECT_THAT(error(blocks), HasSubstr("nested deeper than 128 levels"));
  // Huge templates, endless work, huge output, endless recursion.
  EXPECT_THAT(error(std::string(2 << 20, 'x')), HasSubstr("more than the limit of 1048576"));
  RenderOptions small;
  small.max_steps = 100000;
  EXPECT_THAT(error("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", "{}", small),
              HasSubstr("ran for more than 100000 steps"));
  EXPECT_THAT(error("{{ range(1000000) }}"), HasSubstr("range too big"));
  small.max_output_bytes = 1000;
  EXPECT_THAT(error("{% for i in range(1000) %}xx{% endfor %}", "{}", small), HasSubstr("output is larger than 1000 bytes"));
  EXPECT_THAT(error("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}"), HasSubstr("macro calls nested deeper than 100"));
  EXPECT_THAT(error("{{ 'x' * 100000000000 }}"), HasSubstr("string too long"));
  EXPECT_THAT(error("{{ 2 ** 64 }}"), HasSubstr("integer overflow"));
}

TEST(PyString, FloatReprIsTheShortestRoundTrip) {
  using grpo::core::jinja::float_repr;
  EXPECT_EQ(float_repr(0.1), "0.1");
  EXPECT_EQ(float_repr(100.0), "100.0");
  EXPECT_EQ(float_repr(1e22), "1e+22");
  EXPECT_EQ(float_repr(-1.5e-7), "-1.5e-07");
  EXPECT_EQ(float_repr(123456789012345678.0), "1.2345678901234568e+17");
  EXPECT_EQ(float_repr(1.0 / 3), "0.3333333333333333");
}

}  // namespace

namespace {

// Operator, filter and attribute chains are parsed in loops; their depth is bounded too, so
// evaluating or freeing them cannot overflow the stack.
TEST(Jinja, LongChainsAreBounded) {
  std::string sum = "{{ 1";
  for (int i = 0; i < 100000; ++i) sum += " + 1";
  EXPECT_THAT(error(sum + " }}"), HasSubstr("an expression nested deeper than 512 levels"));
  std::string filters = "{{ 'a'";
  for (int i = 0; i < 100000; ++i) filters += "|upper";
  EXPECT_THAT(error(filters + " }}"), HasSubstr("nested deeper than 512 levels"));
  std::string attrs = "{{ x";
  for (int i = 0; i < 100000; ++i) attrs += ".a";
  EXPECT_THAT(error(attrs + " }}"), HasSubstr("nested deeper than 512 levels"));
  std::string ok = "{{ 0";
  for (int i = 0; i < 300; ++i) ok += " + 1";
  EXPECT_EQ(render(ok + " }}"), "300");
}

}  // namespace
