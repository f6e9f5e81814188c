#!/usr/bin/env python3
"""Renders chat templates with jinja2 the way transformers' apply_chat_template does.

The reference for nanovllm's own Jinja interpreter (src/tokenizer/jinja_*). The environment is
transformers': ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True) with the
loop-controls extension and a {% generation %} tag, `tojson` replaced by
json.dumps(x, ensure_ascii=False, ...), and raise_exception / strftime_now as globals. The
template sees messages, tools, documents, add_generation_prompt, bos_token, eos_token and the
extra kwargs.

Usage:
  render_reference.py BATCH.json     BATCH is a list of cases; prints a JSON list of results
  render_reference.py --template FILE --conversation FILE    prints one rendering

A case: {"template": path | "source": text, "messages": [...], "tools": null | [...],
         "add_generation_prompt": bool, "kwargs": {...}, "bos_token": "", "eos_token": ""}
A result: {"text": rendered} or {"error": "TypeName: message"}.
"""
import argparse
import json
import sys
from datetime import datetime

import jinja2
from jinja2 import nodes
from jinja2.ext import Extension, loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment


class GenerationTag(Extension):
    """transformers' {% generation %}...{% endgeneration %}: renders its body unchanged."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return nodes.CallBlock(self.call_method("_render"), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


class RaisedException(Exception):
    pass


def raise_exception(message):
    raise RaisedException(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def strftime_now(format):
    return datetime.now().strftime(format)


def make_env():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[GenerationTag, loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def render(env, case, cache):
    source = case.get("source")
    if source is None:
        path = case["template"]
        if path not in cache:
            with open(path, encoding="utf-8") as f:
                cache[path] = f.read()
        source = cache[path]
    template = env.from_string(source)
    variables = {"bos_token": case.get("bos_token", ""), "eos_token": case.get("eos_token", "")}
    variables.update(case.get("kwargs") or {})
    return template.render(messages=case.get("messages", []), tools=case.get("tools"), documents=None,
                           add_generation_prompt=case.get("add_generation_prompt", False), **variables)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("batch", nargs="?")
    ap.add_argument("--template")
    ap.add_argument("--conversation")
    args = ap.parse_args()
    env = make_env()
    cache = {}
    if args.batch is None:
        with open(args.conversation, encoding="utf-8") as f:
            case = json.load(f)
        case["template"] = args.template
        sys.stdout.write(render(env, case, cache))
        return
    with open(args.batch, encoding="utf-8") as f:
        cases = json.load(f)
    results = []
    for case in cases:
        try:
            results.append({"text": render(env, case, cache)})
        except Exception as e:  # the C++ side compares that both fail, and how
            results.append({"error": f"{type(e).__name__}: {e}"})
    json.dump(results, sys.stdout, ensure_ascii=False)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
