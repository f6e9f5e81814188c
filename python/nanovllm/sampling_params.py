"""SamplingParams: nano-vllm's (temperature, max_tokens, ignore_eos) first, then vLLM's fields.

Defaults follow nano-vllm and vLLM: plain temperature sampling (top_k, top_p, min_p and the
penalties off). None for temperature, top_k, top_p or repetition_penalty takes the model's
generation_config.json value instead (as the CLI does when a flag is not given). temperature=0 is
greedy (nano-vllm refuses it).
Invalid values raise ValueError with the engine's message (the engine checks again per request).

StructuredOutputsParams (vLLM's): SamplingParams(structured_outputs=StructuredOutputsParams(
json=schema)) constrains the output token by token to a JSON schema (a dict, or its text), any
JSON object (json_object=True), a regex (the whole output matches), one of a list of strings
(choice) or a GBNF grammar (llama.cpp's, rule `root`). Set exactly one. A schema, regex or
grammar the engine cannot compile raises ValueError naming the keyword or rule when generate
(or stream) adds the request.
"""
import json as _json
import math
from dataclasses import KW_ONLY, dataclass
from typing import Optional, Union

from nanovllm import _C


def _num(x):
    """A number as the engine's messages write it (fmt's shortest form: 3, 0.5, 1e-05, inf)."""
    if isinstance(x, float) and math.isfinite(x) and x == int(x) and abs(x) < 1e16:
        return str(int(x))
    return str(x)


def _check_type(name, value, types, optional=False):
    if value is None and optional:
        return
    if isinstance(value, bool) and bool not in types:
        raise TypeError(f"{name} must be {types[0].__name__}, got bool")
    if not isinstance(value, types):
        raise TypeError(f"{name} must be {types[0].__name__}{' or None' if optional else ''}, "
                        f"got {type(value).__name__}")


@dataclass
class StructuredOutputsParams:
    """vLLM's StructuredOutputsParams: set exactly one field (two or more raise ValueError here,
    none when a SamplingParams takes it, with the engine's message)."""
    json: Optional[Union[dict, str]] = None  # a JSON schema: a dict (sent as json.dumps) or text
    regex: Optional[str] = None              # the whole output matches it
    choice: Optional[list] = None            # the output is one of these strings
    grammar: Optional[str] = None            # a GBNF grammar, rule `root`
    json_object: Optional[bool] = None       # True: any JSON object

    def __post_init__(self):
        if isinstance(self.choice, tuple):
            self.choice = list(self.choice)
        if self.json is not None and (isinstance(self.json, bool)
                                      or not isinstance(self.json, (dict, str))):
            raise TypeError("structured_outputs.json must be a schema (a dict or a str), "
                            f"got {type(self.json).__name__}")
        _check_type("structured_outputs.regex", self.regex, (str,), optional=True)
        _check_type("structured_outputs.grammar", self.grammar, (str,), optional=True)
        _check_type("structured_outputs.json_object", self.json_object, (bool,), optional=True)
        if self.choice is not None and not (isinstance(self.choice, list)
                                            and all(isinstance(c, str) for c in self.choice)):
            raise TypeError("structured_outputs.choice must be a list of strings")
        if self.num_constraints() > 1:  # as vLLM: refused when made; none set: by SamplingParams
            raise ValueError(self.validation_errors()[0])
        self.to_c()  # TypeError now for a schema dict json.dumps cannot write

    def num_constraints(self):
        return sum([self.json is not None, bool(self.json_object), self.regex is not None,
                    self.choice is not None, self.grammar is not None])

    def validation_errors(self):
        """The engine's messages for what it refuses before compiling (llm_engine_sampling.cpp);
        what it refuses while compiling (a schema keyword, a regex, a rule) raises on generate."""
        n = self.num_constraints()
        if n != 1:
            return ["structured_outputs: set exactly one of json, json_object, regex, choice, "
                    f"grammar (got {n})"]
        if self.choice is not None and not self.choice:
            return ["structured_outputs: choice is an empty list"]
        return []

    def to_c(self):
        """The engine's StructuredOutputsParams (a dict schema as its JSON text)."""
        c = _C.StructuredOutputsParams()
        if self.json is not None:
            c.json = self.json if isinstance(self.json, str) else _json.dumps(self.json)
        c.json_object = bool(self.json_object)
        c.regex = self.regex
        c.choice = None if self.choice is None else list(self.choice)
        c.grammar = self.grammar
        return c


