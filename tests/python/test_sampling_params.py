"""SamplingParams: nano-vllm's defaults and positional order, and validation errors that are
the engine's own (the same request sent with validation bypassed gets the same message)."""
import math

import pytest

from nanovllm import SamplingParams

INVALID = [  # (field, value, message)
    ("temperature", -1.0, "temperature must be a finite number >= 0, got -1"),
    ("temperature", math.nan, "temperature must be a finite number >= 0, got nan"),
    ("max_tokens", 0, "max_tokens must be >= 1, got 0"),
    ("top_p", 0.0, "top_p must be in (0, 1], got 0"),
    ("top_p", 1.5, "top_p must be in (0, 1], got 1.5"),
    ("top_k", -2, "top_k must be -1, 0 (off) or positive, got -2"),
    ("min_p", 1.5, "min_p must be in [0, 1], got 1.5"),
    ("repetition_penalty", 0.0, "repetition_penalty must be a finite number > 0, got 0"),
    ("presence_penalty", 3.0, "presence_penalty must be in [-2, 2], got 3"),
    ("frequency_penalty", -2.5, "frequency_penalty must be in [-2, 2], got -2.5"),
    ("n", 0, "n must be in [1, 1024], got 0"),
    ("min_tokens", 100, "min_tokens must be <= max_tokens (64), got 100"),
    ("min_tokens", -1, "min_tokens must be >= 0, got -1"),
    ("logprobs", 21, "logprobs must be in [0, 20], got 21"),
    ("stop", [""], "stop: a stop string must not be empty"),
    ("logit_bias", {5: math.inf}, "logit_bias: the bias of token 5 must be finite, got inf"),
]


def test_nano_vllm_defaults_and_order():
    sp = SamplingParams()
    assert (sp.temperature, sp.max_tokens, sp.ignore_eos) == (1.0, 64, False)
    sp = SamplingParams(0.6, 256, True)
    assert (sp.temperature, sp.max_tokens, sp.ignore_eos) == (0.6, 256, True)
    c = SamplingParams(temperature=0).to_c()
    assert c.temperature == 0 and c.top_k == 0 and c.top_p == 1 and c.seed is None
    assert SamplingParams(stop="x").stop == ["x"]
    with pytest.raises(TypeError):
        SamplingParams(0.6, 256, True, 5)  # the vLLM fields are keyword-only


@pytest.mark.parametrize("field,value,message", INVALID, ids=[f"{f}={v}" for f, v, _ in INVALID])
def test_invalid_value_raises_engine_message(tiny_llm, field, value, message):
    with pytest.raises(ValueError) as e:
        SamplingParams(**{field: value})
    assert str(e.value) == message
    # The engine refuses the same value with the same message (prefixed by the prompt index).
    sp = SamplingParams(temperature=0)
    setattr(sp, field, value)
    with pytest.raises(ValueError) as e:
        tiny_llm.generate([[1, 2, 3]], sp, use_tqdm=False)
    assert str(e.value) == "prompt 0: " + message


def test_logit_bias_is_checked_by_the_engine(tiny_llm):
    vocab = tiny_llm._engine.vocab_size
    with pytest.raises(ValueError, match="logit_bias"):
        tiny_llm.generate([[1, 2]], SamplingParams(logit_bias={vocab: 1.0}), use_tqdm=False)


@pytest.mark.parametrize("kwargs", [{"temperature": "hot"}, {"max_tokens": 2.5},
                                    {"max_tokens": True}, {"seed": 1.5}, {"top_k": 0.5},
                                    {"stop": [1]}, {"logit_bias": {"a": 1}}])
def test_wrong_types_raise_type_error(kwargs):
    with pytest.raises((TypeError, ValueError)):
        SamplingParams(**kwargs)


def test_valid_values_run(tiny_llm):
    sp = SamplingParams(temperature=0.7, max_tokens=6, top_k=5, top_p=0.9, min_p=0.05,
                        repetition_penalty=1.1, presence_penalty=0.5, frequency_penalty=0.5,
                        seed=3, ignore_eos=True)
    a = tiny_llm.generate([[5, 6, 7]], sp, use_tqdm=False)[0]
    b = tiny_llm.generate([[5, 6, 7]], sp, use_tqdm=False)[0]
    assert a == b and len(a["token_ids"]) == 6  # seeded: the same tokens twice
