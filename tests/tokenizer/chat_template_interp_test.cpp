// The chat-template interpreter on its own, with expectations written out (no python needed):
// whitespace control, loops, scoping, slicing, filters, Python printing, undefined values,
// errors with template line numbers, raise_exception, and limits.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>
#include <vector>
#include <nlohmann/json.hpp>

#include "tokenizer/chat_template.h"
#include "util/check.h"

namespace nanovllm {
namespace {

using ojson = nlohmann::ordered_json;

// Renders `source` with the variables of the JSON object `vars`.
std::string render(const std::string& source, const std::string& vars = "{}") {
  return ChatTemplate(source).render(ojson::array(), nullptr, false, ojson::parse(vars));
}

// The message of the Error that parsing or rendering `source` throws ("" when none).
std::string error_of(const std::string& source, const std::string& vars = "{}") {
  try {
    render(source, vars);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(ChatTemplateInterp, TrimAndLstripBlocks) {
  EXPECT_EQ(render("{% if true %}\nA\n{% endif %}\nB"), "A\nB");
  EXPECT_EQ(render("  {% if true %}\n  x\n  {% endif %}\n"), "  x\n");
  EXPECT_EQ(render("a {% if true %}b{% endif %}"), "a b");           // not at line start: kept
  EXPECT_EQ(render("  {{ 'v' }}  \n"), "  v  ");                     // variables are never lstripped
  EXPECT_EQ(render("x\n  {# note #}\ny"), "x\ny");                    // comments are blocks too
  EXPECT_EQ(render("a\n"), "a");                                      // one trailing newline dropped
  EXPECT_EQ(render("a\r\n{% if true %}\r\nb\r\n{% endif %}\r\n"), "a\nb\n");
}

TEST(ChatTemplateInterp, WhitespaceControlSigns) {
  EXPECT_EQ(render("a  \n  {%- if true -%}  \n b \n {%- endif -%}\n  c"), "abc");
  EXPECT_EQ(render("x  {{- 'y' -}}  z"), "xyz");
  EXPECT_EQ(render("  {%+ if true %}A{% endif %}"), "  A");        // + keeps the indentation
  EXPECT_EQ(render("{% if true +%}\nA{% endif %}"), "\nA");         // + keeps the newline
  EXPECT_EQ(render("{% raw %}{{ x }}{% endraw %}"), "{{ x }}");
}

TEST(ChatTemplateInterp, Loops) {
  EXPECT_EQ(render("{% for x in xs %}{{ loop.index }}{{ loop.first }}{{ loop.last }}{{ loop.revindex0 }} {% endfor %}",
                   R"({"xs": ["a", "b"]})"),
            "1TrueFalse1 2FalseTrue0 ");
  EXPECT_EQ(render("{% for x in [] %}x{% else %}empty{% endfor %}"), "empty");
  EXPECT_EQ(render("{% for x in range(9) if x is odd %}{{ x }}/{{ loop.length }} {% endfor %}"), "1/4 3/4 5/4 7/4 ");
  EXPECT_EQ(render("{% for x in range(9) %}{% if x == 1 %}{% continue %}{% endif %}{% if x == 4 %}{% break %}{% endif %}"
                   "{{ x }}{% endfor %}"),
            "023");
  EXPECT_EQ(render("{% for k, v in d.items() %}{{ k }}={{ v }} {% endfor %}", R"({"d": {"z": 1, "a": 2}})"), "z=1 a=2 ");
  EXPECT_EQ(render("{% for x in xs %}{{ loop.previtem }}<{{ x }}>{{ loop.nextitem }} {% endfor %}", R"({"xs": [1, 2, 3]})"),
            "<1>2 1<2>3 2<3> ");
}

TEST(ChatTemplateInterp, Scoping) {
  // A set inside a loop is local to the iteration; a namespace carries state out.
  EXPECT_EQ(render("{% set x = 1 %}{% for i in range(2) %}{% set x = x + 1 %}{{ x }}{% endfor %}{{ x }}"), "221");
  EXPECT_EQ(render("{% set ns = namespace(n=0) %}{% for i in range(4) %}{% set ns.n = ns.n + i %}{% endfor %}{{ ns.n }}"), "6");
  EXPECT_EQ(render("{% if true %}{% set y = 5 %}{% endif %}{{ y }}"), "5");  // if does not scope
  EXPECT_EQ(render("{% macro m(a, b='B') %}{{ a }}{{ b }}{{ top }}{% endmacro %}{% set top = 'T' %}{{ m(1) }}{{ m(2, b=3) }}"),
            "1BT23T");
}

TEST(ChatTemplateInterp, Slicing) {
  const char* vars = R"({"s": "héllo", "xs": [0, 1, 2, 3, 4]})";
  EXPECT_EQ(render("{{ s[::-1] }} {{ s[1:3] }} {{ s[-2:] }} {{ s[1] }} {{ s|length }}", vars), "olléh él lo é 5");
  EXPECT_EQ(render("{{ xs[::-1] }} {{ xs[4:0:-2] }} {{ xs[-2] }} [{{ xs[9] }}] {{ xs[:-3] }}", vars),
            "[4, 3, 2, 1, 0] [4, 2] 3 [] [0, 1]");
}

TEST(ChatTemplateInterp, Filters) {
  EXPECT_EQ(render("{{ d|tojson }}", R"({"d": {"b": "é\n", "a": [1, 2.5, null, true]}})"),
            R"({"b": "é\n", "a": [1, 2.5, null, true]})");
  EXPECT_EQ(render("{{ d|tojson(indent=2) }}", R"({"d": {"a": [1], "e": {}}})"), "{\n  \"a\": [\n    1\n  ],\n  \"e\": {}\n}");
  EXPECT_EQ(render("{{ xs|join(', ') }}|{{ xs|first }}|{{ xs|last }}|{{ xs|length }}|{{ ' x '|trim }}|{{ 'Ab'|upper }}",
                   R"({"xs": ["a", "b"]})"),
            "a, b|a|b|2|x|AB");
  EXPECT_EQ(render("{{ nope|default('d') }} {{ ''|default('d', true) }} {{ 'x'|string }} {{ '7'|int + 1 }} {{ 2|float }}"),
            "d d x 8 2.0");
  EXPECT_EQ(render("{{ us|selectattr('ok')|map(attribute='n')|list }} {{ d|dictsort }}",
                   R"({"us": [{"n": "a", "ok": true}, {"n": "b", "ok": false}], "d": {"b": 1, "a": 2}})"),
            "['a'] [('a', 2), ('b', 1)]");
  EXPECT_EQ(render("{{ -3|abs }} {{ 2.5|round }} {{ 2.567|round(2) }} {{ 'a-b'|replace('-', '+') }}"), "3 2.0 2.57 a+b");
}

TEST(ChatTemplateInterp, StringMethods) {
  EXPECT_EQ(render("{{ s.split('</think>')[-1].lstrip('\\n') }}|{{ s.startswith('<think>') }}|{{ ' a b '.split() }}|"
                   "{{ 'a,b,c'.split(',', 1) }}|{{ 'xxhixx'.strip('x') }}",
                   R"({"s": "<think>r</think>\n\nanswer"})"),
            "answer|True|['a', 'b']|['a', 'b,c']|hi");
}

TEST(ChatTemplateInterp, PythonPrinting) {
  EXPECT_EQ(render("{{ true }} {{ none }} {{ 1.0 }} {{ 1e20 }} {{ 0.1 + 0.2 }} {{ 7 / 2 }} {{ 7 // 2 }} {{ -7 % 3 }}"),
            "True None 1.0 1e+20 0.30000000000000004 3.5 3 2");
  EXPECT_EQ(render("{{ [1, 'a', none] }} {{ {'k': 'it\\'s'} }} {{ (1,) }}"), "[1, 'a', None] {'k': \"it's\"} (1,)");
}

TEST(ChatTemplateInterp, UndefinedValues) {
  EXPECT_EQ(render("[{{ nope }}] {{ nope is defined }} {{ d.x is defined }} {{ nope|length }} {{ not nope }} {{ n.x is defined }}",
                   R"({"d": {}, "n": null})"),
            "[] False False 0 True False");
  std::string e = error_of("line one\n{{ d.x.y }}", R"({"d": {}})");
  EXPECT_NE(e.find("line 2"), std::string::npos) << e;
  EXPECT_NE(e.find("'dict object' has no attribute 'x'"), std::string::npos) << e;
}

TEST(ChatTemplateInterp, RaiseException) {
  try {
    render("{% if x %}\n{{ raise_exception('bad x: ' ~ x) }}{% endif %}", R"({"x": 3})");
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "bad x: 3");  // the template's own message, unchanged
  }
}

TEST(ChatTemplateInterp, ErrorsNameTheLine) {
  auto expect_line = [](const std::string& source, const char* line, const char* what) {
    std::string e = error_of(source);
    EXPECT_NE(e.find(line), std::string::npos) << source << " -> " << e;
    EXPECT_NE(e.find(what), std::string::npos) << source << " -> " << e;
  };
  // Rejected when constructed, even in branches that never run.
  expect_line("a\nb\n{% include 'x.jinja' %}", "line 3", "unsupported tag 'include'");
  expect_line("\n{% if false %}{{ x|frobnicate }}{% endif %}", "line 2", "unsupported filter 'frobnicate'");
  expect_line("{% for x in xs recursive %}{% endfor %}", "line 1", "recursive");
  expect_line("\n\n\n{% if x %}", "line 4", "unclosed block");
  expect_line("{{ 'open }}", "line 1", "unterminated string");
  expect_line("x\n{% endfor %}", "line 2", "endfor");
  expect_line("{{ a(*b) }}", "line 1", "*args");
  // Runtime errors: the line of the failing statement.
  expect_line("ok\n\n{{ 'a' + 1 }}", "line 3", "unsupported operand");
  expect_line("{% set xs = [1] %}\n{{ xs.append(2) }}", "line 2", "not allowed");
  expect_line("{{ 1 // 0 }}", "line 1", "division");
  EXPECT_THROW(ChatTemplate("{% if %}"), Error);
}

TEST(ChatTemplateInterp, Limits) {
  std::string e = error_of("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}");
  EXPECT_NE(e.find("recursion"), std::string::npos) << e;
  const std::string deep_expr = "{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}";
  EXPECT_NE(error_of(deep_expr).find("nested"), std::string::npos);
  std::string deep_blocks;
  for (int i = 0; i < 300; ++i) deep_blocks += "{% if true %}";
  EXPECT_NE(error_of(deep_blocks).find("nested"), std::string::npos);
  EXPECT_NE(error_of("{{ range(1000000)|length }}").find("range"), std::string::npos);
  EXPECT_NE(error_of("{{ 2 ** 70 }}").find("overflow"), std::string::npos);
}

TEST(ChatTemplateInterp, KeyOrderFollowsTheInput) {
  ChatTemplate t("{{ tools|tojson }}");
  ojson tools = ojson::parse(R"([{"name": "f", "description": "d", "a": 1}])");
  EXPECT_EQ(t.render(ojson::array(), tools, false, nullptr), R"([{"name": "f", "description": "d", "a": 1}])");
  nlohmann::json sorted = nlohmann::json::parse(R"([{"name": "f", "description": "d"}])");  // std::map: sorted keys
  EXPECT_EQ(t.render(ojson::array(), sorted, false, nullptr), R"([{"description": "d", "name": "f"}])");
}

TEST(ChatTemplateInterp, ConversationVariables) {
  ChatTemplate t("{{ messages|length }} {{ tools }} {{ add_generation_prompt }} {{ bos_token }}{{ eos_token }} {{ flag }}",
                 "<s>", "</s>");
  ojson msgs = ojson::parse(R"([{"role": "user", "content": "hi"}])");
  EXPECT_EQ(t.render(msgs, nullptr, true, {{"flag", false}}), "1 None True <s></s> False");
  ChatTemplate copy = t;  // copies share the parsed template
  EXPECT_EQ(copy.render(msgs, ojson::array(), false, nullptr), "1 [] False <s></s> ");
  EXPECT_THROW(t.render(msgs, nullptr, false, ojson::array()), Error);  // kwargs must be an object
}

TEST(ChatTemplateInterp, LongConversationIsFast) {
  ChatTemplate t(
      "{% for m in messages %}{{ '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' }}{% endfor %}"
      "{% set ns = namespace(i=0) %}{% for m in messages[::-1] %}{% set ns.i = ns.i + 1 %}{% endfor %}{{ ns.i }}");
  ojson msgs = ojson::array();
  for (int i = 0; i < 5000; ++i) msgs.push_back({{"role", i % 2 ? "assistant" : "user"}, {"content", std::string(200, 'x')}});
  auto start = std::chrono::steady_clock::now();
  std::string out = t.render(msgs, nullptr, false, nullptr);
  double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(out.substr(out.size() - 4), "5000");
  EXPECT_LT(ms, 2000.0) << "rendering 5000 messages took " << ms << " ms";
}

TEST(ChatTemplateInterp, ConcurrentRendersShareOneTemplate) {
  const ChatTemplate t("{% set ns = namespace(s='') %}{% for m in messages %}{% set ns.s = ns.s ~ m.content %}{% endfor %}"
                       "{{ ns.s }}{{ extra }}");
  std::vector<std::thread> threads;
  std::vector<int> ok(8, 0);
  for (int k = 0; k < 8; ++k) {
    threads.emplace_back([&, k] {
      ojson msgs = ojson::array();
      for (int i = 0; i < 50; ++i) msgs.push_back({{"role", "user"}, {"content", std::to_string(k)}});
      std::string want = std::string(50, static_cast<char>('0' + k)) + "!";
      for (int r = 0; r < 50; ++r) ok[k] += t.render(msgs, nullptr, false, {{"extra", "!"}}) == want;
    });
  }
  for (auto& th : threads) th.join();
  for (int k = 0; k < 8; ++k) EXPECT_EQ(ok[k], 50) << "thread " << k;
}

}  // namespace
}  // namespace nanovllm
