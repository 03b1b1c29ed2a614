"""Structured output through the Python package, checked with tools no one here wrote: hundreds of
generations from SmolLM2 under the 65 schemas of tests/golden/data/json_schema_cases.json (the
converter's own golden set), each finished output parsed with `json` and validated with
`jsonschema` (Draft 2020-12, format checks on), plus regex outputs against Python's `re` and choices.
Sampled (temperature 0.8) so the model wanders: the grammar, not the model, keeps the output valid.
A 135M model can ramble inside an unbounded string until max_tokens: such outputs end with "length"
and are not checked (no independent tool checks a prefix); the test asks that most finish."""
import json
import os
import re

import jsonschema
import pytest

from kiln import SamplingParams, StructuredOutputsParams, GuidedDecodingParams

HERE = os.path.dirname(os.path.abspath(__file__))
CASES = json.load(open(os.path.join(HERE, "..", "golden", "data", "json_schema_cases.json")))


def ask(schema):
    return [{"role": "user", "content": "Reply with JSON for this JSON Schema: " + json.dumps(schema)}]


def test_json_schemas_validate(smol):
    schemas = [s for s in CASES["schemas"]]
    # Schemas whose grammar is knowingly looser than a validator (nullable, overlapping oneOf, an
    # extra property reusing a listed name): parsed, not validated.
    looser = {s["name"] for s in schemas if any(c.get("looser") for c in s["cases"])}
    convs, params, names = [], [], []
    for s in schemas:
        for seed in range(4):
            convs.append(ask(s["schema"]))
            params.append(SamplingParams(temperature=0.8, seed=seed, max_tokens=384,
                                         structured_outputs=StructuredOutputsParams(json=s["schema"])))
            names.append(s["name"])
    outs = smol.chat(convs, params, use_tqdm=False)
    stopped = 0
    for name, schema, out in zip(names, [s["schema"] for s in schemas for _ in range(4)], outs):
        o = out.outputs[0]
        assert o.finish_reason in ("stop", "length"), (name, o.finish_reason)
        if o.finish_reason != "stop":
            continue
        stopped += 1
        value = json.loads(o.text)  # raises on invalid JSON
        if name not in looser:
            jsonschema.Draft202012Validator(schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER
                                            ).validate(value)
    assert len(outs) == 4 * len(schemas) >= 250
    print(f"{stopped} of {len(outs)} outputs finished and validated")
    assert stopped >= 0.8 * len(outs), f"only {stopped} of {len(outs)} finished"


def test_regex_and_choice(smol):
    # Bounded languages: every output must finish within max_tokens.
    patterns = [r"\d{3}-\d{4}", r"(cat|dog|bird)s?", r"[A-Z][a-z]{2,8}( [A-Z][a-z]{2,8})?",
                r"#[0-9a-f]{6}", r"(\w{1,10}@\w{1,10}\.com|none)", r"-?(0|[1-9]\d{0,5})(\.\d{1,4})?"]
    convs = [[{"role": "user", "content": "Say something."}]] * (len(patterns) * 5)
    params = [SamplingParams(temperature=1.0, seed=i, max_tokens=64,
                             guided_decoding=GuidedDecodingParams(regex=p))
              for p in patterns for i in range(5)]
    outs = smol.chat(convs, params, use_tqdm=False)
    for k, out in enumerate(outs):
        o = out.outputs[0]
        assert o.finish_reason == "stop", (patterns[k // 5], o.text)
        assert re.fullmatch(patterns[k // 5], o.text, re.ASCII), (patterns[k // 5], o.text)
    choices = ["Paris", "London", "New York", "Tokyo"]
    outs = smol.chat([[{"role": "user", "content": "Pick a city."}]] * 8,
                     [SamplingParams(temperature=1.0, seed=i, structured_outputs=StructuredOutputsParams(choice=choices))
                      for i in range(8)], use_tqdm=False)
    assert all(o.outputs[0].text in choices and o.outputs[0].finish_reason == "stop" for o in outs)


def test_json_object_and_grammar(smol):
    outs = smol.chat([ask({"type": "object"})] * 4,
                     [SamplingParams(temperature=1.0, seed=i, max_tokens=256,
                                     structured_outputs=StructuredOutputsParams(json_object=True)) for i in range(4)],
                     use_tqdm=False)
    for out in outs:
        o = out.outputs[0]
        if o.finish_reason == "stop":
            assert isinstance(json.loads(o.text), dict)
    gbnf = 'root ::= "(" item ("," item){0,3} ")"\nitem ::= [a-z]+ | root\n'
    o = smol.generate("List:", SamplingParams(temperature=1.0, seed=3, max_tokens=64,
                                               structured_outputs=StructuredOutputsParams(grammar=gbnf)),
                      use_tqdm=False)[0].outputs[0]
    if o.finish_reason == "stop":
        depth = 0
        for ch in o.text:
            depth += {"(": 1, ")": -1}.get(ch, 0)
            assert depth >= 0
        assert depth == 0 and o.text.startswith("(") and o.text.endswith(")")


def test_errors_name_the_problem(smol):
    bad = [(StructuredOutputsParams(json={"type": "object", "not": {}}), NotImplementedError, "not"),
           (StructuredOutputsParams(regex="(a"), ValueError, "regex"),
           (StructuredOutputsParams(grammar="root ::= x"), ValueError, "undefined rule"),
           (StructuredOutputsParams(choice=[]), ValueError, "empty")]
    for so, exc, needle in bad:
        with pytest.raises(exc, match=needle):
            smol.generate("x", SamplingParams(structured_outputs=so), use_tqdm=False)
    with pytest.raises(ValueError, match="exactly one"):
        SamplingParams(structured_outputs=StructuredOutputsParams(regex="a", choice=["a"]))
    with pytest.raises(NotImplementedError, match="whitespace_pattern"):
        SamplingParams(structured_outputs=StructuredOutputsParams(json_object=True, whitespace_pattern=" "))
