"""`pip install --no-build-isolation .` into a fresh venv (Debian's python, its site packages
visible, no index: offline) installs a working package."""
import os
import subprocess
import sys
import time

from conftest import SOURCE_DIR


def test_pip_install_into_a_venv(tmp_path, tiny_model):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True)
    python = venv / "bin" / "python"
    env = dict(os.environ, PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1",
               CMAKE_ARGS="-DNANOVLLM_CUDA=OFF")
    env.pop("PYTHONPATH", None)  # the installed package, not the build tree's
    t = time.time()
    r = subprocess.run([str(python), "-m", "pip", "install", "--no-build-isolation", "-q",
                        str(SOURCE_DIR)], env=env, capture_output=True, text=True, timeout=1800)
    assert r.returncode == 0, r.stdout + r.stderr
    print(f"pip install took {time.time() - t:.1f} s")
    check = (
        "import sys, nanovllm; from nanovllm import LLM, SamplingParams\n"
        "assert '/venv/' in nanovllm.__file__, nanovllm.__file__\n"
        "llm = LLM(sys.argv[1], kvcache_block_size=16, kv_cache_memory=1 << 20, threads=2,\n"
        "          max_model_len=256)\n"
        "out = llm.generate([[1, 2, 3]], SamplingParams(temperature=0, max_tokens=5,\n"
        "                   ignore_eos=True), use_tqdm=False)\n"
        "print(len(out[0]['token_ids']))\n")
    r = subprocess.run([str(python), "-c", check, str(tiny_model)], env=env, cwd=tmp_path,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "5"
