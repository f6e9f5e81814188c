// Bounds on chat templates (they come with downloaded models): a template can neither hang the
// engine, nor exhaust its memory, nor overflow its stack. Each bound gives an Error naming it.
#include <gtest/gtest.h>

#include <string>

#include <nlohmann/json.hpp>

#include "tokenizer/chat_template.h"
#include "util/check.h"

namespace nanovllm {
namespace {

using ojson = nlohmann::ordered_json;

// The Error a template gives (parse or render); "" when it renders.
std::string error_of(const std::string& source, const RenderLimits& limits = {}) {
  try {
    ChatTemplate t(source);
    t.set_limits(limits);
    t.render(ojson::array(), nullptr, false, nullptr);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

#define EXPECT_ERROR_HAS(source_error, fragment) \
  EXPECT_NE((source_error).find(fragment), std::string::npos) << (source_error)

TEST(ChatTemplateLimits, StepsStopALongLoop) {
  RenderLimits small;
  small.max_steps = 10000;
  EXPECT_ERROR_HAS(error_of("{% for i in range(100000) %}{{ i }}{% endfor %}", small),
                   "more than 10000 steps (render limit max_steps)");
  // With the defaults too: 10^10 iterations end with the Error after max_steps (5M) steps, not
  // after 10^10 (a hang would run into CTest's timeout; speed is not asserted here).
  EXPECT_ERROR_HAS(error_of("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"),
                   "render limit max_steps");
  // Within the limit: renders.
  EXPECT_EQ(error_of("{% for i in range(100) %}{{ i }}{% endfor %}", small), "");
}

TEST(ChatTemplateLimits, OutputSize) {
  RenderLimits small;
  small.max_output_bytes = 1000;
  EXPECT_ERROR_HAS(error_of("{% for i in range(100) %}{{ 'x' * 20 }}{% endfor %}", small),
                   "longer than 1000 bytes (render limit max_output_bytes)");
  // A string doubled in a loop: refused at 64 MiB, not after 2^40 bytes.
  EXPECT_ERROR_HAS(error_of("{% set ns = namespace(s='x') %}{% for i in range(60) %}{% set ns.s = ns.s ~ ns.s %}"
                            "{% endfor %}{{ ns.s|length }}"),
                   "render limit max_output_bytes");
  // A set block captures output too.
  EXPECT_ERROR_HAS(error_of("{% set x %}{% for i in range(100) %}{{ 'y' * 20 }}{% endfor %}{% endset %}", small),
                   "render limit max_output_bytes");
  EXPECT_ERROR_HAS(error_of("{{ 'x' * 9223372036854775807 }}"), "string repetition too large");
  EXPECT_ERROR_HAS(error_of("{{ 'x'.center(10000000000) }}"), "width 10000000000 is larger");
  EXPECT_ERROR_HAS(error_of("{{ 'x'|indent(10000000000) }}"), "indent: width is larger");
  EXPECT_ERROR_HAS(error_of("{{ [1]|tojson(indent=10000000000) }}"), "tojson: indent");
}

TEST(ChatTemplateLimits, SharedSublistsCannotBlowUpText) {
  // 2^50 leaves in 50 list objects: str() and tojson stop at 64 MiB.
  const std::string doubling = "{% set ns = namespace(l=[1]) %}{% for i in range(50) %}{% set ns.l = [ns.l, ns.l] %}{% endfor %}";
  EXPECT_ERROR_HAS(error_of(doubling + "{{ ns.l }}"), "repr: the text would be longer");
  EXPECT_ERROR_HAS(error_of(doubling + "{{ ns.l|tojson }}"), "tojson: the text would be longer");
}

TEST(ChatTemplateLimits, Depth) {
  // Macro recursion.
  EXPECT_ERROR_HAS(error_of("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}"), "macro recursion deeper than 100");
  // Parser nesting: brackets and blocks.
  EXPECT_ERROR_HAS(error_of("{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}"),
                   "nested deeper than 200 levels");
  std::string ifs;
  for (int i = 0; i < 5000; ++i) ifs += "{% if true %}";
  EXPECT_ERROR_HAS(error_of(ifs), "nested deeper than 200 levels");
  // A chain built in a loop by the parser (one level per link): refused at parse time.
  std::string chain = "{{ 'a'";
  for (int i = 0; i < 100000; ++i) chain += " ~ 'a'";
  EXPECT_ERROR_HAS(error_of(chain + " }}"), "expression nested deeper than 400 levels");
  std::string filters = "{{ 1";
  for (int i = 0; i < 100000; ++i) filters += "|string";
  EXPECT_ERROR_HAS(error_of(filters + " }}"), "expression nested deeper than 400 levels");
  // The render's own nesting bound.
  RenderLimits shallow;
  shallow.max_depth = 10;
  std::string nested;
  for (int i = 0; i < 20; ++i) nested += "{% if true %}";
  nested += "x";
  for (int i = 0; i < 20; ++i) nested += "{% endif %}";
  EXPECT_ERROR_HAS(error_of(nested, shallow), "nests deeper than 10 levels (render limit max_depth)");
  EXPECT_EQ(error_of(nested), "");
}

TEST(ChatTemplateLimits, ValuesNestAtMost256Deep) {
  EXPECT_ERROR_HAS(error_of("{% set ns = namespace(x=[]) %}{% for i in range(100000) %}{% set ns.x = [ns.x] %}"
                            "{% endfor %}"),
                   "value nested deeper than 256 levels");
  EXPECT_ERROR_HAS(error_of("{% set ns = namespace(x={}) %}{% for i in range(100000) %}{% set ns.x = {'k': ns.x} %}"
                            "{% endfor %}"),
                   "value nested deeper than 256 levels");
  // Namespaces chained through their attributes: bounded by the namespace count.
  EXPECT_ERROR_HAS(error_of("{% set h = namespace(cur=namespace()) %}{% for i in range(100000) %}"
                            "{% set n = namespace() %}{% set c = h.cur %}{% set c.x = n %}{% set h.cur = n %}"
                            "{% endfor %}"),
                   "more than 4096 namespaces");
  // Deep JSON input (a tool call's arguments) is refused the same way.
  ojson deep = 1;
  for (int i = 0; i < 300; ++i) deep = ojson::array({deep});
  try {
    ChatTemplate("{{ messages }}").render(ojson::array({deep}), nullptr, false, nullptr);
    ADD_FAILURE() << "300-deep messages accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("value nested deeper than 256 levels"), std::string::npos) << e.what();
  }
}

TEST(ChatTemplateLimits, NamespaceCannotHoldItself) {
  EXPECT_ERROR_HAS(error_of("{% set ns = namespace() %}{% set ns.me = ns %}{{ ns }}"),
                   "a namespace cannot hold itself");
  EXPECT_ERROR_HAS(error_of("{% set ns = namespace() %}{% set ns.l = [1, {'a': ns}] %}"),
                   "a namespace cannot hold itself");
  EXPECT_ERROR_HAS(error_of("{% set a = namespace() %}{% set b = namespace(a=a) %}{% set a.b = b %}"),
                   "a namespace cannot hold itself");
  EXPECT_EQ(error_of("{% set a = namespace() %}{% set b = namespace() %}{% set a.b = b %}{% set a.c = b %}{{ a.b is defined }}"), "");
}

}  // namespace
}  // namespace nanovllm
