#!/usr/bin/env python3
"""Generates tests/golden/data/chat_templates.json: real chat templates rendered over many conversations by
Hugging Face transformers' own render_jinja_template (the code behind apply_chat_template: jinja2's
ImmutableSandboxedEnvironment with trim_blocks, lstrip_blocks, loopcontrols, the generation tag, HF's
json.dumps-based tojson, raise_exception, strftime_now, dict and namespace; messages' None keys dropped and
reasoning aliased as HF does). The output is committed and read by tests/unit/chat_template_test.cc.

Usage: scripts/gen_chat_template_goldens.py [TEMPLATE_DIR ...]
Templates come from $KILN_TESTDATA/chat-templates (else ../shared/testdata/chat-templates beside the repository)
and from every TEMPLATE_DIR given, e.g. llama.cpp's models/templates as vendored in PyPI's llama-cpp-python sdist:
  pip download --no-deps --no-binary :all: llama-cpp-python==0.3.36 -d /tmp/lcpp
  tar xzf /tmp/lcpp/llama_cpp_python-0.3.36.tar.gz -C /tmp/lcpp
  scripts/gen_chat_template_goldens.py /tmp/lcpp/llama_cpp_python-0.3.36/vendor/llama.cpp/models/templates
The template texts are stored in the golden (CI has only the testdata ones). strftime_now is pinned to NOW so
the goldens do not depend on the day they were made. Needs transformers==5.25.0 (pip install, for golden
generation only: not in scripts/requirements.txt) and jinja2==3.1.6.
"""
import datetime as dt
import glob
import json
import os
import sys

import transformers.utils.chat_template_utils as ctu
from jinja2.exceptions import TemplateError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TESTDATA = os.environ.get("KILN_TESTDATA") or os.path.join(os.path.dirname(ROOT), "shared", "testdata")
NOW = dt.datetime(2026, 12, 4, 9, 30, 15)  # the C++ test pins its clock to the same instant


class FixedDatetime(dt.datetime):
    @classmethod
    def now(cls, tz=None):
        return NOW


ctu.datetime = FixedDatetime

SMOLLM2 = ("{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\\n"
           "You are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\\n' }}{% endif %}"
           "{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}"
           "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")

TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "The current weather in a city.",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string", "description": "City name, e.g. Paris"},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}, "required": ["city"]}}},
    {"type": "function", "function": {
        "name": "search", "description": "Searches the web.",
        "parameters": {"type": "object", "properties": {
            "query": {"type": "string"}, "limit": {"type": "integer", "minimum": 1}}, "required": ["query"]}}},
]


def call(cid, name, args):
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": args}}


# Each conversation: messages (as an OpenAI-style request carries them, with tool-call arguments parsed into
# objects as vLLM and HF expect, and null contents left out as HF drops them) and optional tools.
CONVERSATIONS = {
    "system_user": {"messages": [{"role": "system", "content": "You are terse."},
                                 {"role": "user", "content": "Hi there!"}]},
    "user_only": {"messages": [{"role": "user", "content": "  What is 2+2?\n"}]},
    "multi_turn": {"messages": [{"role": "user", "content": "Hello"},
                                {"role": "assistant", "content": "Hi! How can I help?"},
                                {"role": "user", "content": "Tell me a joke about \"quotes\" & ünïcode — 日本."}]},
    "tools": {"tools": TOOLS, "messages": [{"role": "system", "content": "Use tools when they help."},
                                           {"role": "user", "content": "Weather in Paris?"}]},
    "tool_round": {"tools": TOOLS, "messages": [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "tool_calls": [call("call_1", "get_weather", {"city": "Paris", "unit": "celsius"})]},
        {"role": "tool", "tool_call_id": "call_1", "name": "get_weather", "content": "{\"temp\": 18, \"sky\": \"clear\"}"}]},
    "parallel_calls": {"tools": TOOLS, "messages": [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather in Paris and news about it?"},
        {"role": "assistant", "content": "Checking both.", "tool_calls": [
            call("call_a", "get_weather", {"city": "Paris"}), call("call_b", "search", {"query": "Paris", "limit": 3})]},
        {"role": "tool", "tool_call_id": "call_a", "name": "get_weather", "content": "18 C"},
        {"role": "tool", "tool_call_id": "call_b", "name": "search", "content": "Nothing new."},
        {"role": "assistant", "content": "18 C and quiet."},
        {"role": "user", "content": "Thanks"}]},
    "reasoning": {"messages": [
        {"role": "user", "content": "What is 3*7?"},
        {"role": "assistant", "content": "21", "reasoning_content": "3 times 7 is 21."},
        {"role": "user", "content": "And 3*8?"}]},
    "content_parts": {"messages": [
        {"role": "system", "content": [{"type": "text", "text": "Answer in French."}]},
        {"role": "user", "content": [{"type": "text", "text": "Describe Paris"}, {"type": "text", "text": " in one line."}]}]},
}

