"""Ctrl-C (SIGINT) stops a generate or a stream cleanly: KeyboardInterrupt within a fraction of
a second, the call's requests aborted, and the same LLM keeps working."""
import os
import signal
import subprocess
import sys
import time

from conftest import TINY_ENGINE

CHILD = r"""
import sys, time
from nanovllm import LLM, SamplingParams
llm = LLM(sys.argv[1], **eval(sys.argv[2]))
long = SamplingParams(temperature=0, max_tokens=480, ignore_eos=True)
print("ready", flush=True)
t = time.time()
try:
    llm.generate([[i + 1, i + 2] for i in range(64)], long, use_tqdm=False)
    print("generate finished", flush=True)
except KeyboardInterrupt:
    print(f"generate interrupted {time.time() - t:.3f}", flush=True)
out = llm.generate([[1, 2, 3]], SamplingParams(temperature=0, max_tokens=4, ignore_eos=True),
                   use_tqdm=False)
print("after", len(out[0]["token_ids"]), flush=True)
try:
    for i, piece in enumerate(llm.stream([5, 6, 7], long)):
        if i == 0:
            print("streaming", flush=True)
    print("stream finished", flush=True)
except KeyboardInterrupt:
    print("stream interrupted", flush=True)
out = llm.generate([[1, 2, 3]], SamplingParams(temperature=0, max_tokens=4, ignore_eos=True),
                   use_tqdm=False)
print("after", len(out[0]["token_ids"]), flush=True)
"""


def test_ctrl_c_stops_generate_and_stream(tiny_model):
    engine = dict(TINY_ENGINE, kv_cache_memory=64 << 20, max_num_seqs=256)
    p = subprocess.Popen([sys.executable, "-c", CHILD, str(tiny_model), repr(engine)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "ready"
        time.sleep(0.5)
        p.send_signal(signal.SIGINT)
        line = p.stdout.readline().split()
        assert line[:2] == ["generate", "interrupted"], line
        assert 0.4 < float(line[2]) < 3.0, line  # stopped soon after the signal
        assert p.stdout.readline().split() == ["after", "4"]
        assert p.stdout.readline().strip() == "streaming"
        p.send_signal(signal.SIGINT)
        assert p.stdout.readline().strip() == "stream interrupted"
        assert p.stdout.readline().split() == ["after", "4"]
        assert p.wait(timeout=60) == 0, p.stderr.read()
    finally:
        if p.poll() is None:
            os.kill(p.pid, signal.SIGKILL)
