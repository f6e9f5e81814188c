"""Structured outputs through the package, as vLLM spells them: SamplingParams(structured_outputs=
StructuredOutputsParams(json=... | regex=... | choice=[...] | grammar=... | json_object=True)).
The tiny model (random weights, Qwen3's real tokenizer) samples freely inside the constraint, so
every output is checked: JSON with json.loads and jsonschema, regexes with re.fullmatch, choices by
membership. Errors are ValueError with the engine's message."""
import json
import re

import jsonschema
import pytest

import nanovllm.sampling_params
from nanovllm import SamplingParams, StructuredOutputsParams

# Bounded (maxLength, integer range, maxItems), so that every output completes in max_tokens.
SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "minLength": 1, "maxLength": 12},
        "age": {"type": "integer", "minimum": 0, "maximum": 150},
        "city": {"enum": ["Paris", "Lyon", "Nice"]},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 6}, "maxItems": 3},
        "ok": {"type": "boolean"},
    },
    "required": ["name", "age", "city"],
}
PROMPTS = ["Describe a person as JSON:", "Hello", "Once upon a time", "1 2 3 4"]


def sampled(structured, n_prompts=len(PROMPTS), **kwargs):
    """One SamplingParams per prompt: greedy for the first, seeded sampling for the others."""
    kwargs.setdefault("max_tokens", 160)
    return [SamplingParams(temperature=0 if i == 0 else 1.0, seed=i, structured_outputs=structured,
                           **kwargs) for i in range(n_prompts)]


def check_person(text):
    value = json.loads(text)
    jsonschema.Draft202012Validator(SCHEMA).validate(value)
    # By hand too: the required keys with their types.
    assert isinstance(value, dict)
    assert isinstance(value["name"], str) and 1 <= len(value["name"]) <= 12
    assert type(value["age"]) is int and 0 <= value["age"] <= 150
    assert value["city"] in ("Paris", "Lyon", "Nice")
    assert set(value) <= set(SCHEMA["properties"])


def test_names_as_vllm():
    assert nanovllm.sampling_params.StructuredOutputsParams is StructuredOutputsParams
    so = StructuredOutputsParams(json=SCHEMA)
    assert SamplingParams(structured_outputs=so).structured_outputs is so
    c = SamplingParams(structured_outputs=so).to_c().structured_outputs
    assert json.loads(c.json) == SCHEMA and c.regex is None and c.choice is None
    assert not c.json_object and c.grammar is None
    assert SamplingParams().to_c().structured_outputs is None
    c = StructuredOutputsParams(choice=("a", "b")).to_c()
    assert c.choice == ["a", "b"] and c.json is None
    assert StructuredOutputsParams(json_object=True).to_c().json_object


def test_json_schema_dict(tiny_llm):
    outs = tiny_llm.generate(PROMPTS, sampled(StructuredOutputsParams(json=SCHEMA)), use_tqdm=False)
    for out in outs:
        assert out["finish_reason"] == "stop", out
        check_person(out["text"])
    # The schema as text is the same constraint: the same greedy output.
    text = json.dumps(SCHEMA, indent=1)
    again = tiny_llm.generate(PROMPTS[:1], sampled(StructuredOutputsParams(json=text), 1),
                              use_tqdm=False)
    assert again[0]["text"] == outs[0]["text"]


def test_json_object(tiny_llm):
    sps = sampled(StructuredOutputsParams(json_object=True), max_tokens=200)
    outs = tiny_llm.generate(PROMPTS, sps, use_tqdm=False)
    for out in outs:
        if out["finish_reason"] == "stop":  # unbounded: a long object may run out of tokens
            assert isinstance(json.loads(out["text"]), dict), out
        else:
            assert out["finish_reason"] == "length" and out["text"].lstrip().startswith("{"), out


def test_choice(tiny_llm):
    choices = ["Paris", "Lyon", "Nice", "Marseille"]
    outs = tiny_llm.generate(PROMPTS, sampled(StructuredOutputsParams(choice=choices)),
                             use_tqdm=False)
    for out in outs:
        assert out["finish_reason"] == "stop" and out["text"] in choices, out


def test_regex_and_grammar(tiny_llm):
    pattern = r"[a-z]{3,8}-\d{2,4}(\.[A-Z]{2})?"
    outs = tiny_llm.generate(PROMPTS, sampled(StructuredOutputsParams(regex=pattern)),
                             use_tqdm=False)
    for out in outs:
        assert out["finish_reason"] == "stop", out
        assert re.fullmatch(pattern, out["text"], re.ASCII), out
    grammar = 'root ::= answer ("." | "!")\nanswer ::= "yes" | "no" | "maybe"'
    outs = tiny_llm.generate(PROMPTS, sampled(StructuredOutputsParams(grammar=grammar)),
                             use_tqdm=False)
    for out in outs:
        assert out["finish_reason"] == "stop", out
        assert re.fullmatch(r"(yes|no|maybe)[.!]", out["text"]), out