EXTRA_VARS = {"bos_token": "<BOS>", "eos_token": "<EOS>"}


# Small templates that exercise one construct each (rendered with SNIPPET_VARS): the engine's parity with jinja2
# beyond what the real templates above happen to use. An "error" golden means jinja2 raised.
SNIPPET_VARS = {"msgs": CONVERSATIONS["parallel_calls"]["messages"], "tools": TOOLS, "n": 7, "f": 2.5,
                "s": "  Héllo, Wörld — 日本語!  ", "d": {"b": 2, "a": 1, "C": 3}, "nums": [3, 1, 2], "none_v": None,
                "words": ["pear", "Apple", "banana", "apple"], "big": 12345678901234567, "tiny": 0.00001}
SNIPPETS = [
    # macros, call blocks, set blocks, namespaces, with, filter blocks, raw
    "{% macro m(a, b='B', c=none) %}[{{ a }}|{{ b }}|{{ c }}]{% endmacro %}{{ m(1) }}{{ m(1, 2) }}{{ m(a=3, c=4) }}",
    "{% macro outer(x) %}<{{ caller(x * 2) }}>{% endmacro %}{% call(v) outer(21) %}got {{ v }}{% endcall %}",
    "{% macro r(k) %}{% if k > 0 %}{{ k }},{{ r(k - 1) }}{% endif %}{% endmacro %}{{ r(4) }}",
    "{% macro v() %}{{ varargs }}{{ kwargs }}{% endmacro %}{{ v(1, 2, x=3) }}",
    "{% set y = 5 %}{% macro see() %}{{ y }}{{ z }}{% endmacro %}{% set z = 7 %}{{ see() }}",
    "{% set block %}  a\n  b {{ n }}{% endset %}[{{ block }}]{% set t | upper | trim %} x{{ n }} {% endset %}[{{ t }}]",
    "{% set ns = namespace(a=1, l=[]) %}{% for x in nums %}{% set ns.a = ns.a * x %}{% set ns.l = ns.l + [x] %}{% endfor %}{{ ns.a }}{{ ns.l }}",
    "{% with a = 1, b = n %}{{ a + b }}{% endwith %}{{ a is defined }}",
    "{% filter upper %}shout {{ n }}{% endfilter %}",
    "{% raw %}{{ not rendered }} {% if %}{% endraw %}|",
    "{% set a, b = [1, 2] %}{{ b }}{{ a }}{% set c = 1, 2 %}{{ c }}",
    # loops
    "{% for m in msgs %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first|int }}{{ loop.last|int }}{{ loop.length }} {% endfor %}",
    "{% for x in nums %}{{ loop.previtem }}-{{ loop.nextitem }}:{{ loop.cycle('a', 'b') }} {% endfor %}",
    "{% for x in [1, 1, 2, 2, 3] %}{% if loop.changed(x) %}{{ x }}{% endif %}{% endfor %}",
    "{% for x in nums if x > 1 %}{{ x }}{{ loop.last }}{% else %}none{% endfor %}",
    "{% for x in [] %}x{% else %}empty{% endfor %}{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}",
    "{% for x in nums %}{% if x == 1 %}{% continue %}{% endif %}{% if x == 2 %}{% break %}{% endif %}{{ x }}{% endfor %}",
    "{% for x in [[1, [2]], [3, []]] recursive %}({{ x[0] }}{% if x[1] %}{{ loop(x[1]) }}{% endif %}){% endfor %}",
    "{% for x in nums %}{% set last = x %}{% endfor %}{{ last is defined }}",
    "{% for c in 'héllo' %}{{ c }}.{% endfor %}{% for k in d %}{{ k }}{% endfor %}",
    "{% for i in range(3) %}{{ i }}{% endfor %}{% for i in range(1, 10, 3) %}{{ i }}{% endfor %}{% for i in range(5, 0, -2) %}{{ i }}{% endfor %}",
    # filters
    "{{ tools | tojson }}", "{{ tools[0] | tojson(indent=2) }}", "{{ d | tojson(sort_keys=true) }}",
    "{{ d | tojson(separators=(',', ':')) }}", "{{ s | tojson }}{{ s | tojson(ensure_ascii=true) }}",
    "{{ [1.0, 2.5, 1e20, tiny, big, none_v, true] | tojson }}",
    "[{{ s | trim }}][{{ s.strip() }}][{{ s.lstrip() }}][{{ s.rstrip(' !') }}][{{ 'xxaxx'.strip('x') }}]",
    "{{ words | join(', ') }}|{{ msgs | map(attribute='role') | join('/') }}|{{ nums | join }}",
    "{{ msgs | selectattr('role', 'equalto', 'tool') | list | length }}{{ msgs | rejectattr('content') | list | length }}",
    "{{ msgs | selectattr('tool_calls', 'defined') | map(attribute='tool_calls') | first | length }}",
    "{{ nums | select('odd') | list }}{{ nums | reject('gt', 1) | list }}{{ nums | map('string') | list }}",
    "{{ msgs | map(attribute='name', default='-') | list }}",
    "{{ d | items | list }}{{ d | dictsort }}{{ d | dictsort(by='value', reverse=true) }}{{ d | dictsort(case_sensitive=true) }}",
    "{{ s | length }}{{ s | count }}{{ d | length }}{{ nums | length }}{{ none_v | default('dflt') }}{{ undefined_v | default('u') }}{{ '' | default('e', true) }}",
    "{{ words | first }}{{ words | last }}{{ s | first }}{{ s | last }}{{ words | unique | list }}{{ words | unique(case_sensitive=true) | list }}",
    "{{ words | sort }}{{ words | sort(reverse=true) }}{{ words | sort(case_sensitive=true) }}{{ msgs | sort(attribute='role') | map(attribute='role') | list }}",
    "{{ words | min }}{{ words | max }}{{ nums | sum }}{{ msgs | map(attribute='role') | unique | list | length }}",
    "{{ s | replace('l', 'L') }}{{ s | replace('l', 'L', 1) }}{{ 'abc' | replace('', '-') }}",
    "{{ 'a\nb\n\nc' | indent }}|{{ 'a\nb' | indent(2, true) }}|{{ 'a\n\nb' | indent('>', blank=true) }}|{{ 'a\nb\n' | indent(first=true) }}",
    "{{ s | upper }}{{ s | lower }}{{ 'hello world-foo (bar' | title }}{{ 'hELLO' | capitalize }}{{ s | wordcount }}",
    "{{ 'abc' | center(9) }}|{{ 'x' * 3 }}|{{ [1] * 2 }}|{{ 'toolong text here' | truncate(9) }}|{{ 'toolong text here' | truncate(9, true) }}",
    "{{ '42' | int }}{{ '4.7' | int }}{{ 'x' | int(7) }}{{ 3.9 | int }}{{ '2.5' | float }}{{ 'x' | float }}{{ -3 | abs }}{{ 2.675 | round(2) }}{{ 2.5 | round }}{{ 3.14159 | round(2, 'floor') }}",
    "{{ nums | reverse | list }}{{ 'héllo' | reverse }}{{ nums | batch(2) | list }}{{ nums | batch(2, 0) | list }}",
    "{{ '%s-%d-%.2f-%r' | format('a', 3, 2.5, 'q') }}{{ '%s and %s' % ('x', 'y') }}{{ '%05d|%-4s|' % (42, 'ab') }}",
    "{{ '<a href=\"x\">' | e }}{{ '<b>' | safe }}{{ '<i>' | escape | safe }}{{ ('<' | safe) + '>' }}",
    "{{ d | attr('a') }}{{ none_v | string }}{{ [1, 'a'] | string }}{{ d | pprint }}",
    "{{ msgs | map('tojson') | first }}",
    # tests
    "{{ n is odd }}{{ n is even }}{{ n is divisibleby 7 }}{{ n is number }}{{ f is float }}{{ n is integer }}{{ true is boolean }}{{ true is number }}",
    "{{ s is string }}{{ d is mapping }}{{ nums is iterable }}{{ nums is sequence }}{{ d is iterable }}{{ none_v is none }}{{ u is undefined }}{{ u is defined }}",
    "{{ n is eq 7 }}{{ n is ne 7 }}{{ n is gt 3 }}{{ n is lt 3 }}{{ n is ge 7 }}{{ n is le 6 }}{{ 'a' is in 'cat' }}{{ 2 is in nums }}{{ n is sameas 7 }}",
    "{{ 'abc' is lower }}{{ 'ABC' is upper }}{{ none_v is sameas none }}{{ (nums | select('odd')) is iterable }}{{ range is callable }}",
    # methods
    "{{ s.split() }}{{ 'a,b,,c'.split(',') }}{{ 'a,b,c'.split(',', 1) }}{{ 'a,b,c'.rsplit(',', 1) }}{{ 'l1\nl2\r\nl3'.splitlines() }}",
    "{{ s.startswith('  H') }}{{ s.endswith(('x', '!  ')) }}{{ s.find('W') }}{{ s.rfind('l') }}{{ s.count('l') }}{{ s.index('é') }}",
    "{{ 'a-b'.replace('-', '+') }}{{ '{} {}'.format('x', 1) }}{{ '{0}{0}{name}'.format('r', name='n') }}{{ ', '.join(words) }}",
    "{{ 'Hello'.upper() }}{{ 'Hello'.lower() }}{{ 'hello wORLD'.title() }}{{ 'hello'.capitalize() }}{{ '42'.isdigit() }}{{ 'ab'.isalpha() }}{{ '  '.isspace() }}{{ '7'.zfill(3) }}",
    "{{ 'prefix_x'.removeprefix('prefix_') }}{{ 'a=b=c'.partition('=') }}{{ d.get('a') }}{{ d.get('zz') }}{{ d.get('zz', 0) }}{{ d.keys() | list }}{{ d.values() | list }}",
    "{{ nums.index(2) }}{{ nums.count(3) }}{{ d['a'] }}{{ d.a }}{{ msgs[0].role }}{{ msgs[-1]['content'] }}{{ msgs[1:3] | length }}",
    # strings: code points, slicing, escapes
    "{{ s[2] }}{{ s[-4] }}{{ s[2:7] }}{{ s[::-1] }}{{ s[::3] }}{{ s | length }}{{ 'é' < 'z' }}",
    r"""{{ '\u00e9\x41\t|' }}{{ "it's" }}{{ 'say \"hi\"' }}{{ 'a' 'b' }}""",
    # operators, comparisons, literals, undefined
    "{{ 7 // 2 }}{{ -7 // 2 }}{{ -7 % 3 }}{{ 7 / 2 }}{{ 2 ** 10 }}{{ 2 ** -1 }}{{ 1 + 2.5 }}{{ 10 / 4 * 2 }}{{ 'a' ~ 1 ~ none_v }}",
    "{{ 1 < 2 < 3 }}{{ 3 > 2 > 2 }}{{ 1 == 1.0 }}{{ 'a' != 'b' }}{{ [1, 2] == [1, 2] }}{{ {'a': 1} == {'a': 1} }}{{ 2 not in nums }}{{ not 'x' in 'abc' }}",
    r"""{{ (1, 2) }}{{ [1, 'a', none, true, 1.5] }}{{ {'k': 'v', 'n': [1]} }}{{ {'q': "it's"} }}{{ 1e16 }}{{ 1.5e-7 }}{{ 100.0 }}{{ big }}{{ tiny }}""",
    "{{ none_v or 'fallback' }}{{ 0 and 'x' }}{{ 'x' if n > 5 else 'y' }}[{{ 'z' if false }}]{{ u }}{{ u | length }}{{ u is none }}",
    "{{ msgs[0].nope }}[{{ msgs[0]['nope'] | default('d') }}]{{ (msgs | first).role }}{{ none_v.attr }}",
    "{{ n if n is defined }}{{ d.missing is defined }}{{ (d.missing or {}).get('x', 'y') }}",
    "{{ strftime_now('%Y-%m-%d %H:%M %b %B %a %A %d') }}",
    "{{ dict(a=1, b='x') }}{{ dict(d, z=0) | length }}{{ namespace(a=1).a }}",
    "{% if msgs %}{{ msgs | length }}{% elif n %}n{% else %}e{% endif %}",
    "   {% if true %}\n  x\n   {% endif %}\n  {%- if true -%}  y  {%- endif %}  {%+ if true %}z{% endif %}\n{# c #}\nw",
    "{{- '  a  ' -}}   {{ 'b' }}  {%- set q = 1 -%}  c{# x -#}   d",
    # errors (the golden records jinja2's error; kiln must fail too)
    "{{ raise_exception('custom failure') }}",
    "{{ u.attr }}", "{{ u + 1 }}", "{{ 'a' + 1 }}", "{{ [1] + 'a' }}", "{{ nums | map('string') | tojson }}",
    "{{ msgs | selectattr('role') | length }}", "{{ u | tojson }}", "{{ none_v | list }}", "{{ 1 / 0 }}",
    "{{ nums.append(4) }}", "{{ d.update({}) }}", "{{ n() }}", "{{ 'a' < 1 }}", "{% for x in none_v %}{% endfor %}",
    "{{ x | nosuchfilter }}", "{{ x is nosuchtest }}", "{% if %}", "{% endif %}", "{% for x in %}", "{{ 'unterminated }}",
]


