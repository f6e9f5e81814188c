"""python/examples/{example,bench}.py: nano-vllm's scripts' calls, run on a tiny model."""
import re
import subprocess
import sys

from conftest import SOURCE_DIR

EXAMPLES = SOURCE_DIR / "python" / "examples"


def run(script, *args, timeout=300):
    r = subprocess.run([sys.executable, str(EXAMPLES / script), *map(str, args)],
                       capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, r.stderr
    return r


def test_bench_workload_totals_with_default_arguments():
    # bench.py's defaults: random.seed(0), 256 seqs, lengths 100..1024.
    out = run("bench.py", "--dry-run").stdout
    assert out.strip() == "Workload: 256 seqs, 142827 prompt tokens, 133966 output tokens"


def test_bench_runs_a_scaled_down_workload(tiny_model):
    r = run("bench.py", "--model", tiny_model, "--num-seqs", 8, "--max-input-len", 64,
            "--max-output-len", 24, "--min-len", 8, "--threads", 2,
            "--kv-cache-memory", 16 << 20)
    lines = r.stdout.strip().split("\n")
    m = re.fullmatch(r"Workload: 8 seqs, (\d+) prompt tokens, (\d+) output tokens", lines[0])
    assert m, lines
    m2 = re.fullmatch(r"Total: (\d+)tok, Time: ([\d.]+)s, Throughput: ([\d.]+)tok/s", lines[-1])
    assert m2 and m2.group(1) == m.group(2), lines
    assert float(m2.group(3)) > 0


def test_example_prints_two_completions(tiny_model):
    r = run("example.py", tiny_model)
    prompts = re.findall(r"^Prompt: (.*)$", r.stdout, re.M)
    completions = re.findall(r"^Completion: (.*)$", r.stdout, re.M)
    assert prompts == ["'<|im_start|>user\\nintroduce yourself<|im_end|>\\n<|im_start|>assistant\\n'",
                       "'<|im_start|>user\\nlist all prime numbers within 100<|im_end|>\\n"
                       "<|im_start|>assistant\\n'"]
    assert len(completions) == 2 and all(len(c) > 2 for c in completions)
    assert "Generating: 100%|" in r.stderr  # the progress bar