def test_stream(tiny_llm):
    pattern = r"\d{3}-[a-z]{2,5}"
    sp = SamplingParams(temperature=1.0, seed=7, max_tokens=64,
                        structured_outputs=StructuredOutputsParams(regex=pattern))
    pieces = list(tiny_llm.stream("Hello", sp))
    text = "".join(p["text"] for p in pieces)
    assert pieces[-1]["finish_reason"] == "stop" and re.fullmatch(pattern, text, re.ASCII), text


INVALID_SCHEMAS = [  # (schema, a word the engine's message names)
    ({"type": "object", "patternProperties": {"^a": {"type": "string"}}}, "patternProperties"),
    ({"type": "object", "properties": {"a": {"not": {"type": "string"}}}}, "not"),
    ({"type": "array", "uniqueItems": True}, "uniqueItems"),
    ({"type": "strnig"}, "strnig"),
]


@pytest.mark.parametrize("schema,keyword", INVALID_SCHEMAS, ids=[k for _, k in INVALID_SCHEMAS])
def test_invalid_schema_raises_with_keyword(tiny_llm, schema, keyword):
    sp = SamplingParams(max_tokens=8, structured_outputs=StructuredOutputsParams(json=schema))
    with pytest.raises(ValueError) as e:
        tiny_llm.generate(["Hello"], sp, use_tqdm=False)
    message = str(e.value)
    assert message.startswith("json_schema: ") and re.search(rf"\b{keyword}\b", message), message
    with pytest.raises(ValueError) as e2:
        tiny_llm.stream("Hello", sp)
    assert str(e2.value) == str(e.value)


def test_bad_regex_and_grammar_raise(tiny_llm):
    for so in (StructuredOutputsParams(regex="(a"), StructuredOutputsParams(grammar="root ::= x"),
               StructuredOutputsParams(json="{not json")):
        with pytest.raises(ValueError):
            tiny_llm.generate(["Hello"], SamplingParams(max_tokens=8, structured_outputs=so),
                              use_tqdm=False)


def test_two_constraints_raise_the_engine_message(tiny_llm):
    message = ("structured_outputs: set exactly one of json, json_object, regex, choice, grammar "
               "(got 2)")
    with pytest.raises(ValueError) as e:
        StructuredOutputsParams(regex="a+", choice=["a"])
    assert str(e.value) == message
    with pytest.raises(ValueError) as e:
        SamplingParams(structured_outputs=StructuredOutputsParams())
    assert str(e.value) == message.replace("got 2", "got 0")
    # The engine refuses the same with the same message (validation bypassed).
    sp = SamplingParams(max_tokens=8, structured_outputs=StructuredOutputsParams(regex="a+"))
    sp.structured_outputs.choice = ["a"]
    with pytest.raises(ValueError) as e:
        tiny_llm.generate(["Hello"], sp, use_tqdm=False)
    assert str(e.value).endswith(message), str(e.value)
    with pytest.raises(ValueError, match="empty list"):
        SamplingParams(structured_outputs=StructuredOutputsParams(choice=[]))
    with pytest.raises(ValueError, match="min_tokens"):
        SamplingParams(min_tokens=1, structured_outputs=StructuredOutputsParams(choice=["a"]))


@pytest.mark.parametrize("kwargs", [{"json": 3}, {"json": True}, {"regex": 1}, {"choice": "ab"},
                                    {"choice": [1]}, {"json_object": 1},
                                    {"json": {"type": object}}])
def test_wrong_types_raise_type_error(kwargs):
    with pytest.raises(TypeError):
        StructuredOutputsParams(**kwargs)
    with pytest.raises(TypeError):
        SamplingParams(structured_outputs={"regex": "a"})


def test_usable_after_an_error(tiny_llm):
    good = SamplingParams(temperature=0, max_tokens=8,
                          structured_outputs=StructuredOutputsParams(choice=["yes", "no"]))
    bad = SamplingParams(max_tokens=8, structured_outputs=StructuredOutputsParams(regex="(a"))
    with pytest.raises(ValueError):
        tiny_llm.generate(["Hello", "Hi"], [good, bad], use_tqdm=False)
    outs = tiny_llm.generate(["Hello", "Hi"], [good, SamplingParams(temperature=0, max_tokens=4)],
                             use_tqdm=False)
    assert outs[0]["text"] in ("yes", "no") and outs[0]["finish_reason"] == "stop"
    assert len(outs[1]["token_ids"]) >= 1