def render_snippet(tmpl):
    env_tmpl = ctu._compile_jinja_template(tmpl)
    return env_tmpl.render(**SNIPPET_VARS)


def render(tmpl, conv, agp):
    out, _ = ctu.render_jinja_template(conversations=[conv["messages"]], tools=conv.get("tools"),
                                       chat_template=tmpl, add_generation_prompt=agp, **EXTRA_VARS)
    return out[0]


def load_templates(dirs):
    templates = {"SmolLM2-135M-Instruct": SMOLLM2}
    for d in dirs:
        for path in sorted(glob.glob(os.path.join(d, "*.jinja"))):
            name = os.path.basename(path)[:-len(".jinja")]
            with open(path, encoding="utf-8") as f:
                templates.setdefault(name, f.read())
    return templates


def main():
    templates = load_templates([os.path.join(TESTDATA, "chat-templates")] + sys.argv[1:])
    cases = []
    for name, tmpl in templates.items():
        for conv_name, conv in CONVERSATIONS.items():
            case = {"template": name, "conversation": conv_name}
            # agp=False in full; agp=True as the suffix it appends when it only appends (most templates).
            for agp, key in ((False, "expected"), (True, "expected_gp")):
                try:
                    text = render(tmpl, conv, agp)
                except (TemplateError, TypeError, ValueError, KeyError, IndexError, AttributeError) as e:
                    case[key + "_error"] = f"{type(e).__name__}: {e}"
                    continue
                base = case.get("expected")
                if agp and base is not None and text.startswith(base):
                    case["gp_suffix"] = text[len(base):]
                else:
                    case[key] = text
            cases.append(case)
    snippets = []
    for tmpl in SNIPPETS:
        try:
            snippets.append({"template": tmpl, "expected": render_snippet(tmpl)})
        except Exception as e:  # noqa: BLE001 -- any jinja2 failure is the golden
            snippets.append({"template": tmpl, "error": f"{type(e).__name__}: {e}"})
    out = {"now": NOW.isoformat(), "vars": EXTRA_VARS, "conversations": CONVERSATIONS, "templates": templates,
           "cases": cases, "snippet_vars": SNIPPET_VARS, "snippets": snippets}
    dst = os.path.join(ROOT, "tests", "golden", "data", "chat_templates.json")
    with open(dst, "w", encoding="utf-8") as f:
        json.dump(out, f, indent=0, ensure_ascii=False)
        f.write("\n")
    errors = sum(1 for c in cases if "expected_error" in c or "expected_gp_error" in c)
    print(f"wrote {len(templates)} templates, {len(cases)} cases ({errors} with a reference error) and "
          f"{len(snippets)} snippets to {dst}")


if __name__ == "__main__":
    main()