@dataclass
class SamplingParams:
    temperature: Optional[float] = 1.0
    max_tokens: int = 64
    ignore_eos: bool = False
    _: KW_ONLY
    top_k: Optional[int] = 0                 # 0 or -1: off
    top_p: Optional[float] = 1.0             # (0, 1]; 1: off
    min_p: float = 0.0                       # [0, 1]; 0: off
    repetition_penalty: Optional[float] = 1.0  # > 0; 1: off
    presence_penalty: float = 0.0            # [-2, 2]
    frequency_penalty: float = 0.0           # [-2, 2]
    logit_bias: Optional[dict] = None        # {token id: bias}
    seed: Optional[int] = None               # same seed, prompt and params: same tokens
    n: int = 1                               # samples per prompt
    min_tokens: int = 0                      # eos / stop_token_ids masked until this many
    stop: Optional[list] = None              # stop strings (or one string)
    stop_token_ids: Optional[list] = None
    include_stop_str_in_output: bool = False
    logprobs: Optional[int] = None           # [0, 20] top logprobs per token
    prompt_logprobs: Optional[int] = None    # [0, 20] (or -1: all) per prompt token, vLLM's field
    skip_special_tokens: bool = True
    structured_outputs: Optional[StructuredOutputsParams] = None  # unset: unconstrained

    def __post_init__(self):
        if isinstance(self.stop, str):
            self.stop = [self.stop]
        _check_type("temperature", self.temperature, (float, int), optional=True)
        _check_type("max_tokens", self.max_tokens, (int,))
        _check_type("ignore_eos", self.ignore_eos, (bool,))
        _check_type("top_k", self.top_k, (int,), optional=True)
        _check_type("top_p", self.top_p, (float, int), optional=True)
        _check_type("min_p", self.min_p, (float, int))
        _check_type("repetition_penalty", self.repetition_penalty, (float, int), optional=True)
        _check_type("presence_penalty", self.presence_penalty, (float, int))
        _check_type("frequency_penalty", self.frequency_penalty, (float, int))
        _check_type("seed", self.seed, (int,), optional=True)
        _check_type("n", self.n, (int,))
        _check_type("min_tokens", self.min_tokens, (int,))
        _check_type("logprobs", self.logprobs, (int,), optional=True)
        _check_type("prompt_logprobs", self.prompt_logprobs, (int,), optional=True)
        _check_type("structured_outputs", self.structured_outputs, (StructuredOutputsParams,),
                    optional=True)
        errors = self.validation_errors()
        if errors:
            raise ValueError(errors[0][1])
        self.to_c()  # TypeError now for values of the wrong type (e.g. a str in stop)

    def validation_errors(self):
        """(field, message) for each invalid value, with the engine's messages."""
        out = []

        def bad(name, msg):
            out.append((name, msg))

        # The engine's order and messages (src/engine/llm_engine_sampling.cpp).
        if not (1 <= self.n <= 1024):
            bad("n", f"n must be in [1, 1024], got {self.n}")
        if self.max_tokens < 1:
            bad("max_tokens", f"max_tokens must be >= 1, got {self.max_tokens}")
        if self.min_tokens < 0:
            bad("min_tokens", f"min_tokens must be >= 0, got {self.min_tokens}")
        if self.min_tokens > self.max_tokens:
            bad("min_tokens",
                f"min_tokens must be <= max_tokens ({self.max_tokens}), got {self.min_tokens}")
        t = self.temperature
        if t is not None and not (math.isfinite(t) and t >= 0):
            bad("temperature", f"temperature must be a finite number >= 0, got {_num(t)}")
        if self.top_p is not None and not (0 < self.top_p <= 1):
            bad("top_p", f"top_p must be in (0, 1], got {_num(self.top_p)}")
        if self.top_k is not None and self.top_k < -1:
            bad("top_k", f"top_k must be -1, 0 (off) or positive, got {self.top_k}")
        if not (0 <= self.min_p <= 1):
            bad("min_p", f"min_p must be in [0, 1], got {_num(self.min_p)}")
        r = self.repetition_penalty
        if r is not None and not (math.isfinite(r) and r > 0):
            bad("repetition_penalty", f"repetition_penalty must be a finite number > 0, got {_num(r)}")
        for name in ("presence_penalty", "frequency_penalty"):
            v = getattr(self, name)
            if not (-2 <= v <= 2):
                bad(name, f"{name} must be in [-2, 2], got {_num(v)}")
        for token, bias in (self.logit_bias or {}).items():
            if not math.isfinite(bias):
                bad("logit_bias", f"logit_bias: the bias of token {token} must be finite, "
                                  f"got {_num(float(bias))}")
        if any(s == "" for s in self.stop or []):
            bad("stop", "stop: a stop string must not be empty")
        if self.logprobs is not None and not (0 <= self.logprobs <= 20):
            bad("logprobs", f"logprobs must be in [0, 20], got {self.logprobs}")
        if self.prompt_logprobs is not None and not (-1 <= self.prompt_logprobs <= 20):
            bad("prompt_logprobs", f"prompt_logprobs must be in [0, 20] or -1 (the whole vocabulary), "
                                   f"got {self.prompt_logprobs}")
        if self.seed is not None and not (0 <= self.seed < 2**64):
            bad("seed", f"seed must be in [0, 2^64), got {self.seed}")
        if self.structured_outputs is not None:  # checked by the engine after the fields above
            for msg in self.structured_outputs.validation_errors():
                bad("structured_outputs", msg)
            if self.min_tokens > 0:
                bad("structured_outputs", "structured_outputs: min_tokens is not supported with a "
                                          "grammar (the grammar decides where the output may end)")
        return out

    def to_c(self):
        """The engine's SamplingParams (TypeError for values of the wrong type)."""
        c = _C.SamplingParams()
        c.temperature = None if self.temperature is None else float(self.temperature)
        c.max_tokens = self.max_tokens
        c.ignore_eos = self.ignore_eos
        c.top_k = self.top_k
        c.top_p = self.top_p
        c.min_p = self.min_p
        c.repetition_penalty = self.repetition_penalty
        c.presence_penalty = self.presence_penalty
        c.frequency_penalty = self.frequency_penalty
        c.logit_bias = {int(k): float(v) for k, v in (self.logit_bias or {}).items()}
        c.seed = self.seed
        c.n = self.n
        c.min_tokens = self.min_tokens
        c.stop = list(self.stop or [])
        c.stop_token_ids = list(self.stop_token_ids or [])
        c.include_stop_str_in_output = self.include_stop_str_in_output
        c.logprobs = self.logprobs
        c.prompt_logprobs = self.prompt_logprobs
        c.skip_special_tokens = self.skip_special_tokens
        so = self.structured_outputs
        c.structured_outputs = None if so is None else so.to_c()
        return c
