"""The Python API's overhead: the same scaled-down bench.py workload through `nanovllm bench`
(C++) and through nanovllm.LLM.generate (Python), alternating, in one run.

    PYTHONPATH=build/python/python /usr/bin/python3 bench/python_overhead.py \
        --cli build/python/nanovllm --model models/qwen3-0.6b [--num-seqs 16 ...] [--rounds 2]

Both sides run the same workload (bench.py's, random.seed(0)) with the same engine flags and
sampling (temperature 0.6, ignore_eos, top_k / top_p from generation_config.json as the CLI),
each after the same warm-up; the figure is output tokens / wall seconds of the timed generate.
The best and the median round of each side are compared (this shared VM's figures move by
10% or more between runs).
"""
import argparse
import json
import statistics
import subprocess
import time
from random import randint, seed

from nanovllm import LLM, SamplingParams


def workload(a):
    seed(a.seed)
    prompts = [[randint(0, 10000) for _ in range(randint(a.min_len, a.max_input_len))]
               for _ in range(a.num_seqs)]
    max_tokens = [randint(a.min_len, a.max_output_len) for _ in range(a.num_seqs)]
    return prompts, max_tokens


def run_cli(a):
    cmd = [a.cli, "bench", "--model", a.model, "--num-seqs", a.num_seqs, "--max-input-len",
           a.max_input_len, "--max-output-len", a.max_output_len, "--min-len", a.min_len,
           "--seed", a.seed, "--threads", a.threads, "--no-roofline"]
    if a.kv_cache_memory:
        cmd += ["--kv-cache-memory", a.kv_cache_memory]
    r = subprocess.run(list(map(str, cmd)), capture_output=True, text=True, check=True)
    j = json.loads(r.stdout.strip().split("\n")[-1])
    return j["output_tokens"], j["seconds"]


def run_python(llm, prompts, max_tokens):
    params = [SamplingParams(temperature=0.6, ignore_eos=True, max_tokens=m, top_k=None,
                             top_p=None, repetition_penalty=None) for m in max_tokens]
    t = time.perf_counter()
    llm.generate(prompts, params, use_tqdm=False)
    return sum(max_tokens), time.perf_counter() - t


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--cli", default="build/python/nanovllm")
    p.add_argument("--model", default="models/qwen3-0.6b")
    p.add_argument("--num-seqs", type=int, default=16)
    p.add_argument("--max-input-len", type=int, default=256)
    p.add_argument("--max-output-len", type=int, default=256)
    p.add_argument("--min-len", type=int, default=64)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--kv-cache-memory", type=int, default=0)
    p.add_argument("--rounds", type=int, default=2)
    a = p.parse_args()

    prompts, max_tokens = workload(a)
    llm = LLM(a.model, threads=a.threads, kv_cache_memory=a.kv_cache_memory)
    warm = SamplingParams(temperature=None, max_tokens=16, top_k=None, top_p=None,
                          repetition_penalty=None)
    llm.generate([[1, 2, 3, 4, 5, 6, 7, 8]], warm, use_tqdm=False)  # as `nanovllm bench`
    cpp, py = [], []
    for r in range(a.rounds):
        tokens, s = run_cli(a)
        cpp.append(tokens / s)
        tokens_py, s_py = run_python(llm, prompts, max_tokens)
        assert tokens_py == tokens, (tokens_py, tokens)
        py.append(tokens_py / s_py)
        print(f"round {r}: C++ {tokens} tok in {s:.2f} s = {cpp[-1]:.1f} tok/s; "
              f"Python {tokens_py} tok in {s_py:.2f} s = {py[-1]:.1f} tok/s", flush=True)
    best_cpp, best_py = max(cpp), max(py)
    print(f"workload: {a.num_seqs} seqs, {sum(map(len, prompts))} prompt + {sum(max_tokens)} "
          f"output tokens; model {a.model}")
    print(f"best: C++ {best_cpp:.1f} tok/s, Python {best_py:.1f} tok/s: Python / C++ = "
          f"{best_py / best_cpp:.4f} ({100 * (best_py / best_cpp - 1):+.2f}%)")
    med_cpp, med_py = statistics.median(cpp), statistics.median(py)
    print(f"median: C++ {med_cpp:.1f} tok/s, Python {med_py:.1f} tok/s: Python / C++ = "
          f"{med_py / med_cpp:.4f} ({100 * (med_py / med_cpp - 1):+.2f}%)")


if __name__ == "__main__":
    main()
