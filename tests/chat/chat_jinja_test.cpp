// Unit tests of the Jinja interpreter: Python jinja2 semantics (expected values checked
// against jinja2 3.1 configured as transformers configures it), the @huggingface/jinja
// printing dialect, and hostile templates that must fail cleanly.
#include <gtest/gtest.h>

#include <string>

#include "base/json.h"
#include "chat/jinja_template.h"
#include "chat/jinja_text.h"

namespace rw::jinja {
namespace {

// Renders or returns "ERR <code>: <message>".
std::string R(std::string_view tpl, const Json& ctx = Json::object(),
              Dialect dialect = Dialect::kPython, RenderOptions options = {}) {
  auto t = Template::Parse(tpl);
  if (!t.ok()) return "ERR " + t.status().ToString();
  options.dialect = dialect;
  auto out = t->Render(ctx, options);
  if (!out.ok()) return "ERR " + out.status().ToString();
  return *out;
}

std::string Hf(std::string_view tpl, const Json& ctx = Json::object()) {
  return R(tpl, ctx, Dialect::kHuggingFaceJs);
}

bool IsErr(const std::string& s, std::string_view fragment = "") {
  return s.rfind("ERR ", 0) == 0 && s.find(fragment) != std::string::npos;
}

TEST(JinjaWhitespace, TrimAndLstripBlocks) {
  EXPECT_EQ(R("  {% if true %}\n  a\n  {% endif %}\n  b {{ 'c' }}  \n{# c #}\nd\n"),
            "  a\n  b c  \nd");
  EXPECT_EQ(R("a  {%- if true -%}  b  {%- endif -%}  c"), "abc");
  EXPECT_EQ(R("a {{- 'b' -}} c"), "abc");
  EXPECT_EQ(R("{% for i in [1,2] %}\n{{ i }}\n{% endfor %}\n"), "1\n2\n");
  EXPECT_EQ(R("x\n    {%+ if true %}y{% endif %}"), "x\n    y");  // + keeps the indentation
  EXPECT_EQ(R("{% if true +%}\nz{% endif %}"), "\nz");            // + keeps the newline
  EXPECT_EQ(R("line\r\nnext\r\n"), "line\nnext");                 // newlines normalized
  EXPECT_EQ(R("{# comment -#}   after"), "after");
  EXPECT_EQ(R("{% raw %}{{ not evaluated }}{% endraw %}"), "{{ not evaluated }}");
  EXPECT_EQ(R("{{ {'a': {'b': 1}}['a']['b'] }}"), "1");  // }} inside a dict literal
}

TEST(JinjaSemantics, ScopingFollowsJinja2) {
  // Loop bodies get a fresh scope per iteration and do not leak; `if` shares its scope.
  EXPECT_EQ(
      R("{% set x = 1 %}{% for i in range(3) %}{{ x }}{% set x = x + 1 %}{% endfor %}|{{ x }}"),
      "111|1");
  EXPECT_EQ(
      R("{% for i in range(3) %}{% if i == 0 %}{% set y = 5 %}{% endif %}{{ y }}{% endfor %}"),
      "5");
  EXPECT_EQ(R("{% if true %}{% set z = 3 %}{% endif %}{{ z }}"), "3");
  // namespace() is how templates carry state out of loops.
  EXPECT_EQ(R("{%- set ns = namespace(a=1) -%}{%- for i in range(3) -%}{%- set ns.a = ns.a + i "
              "-%}{%- endfor -%}{{ ns.a }}"),
            "4");
  // Macros see top-level names as they are when called, not the caller's locals.
  EXPECT_EQ(R("{% set foo = 1 %}{% macro m() %}{{ foo }}{% endmacro %}{% set foo = 2 %}{{ m() }}"
              "{% for foo in [3] %}{{ m() }}{% endfor %}"),
            "22");
}

TEST(JinjaSemantics, Loops) {
  EXPECT_EQ(
      R("{% for i in range(3) %}{% if loop.first %}f{% endif %}{{ loop.index }}{{ loop.revindex0 }}"
        "{% if loop.last %}l{% endif %}{% endfor %}"),
      "f122130l");
  EXPECT_EQ(
      R("{% for i in range(5) if i is odd %}{{ i }}{{ loop.length }}{% else %}none{% endfor %}"),
      "1232");
  EXPECT_EQ(R("{% for i in [] %}x{% else %}empty{% endfor %}"), "empty");
  EXPECT_EQ(R("{% for i in range(5) %}{% if i == 3 %}{% break %}{% endif %}{% if i == 1 %}{% "
              "continue %}{% endif %}"
              "{{ i }}{% endfor %}"),
            "02");
  EXPECT_EQ(R("{% for k, v in d | dictsort %}{{ k }}={{ v }};{% endfor %}",
              {{"d", {{"b", 1}, {"A", 2}}}}),
            "A=2;b=1;");
  EXPECT_EQ(R("{% for k in d %}{{ k }}{% endfor %}", {{"d", {{"x", 1}, {"y", 2}}}}), "xy");
  EXPECT_EQ(R("{% for c in 'héé' %}[{{ c }}]{% endfor %}"), "[h][é][é]");
  EXPECT_EQ(R("{% for a, b in [[1, 2], [3, 4]] %}{{ a + b }},{% endfor %}"), "3,7,");
  EXPECT_EQ(R("{{ range(5, 0, -2) | list }}"), "[5, 3, 1]");
  EXPECT_EQ(R("{% for i in range(3) %}{{ loop.cycle('a', 'b') }}{% endfor %}"), "aba");
}

TEST(JinjaSemantics, Macros) {
  EXPECT_EQ(
      R("{% macro m(a, b=2) %}{{ a }}{{ b }}{% endmacro %}{{ m(1) }}{{ m(1, b=3) }}{{ m(a=4) }}"),
      "121342");
  EXPECT_EQ(R("{% macro m(a) %}{{ a }}|{{ varargs }}|{{ kwargs }}{% endmacro %}{{ m(1, 2, k=3) }}"),
            "1|(2,)|{'k': 3}");
  EXPECT_TRUE(
      IsErr(R("{% macro m(a) %}{{ a }}{% endmacro %}{{ m(1, 2) }}"), "takes not more than 1"));
  EXPECT_EQ(
      R("{% macro f(n) %}{% if n > 0 %}{{ n }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(3) }}"),
      "321");
  EXPECT_EQ(R("{% macro m(x) %}{{ x is defined }}{% endmacro %}{{ m() }}"), "False");
  EXPECT_EQ(R("{% set x %}block {{ 1 + 1 }}{% endset %}[{{ x }}]"), "[block 2]");
  EXPECT_EQ(R("{% filter upper %}abc{% endfilter %}"), "ABC");
  EXPECT_EQ(R("{% set a, b = 1, 2 %}{{ a }}{{ b }}"), "12");
}

TEST(JinjaSemantics, OperatorsAndLiterals) {
  EXPECT_EQ(R("{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 2 ** 10 }} {{ 4 "
              "/ 2 }}"),
            "3 -4 1 2 3.5 1024 2.0");
  EXPECT_EQ(R("{{ 1 + 2 * 3 }}{{ (1 + 2) * 3 }}{{ 2 ** 3 ** 2 }}{{ 'ab' ~ 3 }}{{ 'x' * 3 }}"),
            "7964ab3xxx");  // ** is left-associative in Jinja
  EXPECT_EQ(R("{{ 1 < 2 < 3 }}{{ 3 > 2 > 2 }}{{ 1 == 1.0 }}{{ '1' == 1 }}{{ [1, 2] == [1, 2] }}"),
            "TrueFalseTrueFalseTrue");
  EXPECT_EQ(
      R("{{ 1 in [1, 2] }}{{ 'a' in {'a': 1} }}{{ 'b' not in 'abc' }}{{ 'x' in undefined_thing }}"),
      "TrueTrueFalseFalse");
  EXPECT_EQ(R("{{ none or 'x' }}{{ 0 and 1 }}{{ not [] }}{{ '' or [] }}"), "x0True[]");
  EXPECT_EQ(R("{{ 'a' if false }}|{{ 'yes' if 1 else 'no' }}"), "|yes");
  EXPECT_EQ(R("{{ \"it's\" }}{{ 'a\\nb' }}{{ '\\u00e9\\x41' }}{{ 'keep \\d' }}"),
            "it'sa\nbéAkeep \\d");
  EXPECT_EQ(
      R("{{ 'abc'[1:] }}{{ 'abc'[::-1] }}{{ [1, 2, 3][-1] }}{{ [1, 2, 3][5] }}{{ 'héllo'[1] }}"),
      "bccba3é");
  EXPECT_EQ(R("{{ (1, 2) }}{{ (1,) }}{{ [1, 'a', none, true, 1.5] }}{{ {'b': 1, 'a': 2} }}"),
            "(1, 2)(1,)[1, 'a', None, True, 1.5]{'b': 1, 'a': 2}");
  EXPECT_EQ(R("{{ '%s-%d-%05.1f' % ('a', 3, 2.25) }}{{ '{}!{x}'.format('y', x=1) }}"),
            "a-3-002.2y!1");
  EXPECT_EQ(R("{{ 1_000 + 0x10 }}{{ 1.5e3 }}{{ 1e-06 if false else 0.000001 }}"),
            "10161500.01e-06");
}

TEST(JinjaSemantics, Printing) {
  EXPECT_EQ(
      R("{{ x }}|{{ true }}|{{ 1.0 }}|{{ 0.1 }}|{{ 1e20 }}|{{ -0.0 }}|{{ u }}|", {{"x", nullptr}}),
      "None|True|1.0|0.1|1e+20|-0.0||");
  EXPECT_EQ(R("{{ ['it\\'s', 'say \"hi\"', 'nl\\n', 'é', '\\x01'] }}"),
            R"(["it's", 'say "hi"', 'nl\n', 'é', '\x01'])");
  EXPECT_EQ(
      R("{{ d | dictsort(reverse=true) }}{{ d | items | list }}", {{"d", {{"a", 1}, {"b", 2}}}}),
      "[('b', 2), ('a', 1)][('a', 1), ('b', 2)]");
}

TEST(JinjaSemantics, UndefinedHandling) {
  EXPECT_EQ(R("[{{ missing }}]{{ missing is defined }}{{ missing | default('d') }}{{ missing | "
              "length }}"),
            "[]Falsed0");
  EXPECT_TRUE(IsErr(R("{{ missing.attr }}"), "'missing' is undefined"));
  EXPECT_TRUE(IsErr(R("{{ missing['k'] }}"), "'missing' is undefined"));
  EXPECT_EQ(R("{{ d.nope is defined }}{{ d['nope'] is defined }}{{ none.x is defined }}",
              {{"d", Json::object()}}),
            "FalseFalseFalse");
  EXPECT_TRUE(IsErr(R("{{ 'a' + missing }}")));
  EXPECT_EQ(R("{{ none | default('x') }}{{ '' | default('y', true) }}"), "Noney");
  EXPECT_TRUE(IsErr(R("{{ missing() }}"), "undefined"));
}

TEST(JinjaSemantics, DictAndStringMethods) {
  Json ctx = {{"d", {{"items", 5}, {"get", 1}, {"k", "v"}}}};
  EXPECT_EQ(R("{{ d['items'] }}|{{ d.items is callable }}|{{ d.get('k') }}|{{ d.get('zz', 'dflt') "
              "}}|{{ d.k }}",
              ctx),
            "5|True|v|dflt|v");
  EXPECT_EQ(R("{{ d.keys() | list }}{{ d.values() | list }}", {{"d", {{"a", 1}, {"b", 2}}}}),
            "['a', 'b'][1, 2]");
  EXPECT_EQ(R("{{ 'a,b,,c'.split(',') }}{{ ' a  b '.split() }}{{ 'a,b,c'.split(',', 1) }}{{ "
              "'a,b,c'.rsplit(',', 1) }}"),
            "['a', 'b', '', 'c']['a', 'b']['a', 'b,c']['a,b', 'c']");
  EXPECT_EQ(R("{{ 'xxhixx'.strip('x') }}|{{ '  a  '.lstrip() }}|{{ '  a  '.rstrip() }}|"),
            "hi|a  |  a|");
  EXPECT_EQ(R("{{ 'abc'.startswith('ab') }}{{ 'abc'.endswith(('x', 'bc')) }}{{ 'hello'.find('l') "
              "}}{{ 'héllo'.find('l') }}"),
            "TrueTrue22");
  EXPECT_EQ(R("{{ 'abc'.replace('b', 'X') }}{{ 'hello world'.title() }}{{ 'hELLO'.capitalize() "
              "}}{{ ', '.join(['a', 'b']) }}"),
            "aXcHello WorldHelloa, b");
  EXPECT_EQ(R("{{ 'a\\nb\\r\\nc'.splitlines() }}{{ 'ß'.upper() }}{{ 'ÀÉÎ Σ Д'.lower() }}"),
            "['a', 'b', 'c']SSàéî σ д");
}

TEST(JinjaSemantics, Filters) {
  EXPECT_EQ(R("{{ [3, 1, 2] | sort }}{{ ['b', 'A', 'a'] | sort }}{{ [1, 2, 3] | sum }}{{ [1, 5, 3] "
              "| max }}{{ [4, 2] | min }}"),
            "[1, 2, 3]['A', 'a', 'b']652");
  EXPECT_EQ(R("{{ {'a': 1} | tojson }}{{ 'x<y' | tojson }}{{ [1.0, 2.5, none, true] | tojson }}{{ "
              "'é' | tojson }}"),
            R"({"a": 1}"x<y"[1.0, 2.5, null, true]"é")");
  EXPECT_EQ(R("{{ {'a': [1, {'b': 2}]} | tojson(indent=2) }}"),
            "{\n  \"a\": [\n    1,\n    {\n      \"b\": 2\n    }\n  ]\n}");
  EXPECT_EQ(R("{{ {'b': 1, 'a': 2} | tojson(sort_keys=true, separators=[',', ':']) }}{{ 'é' | "
              "tojson(ensure_ascii=true) }}"),
            R"({"a":2,"b":1}"\u00e9")");
  EXPECT_EQ(R("{{ [{'a': 1}, {'a': 2}, {'b': 3}] | selectattr('a') | list }}|{{ [{'a': 1}, {'a': "
              "2}] | map(attribute='a') | list }}"
              "|{{ ['a', 'b'] | map('upper') | join(',') }}"),
            "[{'a': 1}, {'a': 2}]|[1, 2]|A,B");
  EXPECT_EQ(R("{{ [{'a': 1}, {'a': 2}] | selectattr('a', 'equalto', 2) | list }}{{ [1, 2, 3, 4] | "
              "select('odd') | list }}"
              "{{ [1, 2, 3, 4] | reject('even') | list }}{{ [{'a': 1}, {'a': 0}] | rejectattr('a') "
              "| list }}"),
            "[{'a': 2}][1, 3][1, 3][{'a': 0}]");
  EXPECT_EQ(R("{{ 'abc' | first }}{{ [1, 2] | last }}{{ 'héllo' | length }}{{ 'x' | list }}{{ [1, "
              "1, 2] | unique | list }}"),
            "a25['x'][1, 2]");
  EXPECT_EQ(R("{{ 3.7 | int }}{{ '12' | int }}{{ '1.9' | int }}{{ 'x' | int }}{{ 3 | float }}{{ "
              "2.567 | round(2) }}{{ 2.5 | round }}"),
            "31210"
            "3.02.572.0");
  EXPECT_EQ(R("{{ 'l1\\nl2\\n\\nl3' | indent(2) }}|{{ 'l1\\nl2' | indent(2, true) }}"),
            "l1\n  l2\n\n  l3|  l1\n  l2");
  EXPECT_EQ(R("{{ '  x  ' | trim }}|{{ 'xxyxx' | trim('x') }}|{{ none | trim }}|{{ 'a b' | "
              "wordcount }}|{{ '<&>' | e }}"),
            "x|y|None|2|&lt;&amp;&gt;");
  EXPECT_EQ(R("{{ [1, 2] | join }}{{ [1, none, true] | join('-') }}{{ 'aaa' | replace('a', 'b', 2) "
              "}}{{ [1, 2] | reverse | list }}"),
            "121-None-Truebba[2, 1]");
  EXPECT_EQ(R("{{ 'ab' | center(6) }}|{{ '%s=%s' | format('k', 'v') }}|{{ -3 | abs }}|{{ {'x': 1} "
              "| attr('x') }}"),
            "  ab  |k=v|3|");
}

TEST(JinjaSemantics, Tests) {
  EXPECT_EQ(R("{{ x is none }}{{ y is defined }}{{ d is mapping }}{{ l is sequence }}{{ 'a' is "
              "sequence }}{{ d is iterable }}",
              {{"x", nullptr}, {"d", Json::object()}, {"l", Json::array()}}),
            "TrueFalseTrueTrueTrueTrue");
  EXPECT_EQ(R("{{ 's' is string }}{{ 1 is number }}{{ true is number }}{{ 1.0 is float }}{{ 1 is "
              "integer }}{{ true is integer }}"
              "{{ true is boolean }}{{ none is boolean }}"),
            "TrueTrueTrueTrueTrueFalseTrueFalse");
  EXPECT_EQ(R("{{ 6 is divisibleby 3 }}{{ 2 is even }}{{ none is sameas none }}{{ 2 is eq 2 }}{{ 3 "
              "is gt(2) }}{{ 1 is in [1] }}"
              "{{ 'ab' is lower }}{{ 'upper' is filter }}{{ 'odd' is test }}"),
            "TrueTrueTrueTrueTrueTrueTrueTrueTrue");
  EXPECT_EQ(R("{{ x is not none and x is string }}", {{"x", "s"}}), "True");
}

TEST(JinjaGlobals, NamespaceRangeRaise) {
  EXPECT_EQ(
      R("{% set ns = namespace(a=[], b='x') %}{% set ns.b = ns.b ~ 'y' %}{{ ns.b }}{{ ns.a }}"),
      "xy[]");
  EXPECT_EQ(R("{% set ns = namespace({'k': 1}) %}{{ ns.k }}"), "1");
  EXPECT_EQ(R("{{ dict(a=1) }}"), "{'a': 1}");
  std::string err = R("{{ raise_exception('Conversation roles must alternate') }}");
  EXPECT_TRUE(IsErr(err, "Conversation roles must alternate")) << err;
  EXPECT_TRUE(IsErr(R("{% set x = 1 %}{% set x.y = 2 %}"), "namespace"));
  EXPECT_TRUE(IsErr(R("{{ range(1000000) | length }}"), "range too big"));
  EXPECT_FALSE(IsErr(R("{{ strftime_now('%Y') }}")));
}

TEST(JinjaDialect, HuggingFacePrinting) {
  Json ctx = {{"x", nullptr},
              {"f", 1.0},
              {"g", 1.5e-7},
              {"l", {1, "a", nullptr, true}},
              {"d", {{"k", "v"}}}};
  EXPECT_EQ(Hf("{{ x }}|{{ true }}|{{ f }}|{{ g }}|{{ 2.0 }}|{{ 1e21 }}|{{ l }}|{{ d }}", ctx),
            R"(|true|1|1.5e-7|2.0|1e+21|[1, "a", null, true]|{"k": "v"})");
  EXPECT_EQ(R("{{ f }}|{{ g }}", ctx), "1.0|1.5e-07");
  EXPECT_EQ(Hf("{{ [1.0, 2.5] | tojson }}"), "[1, 2.5]");
  // JavaScript's trim strips U+FEFF but not U+001C/U+0085; Python's strip is the reverse.
  EXPECT_EQ(Hf("[{{ s | trim }}]", {{"s",
                                     "\xef\xbb\xbf"
                                     "a\x1c"}}),
            "[a\x1c]");
  EXPECT_EQ(R("[{{ s | trim }}]", {{"s",
                                    "\xef\xbb\xbf"
                                    "a\x1c"}}),
            "[\xef\xbb\xbf"
            "a]");
  // Python's undefined is an (empty) sequence; @huggingface/jinja's is not.
  EXPECT_EQ(R("{{ u is sequence }}{{ {} is iterable }}"), "TrueTrue");
  EXPECT_EQ(Hf("{{ u is sequence }}{{ {} is iterable }}"), "falsefalse");
}

TEST(JinjaText, FloatFormatting) {
  EXPECT_EQ(PythonFloatRepr(1.0), "1.0");
  EXPECT_EQ(PythonFloatRepr(0.1), "0.1");
  EXPECT_EQ(PythonFloatRepr(1e16), "1e+16");
  EXPECT_EQ(PythonFloatRepr(1234567890123456.0), "1234567890123456.0");
  EXPECT_EQ(PythonFloatRepr(0.0001), "0.0001");
  EXPECT_EQ(PythonFloatRepr(0.00001), "1e-05");
  EXPECT_EQ(PythonFloatRepr(-2.5e-300), "-2.5e-300");
  EXPECT_EQ(JsNumberToString(1e21), "1e+21");
  EXPECT_EQ(JsNumberToString(1e20), "100000000000000000000");
  EXPECT_EQ(JsNumberToString(0.000001), "0.000001");
  EXPECT_EQ(JsNumberToString(1e-7), "1e-7");
  EXPECT_EQ(JsNumberToString(-1.25), "-1.25");
}

// Templates come from model directories: every failure is a Status, never a crash or hang.
TEST(JinjaHostile, SyntaxErrorsAreCleanWithLines) {
  EXPECT_TRUE(IsErr(R("{% if x %}never closed"), "expected 'elif' or 'else' or 'endif'"));
  EXPECT_TRUE(IsErr(R("a\nb {{ x "), "line 2: unterminated '{{' tag"));
  EXPECT_TRUE(IsErr(R("{% for x in y %}"), "endfor"));
  EXPECT_TRUE(IsErr(R("{# open comment"), "unterminated comment"));
  EXPECT_TRUE(IsErr(R("{{ 'open string }}"), "unterminated string"));
  EXPECT_TRUE(IsErr(R("\n\n{{ x | no_such_filter }}"), "line 3: no filter named 'no_such_filter'"));
  EXPECT_TRUE(IsErr(R("{{ x is no_such_test }}"), "no test named"));
  EXPECT_TRUE(IsErr(R("{% frobnicate %}"), "unknown tag 'frobnicate'"));
  EXPECT_TRUE(IsErr(R("{% include 'other.jinja' %}"), "not supported"));
  EXPECT_TRUE(IsErr(R("{% break %}"), "outside of a loop"));
  EXPECT_TRUE(IsErr(R("{{ (1, 2 }}")));
  EXPECT_TRUE(IsErr(R("{{ ] }}")));
  EXPECT_TRUE(IsErr(R("{{ 1 +* 2 }}")));
  EXPECT_TRUE(IsErr(R("{{ 99999999999999999999 }}"), "too large"));
  EXPECT_TRUE(IsErr(R("{% endif %}")));
  EXPECT_TRUE(IsErr(R("{{ }}")));
  EXPECT_TRUE(IsErr(R("{% macro m(a=1, b) %}{% endmacro %}"), "non-default argument"));
}

TEST(JinjaHostile, RuntimeErrorsCarryLines) {
  std::string e = R("ok\n{{ 1 / 0 }}");
  EXPECT_TRUE(IsErr(e, "line 2: division by zero")) << e;
  EXPECT_TRUE(IsErr(R("{{ 'a' + 1 }}"), "unsupported operand"));
  EXPECT_TRUE(IsErr(R("{{ 1 < 'a' }}"), "not supported between"));
  EXPECT_TRUE(IsErr(R("{{ x | dictsort }}", {{"x", {1, 2}}}), "dictsort"));
  EXPECT_TRUE(IsErr(R("{% for i in 5 %}{% endfor %}"), "not iterable"));
  EXPECT_TRUE(IsErr(R("{{ 9223372036854775807 + 1 }}"), "overflow"));
  EXPECT_TRUE(IsErr(R("{{ 'x'.nope() }}"), "no attribute 'nope'"));
}

TEST(JinjaHostile, DeepNestingIsRejected) {
  std::string deep_expr = "{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}";
  EXPECT_TRUE(IsErr(R(deep_expr), "nested too deeply"));
  std::string deep_if;
  for (int i = 0; i < 2000; ++i) deep_if += "{% if true %}";
  EXPECT_TRUE(IsErr(R(deep_if), "nested too deeply"));
  std::string deep_not = "{{ " + std::string(0, ' ');
  for (int i = 0; i < 5000; ++i) deep_not += "not ";
  EXPECT_TRUE(IsErr(R(deep_not + "x }}"), "nested too deeply"));
  std::string deep_neg = "{{ " + std::string(5000, '-') + "1 }}";
  EXPECT_TRUE(IsErr(R(deep_neg), "nested too deeply"));
  Json nested = 1;
  for (int i = 0; i < 1000; ++i) nested = Json::array({nested});
  EXPECT_TRUE(IsErr(R("{{ x }}", {{"x", nested}}), "nested too deeply"));
}

TEST(JinjaHostile, LongChainsAndDeepEvaluationAreBounded) {
  std::string sum = "{{ 1";
  for (int i = 0; i < 5000; ++i) sum += " + 1";
  EXPECT_TRUE(IsErr(R(sum + " }}"), "nested too deeply"));
  std::string filters = "{{ 'x'";
  for (int i = 0; i < 2000; ++i) filters += " | trim";
  EXPECT_TRUE(IsErr(R(filters + " }}"), "nested too deeply"));
  std::string attrs = "{{ d";
  for (int i = 0; i < 2000; ++i) attrs += ".a";
  EXPECT_TRUE(IsErr(R(attrs + " }}"), "nested too deeply"));
  // Moderate nesting per macro, multiplied by recursion: bounded by max_nesting, so the C++
  // stack stays small whatever the template does.
  std::string body;
  for (int i = 0; i < 100; ++i) body += "{% if true %}";
  body += "{{ f(n - 1) if n > 0 }}";
  for (int i = 0; i < 100; ++i) body += "{% endif %}";
  EXPECT_TRUE(
      IsErr(R("{% macro f(n) %}" + body + "{% endmacro %}{{ f(60) }}"), "nested deeper than"));
}

TEST(JinjaHostile, DeeplyNestedValuesAreReleasedIteratively) {
  // 50k levels would overflow the stack if destroyed recursively.
  EXPECT_EQ(R("{% set ns = namespace(l=[]) %}{% for i in range(50000) %}{% set ns.l = [ns.l] %}{% "
              "endfor %}"
              "{{ ns.l | length }}{% set ns.l = none %}"),
            "1");
  EXPECT_EQ(R("{% set ns = namespace(head=none) %}{% for i in range(50000) %}{% set n = "
              "namespace(next=ns.head) %}"
              "{% set ns.head = n %}{% endfor %}{% set ns.head = none %}done"),
            "done");
  std::string printed = R(
      "{% set ns = namespace(l=[]) %}{% for i in range(1000) %}{% set ns.l = [ns.l] %}{% endfor %}"
      "{{ ns.l }}");
  EXPECT_NE(printed.find("[...]"), std::string::npos);
  EXPECT_TRUE(IsErr(R("{% set ns = namespace(l=[]) %}{% for i in range(1000) %}{% set ns.l = "
                      "[ns.l] %}{% endfor %}"
                      "{{ ns.l < ns.l }}"),
                    "too deeply"));
}

TEST(JinjaHostile, RunawayRecursionAndLoopsAreBounded) {
  EXPECT_TRUE(IsErr(R("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}"), "nested deeper than"));
  EXPECT_TRUE(IsErr(
      R("{% macro a() %}{{ b() }}{% endmacro %}{% macro b() %}{{ a() }}{% endmacro %}{{ a() }}"),
      "nested deeper than"));
  RenderOptions small;
  small.max_steps = 100000;
  EXPECT_TRUE(
      IsErr(R("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
              {}, Dialect::kPython, small),
            "steps"));
  RenderOptions tiny;
  tiny.max_output_bytes = 1000;
  EXPECT_TRUE(
      IsErr(R("{% for i in range(10000) %}xxxxxxxxxx{% endfor %}", {}, Dialect::kPython, tiny),
            "exceeds"));
  EXPECT_TRUE(IsErr(R("{% set ns = namespace(s='ab') %}{% for i in range(40) %}{% set ns.s = ns.s "
                      "+ ns.s %}{% endfor %}",
                      {}, Dialect::kPython, tiny),
                    "exceeds"));
  EXPECT_TRUE(IsErr(R("{{ 'x' * 100000000000 }}"), "exceeds"));
  // A namespace that contains itself prints and is freed without looping.
  EXPECT_FALSE(IsErr(R("{% set ns = namespace() %}{% set ns.me = ns %}{{ ns }}")));
}

TEST(JinjaHostile, GarbageInputNeverCrashes) {
  // Deterministic fuzz: mutations of a real template must parse or fail, never crash.
  std::string base =
      "{%- macro f(x, k=True) -%}{%- if x is mapping -%}{{ '{' }}{%- for a, b in x | dictsort "
      "-%}{{ a }}:{{ f(b) }}"
      "{%- if not loop.last %},{% endif -%}{%- endfor -%}}{%- elif x is string -%}<{{ x }}>{%- "
      "else -%}{{ x }}{%- endif -%}"
      "{%- endmacro -%}{% for m in messages %}{{ m.role | upper }}: {{ f(m) }}\n{% endfor %}";
  const char pieces[] = "{}%#-+()[]|.,:'\"~ \nifendforsetmacro";
  uint32_t seed = 12345;
  auto next = [&] {
    seed = seed * 1664525u + 1013904223u;
    return seed >> 8;
  };
  Json ctx = {
      {"messages",
       {{{"role", "user"}, {"content", "hi"}}, {{"role", "assistant"}, {"content", {{"a", 1}}}}}}};
  int parsed = 0;
  for (int i = 0; i < 3000; ++i) {
    std::string t = base;
    int edits = 1 + next() % 4;
    for (int e = 0; e < edits; ++e) {
      size_t pos = next() % t.size();
      switch (next() % 3) {
        case 0:
          t.erase(pos, 1 + next() % 3);
          break;
        case 1:
          t.insert(pos, 1, pieces[next() % (sizeof(pieces) - 1)]);
          break;
        default:
          t[pos] = pieces[next() % (sizeof(pieces) - 1)];
      }
    }
    auto tpl = Template::Parse(t);
    if (!tpl.ok()) continue;
    ++parsed;
    RenderOptions o;
    o.max_steps = 200000;
    (void)tpl->Render(ctx, o);
  }
  EXPECT_GT(parsed, 100);
}

}  // namespace
}  // namespace rw::jinja
