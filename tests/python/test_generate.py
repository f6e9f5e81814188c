"""LLM.generate equals the C++ CLI (`nanovllm generate --json`) token for token."""
import random

import pytest
from conftest import TINY_ENGINE, cli_generate, run_cli

from nanovllm import LLM, SamplingParams


def random_prompts(n, vocab=10000, seed=0):
    rng = random.Random(seed)
    return [[rng.randint(0, vocab - 1) for _ in range(rng.randint(3, 40))] for _ in range(n)]


def test_greedy_token_ids_equal_cli(cli, tiny_model, tiny_llm):
    prompts = random_prompts(6)
    want = cli_generate(cli, tiny_model, prompts, "--temperature", "0", "--max-tokens", "24")
    got = tiny_llm.generate(prompts, SamplingParams(temperature=0, max_tokens=24), use_tqdm=False)
    assert [g["token_ids"] for g in got] == [w["token_ids"] for w in want]
    assert [g["finish_reason"] for g in got] == [w["finish_reason"] for w in want]
    assert [g["text"] for g in got] == [w["text"] for w in want]
    assert all(len(g["token_ids"]) >= 1 for g in got)


def test_tensor_parallel_equals_one_rank(tiny_model, tiny_llm):
    prompts = random_prompts(5)
    sp = SamplingParams(temperature=0, max_tokens=12)
    want = tiny_llm.generate(prompts, sp, use_tqdm=False)
    llm = LLM(str(tiny_model), **{**TINY_ENGINE, "threads": 1}, tensor_parallel_size=2)
    got = llm.generate(prompts, sp, use_tqdm=False)
    assert [g["token_ids"] for g in got] == [w["token_ids"] for w in want]


def test_quantization_equals_cli(cli, tiny_model):
    prompts = random_prompts(4)
    for q in ("int8", "int4"):
        want = cli_generate(cli, tiny_model, prompts, "--temperature", "0", "--max-tokens", "12",
                            "--quantization", q)
        llm = LLM(str(tiny_model), **TINY_ENGINE, quantization=q)
        got = llm.generate(prompts, SamplingParams(temperature=0, max_tokens=12), use_tqdm=False)
        assert [g["token_ids"] for g in got] == [w["token_ids"] for w in want], q
    with pytest.raises(ValueError, match="quantization must be none, int8, int4.*got 'int3'"):
        LLM(str(tiny_model), quantization="int3")


def test_seeded_sampling_equals_cli(cli, tiny_model, tiny_llm):
    # The CLI gives request i the seed seed + i and leaves top_k / top_p to the model's
    # generation_config.json: None does the same here.
    prompts = random_prompts(4, seed=1)
    want = cli_generate(cli, tiny_model, prompts, "--temperature", "0.8", "--seed", "7",
                        "--max-tokens", "16", "--ignore-eos")
    params = [SamplingParams(temperature=0.8, max_tokens=16, ignore_eos=True, seed=7 + i,
                             top_k=None, top_p=None, repetition_penalty=None)
              for i in range(len(prompts))]
    got = tiny_llm.generate(prompts, params, use_tqdm=False)
    assert [g["token_ids"] for g in got] == [w["token_ids"] for w in want]
    assert all(g["finish_reason"] == "length" and len(g["token_ids"]) == 16 for g in got)


def test_text_prompts_equal_cli(cli, tiny_model, tiny_llm):
    prompts = ["The capital of France is", "Hello <|im_end|> world", "日本語のテキスト"]
    want = cli_generate(cli, tiny_model, prompts, "--temperature", "0", "--max-tokens", "12")
    got = tiny_llm.generate(prompts, SamplingParams(temperature=0, max_tokens=12), use_tqdm=False)
    assert [(g["token_ids"], g["text"]) for g in got] == [(w["token_ids"], w["text"]) for w in want]
    # A string prompt is its token ids.
    again = tiny_llm.generate([tiny_llm.tokenizer.encode(p) for p in prompts],
                              SamplingParams(temperature=0, max_tokens=12), use_tqdm=False)
    assert [g["token_ids"] for g in again] == [g["token_ids"] for g in got]


def test_qwen2_preset_equals_cli(cli, make_model):
    model = make_model("tiny-qwen2", 3)
    llm = LLM(str(model), **TINY_ENGINE)
    prompts = random_prompts(3, vocab=llm._engine.vocab_size, seed=2)
    want = cli_generate(cli, model, prompts, "--temperature", "0", "--max-tokens", "20")
    got = llm.generate(prompts, SamplingParams(temperature=0, max_tokens=20), use_tqdm=False)
    assert [g["token_ids"] for g in got] == [w["token_ids"] for w in want]


def test_one_params_or_one_per_prompt(tiny_llm):
    prompts = random_prompts(3, seed=3)
    sp = SamplingParams(temperature=0, max_tokens=5, ignore_eos=True)
    shared = tiny_llm.generate(prompts, sp, use_tqdm=False)
    each = tiny_llm.generate(prompts, [sp] * 3, use_tqdm=False)
    assert shared == each
    lengths = tiny_llm.generate(prompts, [SamplingParams(temperature=0, max_tokens=m, ignore_eos=True)
                                          for m in (1, 2, 3)], use_tqdm=False)
    assert [len(o["token_ids"]) for o in lengths] == [1, 2, 3]
    assert set(shared[0]) == {"text", "token_ids", "finish_reason"}
    single = tiny_llm.generate("The capital of France is", SamplingParams(temperature=0, max_tokens=4),
                               use_tqdm=False)
    assert len(single) == 1 and len(single[0]["token_ids"]) >= 1


