#!/usr/bin/env python3
"""Generates tests/golden/data/chat_templates.json: chat templates rendered by Python jinja2 the way HF
transformers' apply_chat_template does (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks,
loopcontrols, json.dumps tojson, raise_exception). Run once; the output is committed and read by
tests/unit/chat_template_test.cc. Usage: scripts/gen_chat_template_goldens.py [TEMPLATE_DIR]
TEMPLATE_DIR defaults to $KILN_TESTDATA/chat-templates, else ../shared/testdata/chat-templates beside
the repository (where the tests read it). jinja2 is pinned in scripts/requirements.txt."""
import json
import os
import sys

from jinja2.exceptions import TemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TESTDATA = os.environ.get("KILN_TESTDATA") or os.path.join(os.path.dirname(ROOT), "shared", "testdata")
TDIR = sys.argv[1] if len(sys.argv) > 1 else os.path.join(TESTDATA, "chat-templates")

SMOLLM2 = ("{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\\n"
           "You are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\\n' }}{% endif %}"
           "{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}"
           "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")

TEMPLATES = ["Qwen-Qwen2.5-7B-Instruct", "microsoft-Phi-3.5-mini-instruct", "google-gemma-2-2b-it",
             "mistralai-Mistral-Nemo-Instruct-2407", "meta-llama-Llama-3.2-3B-Instruct",
             "meta-llama-Llama-3.1-8B-Instruct", "Qwen-Qwen3-0.6B", "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B",
             "HuggingFaceTB-SmolLM3-3B", "NousResearch-Hermes-3-Llama-3.1-8B-tool_use"]

CONVERSATIONS = {
    "system_user": [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Hi there!"}],
    "user_only": [{"role": "user", "content": "  What is 2+2?\n"}],
    "multi_turn": [{"role": "user", "content": "Hello"}, {"role": "assistant", "content": "Hi! How can I help?"},
                   {"role": "user", "content": "Tell me a joke about \"quotes\" & ünïcode."}],
}


# Variables passed beside messages (render_chat_template's `extra`), as apply_chat_template passes
# tools, documents or date_string: rendered for the templates that read them.
EXTRAS = {
    "date": {"date_string": "04 Dec 2026"},
    "tools": {"tools": [{"type": "function", "function": {
        "name": "get_weather", "description": "The weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "City name"}},
                       "required": ["city"]}}}]},
    "override": {"bos_token": "[B]", "add_generation_prompt": True},
}
EXTRA_TEMPLATES = ["meta-llama-Llama-3.1-8B-Instruct", "meta-llama-Llama-3.2-3B-Instruct", "Qwen-Qwen2.5-7B-Instruct",
                   "Qwen-Qwen3-0.6B", "SmolLM2-135M-Instruct"]


def raise_exception(msg):
    raise TemplateError(msg)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def render(tmpl, messages, agp, extra=None):
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    variables = {"messages": messages, "add_generation_prompt": agp, "bos_token": "<BOS>", "eos_token": "<EOS>"}
    variables.update(extra or {})  # extra adds or overrides, as in render_chat_template
    return env.from_string(tmpl).render(**variables)


def main():
    templates = {"SmolLM2-135M-Instruct": SMOLLM2}
    for name in TEMPLATES:
        path = os.path.join(TDIR, name + ".jinja")
        if os.path.exists(path):
            with open(path, encoding="utf-8") as f:
                templates[name] = f.read()
    cases = []
    for name, tmpl in templates.items():
        for conv_name, conv in CONVERSATIONS.items():
            for agp in (False, True):
                case = {"template": name, "conversation": conv_name, "add_generation_prompt": agp}
                try:
                    case["expected"] = render(tmpl, conv, agp)
                except TemplateError as e:
                    case["error"] = str(e)
                cases.append(case)
    for name in EXTRA_TEMPLATES:  # after the cases above, which keep their order
        if name not in templates:
            continue
        for extra_name, extra in EXTRAS.items():
            case = {"template": name, "conversation": "system_user", "add_generation_prompt": False,
                    "extra": extra_name}
            try:
                case["expected"] = render(templates[name], CONVERSATIONS["system_user"], False, extra)
            except TemplateError as e:
                case["error"] = str(e)
            cases.append(case)
    out = {"bos_token": "<BOS>", "eos_token": "<EOS>", "conversations": CONVERSATIONS, "extras": EXTRAS,
           "templates": templates, "cases": cases}
    dst = os.path.join(ROOT, "tests", "golden", "data", "chat_templates.json")
    with open(dst, "w", encoding="utf-8") as f:
        json.dump(out, f, indent=1, ensure_ascii=False)
        f.write("\n")
    print(f"wrote {len(cases)} cases to {dst}")


if __name__ == "__main__":
    main()
