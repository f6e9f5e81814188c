"""LLM.stream: a request's tokens as they come; they add up to generate's output."""
import pytest

from nanovllm import SamplingParams


def test_stream_adds_up_to_generate(tiny_llm):
    prompt = "The capital of France is"
    sp = SamplingParams(temperature=0, max_tokens=20, ignore_eos=True)
    want = tiny_llm.generate([prompt], sp, use_tqdm=False)[0]
    pieces = list(tiny_llm.stream(prompt, sp))
    assert len(pieces) >= 2  # tokens arrive over several events
    assert pieces[-1]["finished"] and pieces[-1]["finish_reason"] == "length"
    assert not any(p["finished"] for p in pieces[:-1])
    assert [t for p in pieces for t in p["token_ids"]] == want["token_ids"]
    assert "".join(p["text"] for p in pieces) == want["text"]
    assert pieces[-1]["num_completion_tokens"] == 20


def test_closing_a_stream_aborts_it(tiny_llm):
    sp = SamplingParams(temperature=0, max_tokens=400, ignore_eos=True)
    s = tiny_llm.stream([1, 2, 3], sp)
    first = next(s)
    assert first["token_ids"] and not first["finished"]
    s.close()
    assert list(s) == []
    # The engine is free again: a new request runs to its end.
    out = tiny_llm.generate([[4, 5]], SamplingParams(temperature=0, max_tokens=3, ignore_eos=True),
                            use_tqdm=False)
    assert len(out[0]["token_ids"]) == 3


def test_streams_interleave(tiny_llm):
    sp = SamplingParams(temperature=0, max_tokens=10, ignore_eos=True)
    a, b = tiny_llm.stream([7, 8, 9], sp), tiny_llm.stream([10, 11], sp)
    ta = [t for p in a for t in p["token_ids"]]
    tb = [t for p in b for t in p["token_ids"]]
    want = tiny_llm.generate([[7, 8, 9], [10, 11]], sp, use_tqdm=False)
    assert [ta, tb] == [w["token_ids"] for w in want]


def test_generate_beside_a_running_stream_is_a_runtime_error(tiny_llm):
    sp = SamplingParams(temperature=0, max_tokens=400, ignore_eos=True)
    s = tiny_llm.stream([1, 2, 3], sp)
    next(s)
    try:
        with pytest.raises(RuntimeError, match="1 streamed request.* still running"):
            tiny_llm.generate([[4, 5]], SamplingParams(max_tokens=2), use_tqdm=False)
    finally:
        s.close()
    assert len(tiny_llm.generate([[4, 5]], SamplingParams(max_tokens=2, ignore_eos=True),
                                 use_tqdm=False)[0]["token_ids"]) == 2