def test_bad_requests_raise_value_error_with_engine_messages(cli, tiny_model, tiny_llm):
    vocab = tiny_llm._engine.vocab_size
    sp = SamplingParams(temperature=0, max_tokens=4)
    with pytest.raises(ValueError) as e:
        tiny_llm.generate([[1, 2], [3, vocab]], sp, use_tqdm=False)
    msg = str(e.value)
    assert msg == f"prompt 1: prompt token {vocab} at index 1 is outside the vocabulary [0, {vocab})"
    r = run_cli(cli, "generate", "--model", tiny_model, "--prompt-ids", "1,2", "--prompt-ids",
                f"3,{vocab}", "--max-tokens", "4", check=False)
    assert r.returncode != 0 and msg in r.stderr
    with pytest.raises(ValueError, match="prompt is empty"):
        tiny_llm.generate([[]], sp, use_tqdm=False)
    with pytest.raises(ValueError, match="max_model_len 512 leaves no room"):
        tiny_llm.generate([[1] * 600], sp, use_tqdm=False)
    with pytest.raises(ValueError, match="2 sampling params for 3 prompts"):
        tiny_llm.generate([[1], [2], [3]], [sp, sp], use_tqdm=False)
    with pytest.raises(TypeError, match="prompt 1 must be a str or a list of token ids"):
        tiny_llm.generate([[1], 2], sp, use_tqdm=False)
    # Nothing was queued by the failed calls: the engine goes on.
    assert len(tiny_llm.generate([[1, 2, 3]], sp, use_tqdm=False)[0]["token_ids"]) >= 1


def test_engine_arguments(tiny_model):
    with pytest.raises(TypeError, match="unknown engine argument.*max_num_seq\\b"):
        LLM(str(tiny_model), max_num_seq=4)
    with pytest.raises(ValueError, match="num_attention_heads"):
        LLM(str(tiny_model), tensor_parallel_size=3)  # 4 heads
    with pytest.raises(ValueError, match="distributed_backend must be threads or mpi"):
        LLM(str(tiny_model), tensor_parallel_size=2, distributed_backend="tcp")
    with pytest.raises(ValueError, match="max_num_seqs must be >= 1, got 0"):
        LLM(str(tiny_model), max_num_seqs=0)
    with pytest.raises(ValueError, match="unknown device 'tpu'"):
        LLM(str(tiny_model), device="tpu")
    with pytest.raises(ValueError, match="no-such-folder"):
        LLM("/no-such-folder")
    with pytest.raises(TypeError):
        LLM(str(tiny_model), max_num_seqs="8")


def test_config_defaults_match_engine():
    from nanovllm import Config, _C
    py, c = Config("m").to_c(), _C.Config()
    for name in ("max_num_batched_tokens", "max_num_seqs", "max_model_len", "block_size",
                 "kv_cache_memory", "enable_prefix_caching", "device", "enforce_eager",
                 "num_threads", "quantization"):
        assert getattr(py, name) == getattr(c, name), name
    assert py.gpu_memory_utilization == pytest.approx(c.gpu_memory_utilization)


def test_progress_bar_on_stderr(tiny_llm, capsys):
    prompts = random_prompts(5, seed=4)
    tiny_llm.generate(prompts, SamplingParams(temperature=0, max_tokens=8, ignore_eos=True))
    err = capsys.readouterr().err
    last = err.rstrip("\n").split("\r")[-1]
    assert last.startswith("Generating: 100%|██████████| 5/5 [")
    assert "Prefill=" in last and "tok/s, Decode=" in last
    tiny_llm.generate(prompts, SamplingParams(max_tokens=2), use_tqdm=False)
    assert capsys.readouterr().err == ""


def test_concurrent_generate_from_threads(tiny_llm):
    # The GIL is released while the engine runs: two threads share one LLM (one engine thread).
    import threading
    prompts = random_prompts(8, seed=5)
    sp = SamplingParams(temperature=0, max_tokens=12)
    want = tiny_llm.generate(prompts, sp, use_tqdm=False)
    results = [None, None]

    def run(k):
        results[k] = tiny_llm.generate(prompts[4 * k:4 * k + 4], sp, use_tqdm=False)

    threads = [threading.Thread(target=run, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results[0] + results[1] == want


def test_prompt_logprobs_equal_cli_and_tensor_parallel(cli, tiny_model, tiny_llm):
    # vLLM's shape: None for the first prompt token, then {token_id, logprob, rank, top_logprobs}.
    prompts = random_prompts(3, seed=4)
    sp = SamplingParams(temperature=0, max_tokens=1, prompt_logprobs=3)
    got = tiny_llm.generate(prompts, sp, use_tqdm=False)
    want = cli_generate(cli, tiny_model, prompts, "--temperature", "0", "--max-tokens", "1",
                        "--prompt-logprobs", "3")
    for p, g, w in zip(prompts, got, want):
        lps = g["prompt_logprobs"]
        assert len(lps) == len(p) and lps[0] is None
        assert [e["token_id"] for e in lps[1:]] == p[1:]
        assert [e["logprob"] for e in lps[1:]] == pytest.approx([e["logprob"] for e in w["prompt_logprobs"]], abs=1e-6)
        assert all(len(e["top_logprobs"]) == 3 for e in lps[1:])
    # Two ranks (threads) give the same numbers: the CPU engine is bitwise TP-invariant.
    llm = LLM(str(tiny_model), **{**TINY_ENGINE, "threads": 1}, tensor_parallel_size=2)
    tp = llm.generate(prompts, sp, use_tqdm=False)
    assert [g["prompt_logprobs"] for g in tp] == [g["prompt_logprobs"] for g in got]
