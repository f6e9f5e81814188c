#!/usr/bin/env python3
"""Validates texts generated under structured-output constraints (tests/structured/qwen3_walk_test.cpp).

Reads a JSON-lines file; each line is {"id": n, "kind": k, "spec": s, "output": text} where kind is
  json_schema  the output must parse as JSON (json.loads) and validate against the schema s
               (jsonschema's Draft 2020-12 validator with its format checker, plus strict checks
               of date, time, date-time, uuid and ipv4 below, as the checker may lack their parsers);
  json_object  the output must parse as a JSON object;
  regex        re.fullmatch(s, output, re.ASCII) must match (\\d \\w \\s are ASCII in nanovllm).
Prints "FAIL <id>: <reason>" per failure and "CHECKED <n>"; exits 1 on failures, 3 if the
jsonschema module is missing (Debian: apt-get install python3-jsonschema).
"""
import datetime
import ipaddress
import json
import re
import sys
import uuid

try:
    import jsonschema
except ImportError:
    print("MISSING python3 module jsonschema: run scripts/install_deps.sh "
          "(Debian: apt-get install python3-jsonschema)")
    sys.exit(3)


def strict_format_errors(schema, value, path="$"):
    """Checks of the formats nanovllm generates that do not depend on optional packages."""
    errors = []
    if not isinstance(schema, dict):
        return errors
    fmt = schema.get("format")
    if fmt and isinstance(value, str):
        try:
            if fmt == "date":
                datetime.date.fromisoformat(value)
                assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", value)
            elif fmt == "time":
                assert re.fullmatch(r"\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})", value)
                datetime.time.fromisoformat(value.replace("Z", "+00:00"))
            elif fmt == "date-time":
                assert re.fullmatch(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})", value)
                datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
            elif fmt == "uuid":
                uuid.UUID(value)
                assert len(value) == 36
            elif fmt == "ipv4":
                ipaddress.IPv4Address(value)
            elif fmt == "email":
                assert "@" in value
        except (ValueError, AssertionError) as e:
            errors.append(f"{path}: {value!r} is not a valid {fmt} ({e})")
    if isinstance(value, dict):
        for key, sub in schema.get("properties", {}).items():
            if key in value:
                errors += strict_format_errors(sub, value[key], f"{path}.{key}")
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(value):
            errors += strict_format_errors(schema["items"], item, f"{path}[{i}]")
    return errors


def check(line):
    kind, spec, output = line["kind"], line["spec"], line["output"]
    if kind == "regex":
        if re.fullmatch(spec, output, re.ASCII) is None:
            return f"regex {spec!r} does not match {output!r}"
        return None
    try:
        value = json.loads(output)
    except json.JSONDecodeError as e:
        return f"not JSON ({e}): {output!r}"
    if kind == "json_object":
        return None if isinstance(value, dict) else f"not an object: {output!r}"
    schema = json.loads(spec)
    validator = jsonschema.Draft202012Validator(schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)
    errors = [e.message for e in validator.iter_errors(value)] + strict_format_errors(schema, value)
    return f"{errors[0]} in {output!r}" if errors else None


def main():
    failures = 0
    n = 0
    with open(sys.argv[1], encoding="utf-8") as f:
        for text in f:
            line = json.loads(text)
            n += 1
            reason = check(line)
            if reason:
                failures += 1
                print(f"FAIL {line['id']}: {reason}")
    print(f"CHECKED {n}")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
